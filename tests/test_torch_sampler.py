"""ClusterClipSampler: rank split, padding, resume across world sizes, DataLoader workers, HF Trainer."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, Dataset

from clusterclip.contract.plan_locate import PlanIntegrityError
from clusterclip.errors import ClusterClipError
from clusterclip.plan import PlanConfig
from clusterclip.plan.stage import plan_stage
from clusterclip.store import RunDir, save_json, save_npy
from clusterclip.torch import ClusterClipSampler, load_plan, reorder_dataset
from tests.records import write_record


def _plan(n=37, seed=0):
    return np.random.default_rng(seed).integers(0, 1000, n).astype(np.int64)


def _interleave(per_rank):
    ws = len(per_rank)
    out = []
    for i in range(len(per_rank[0])):
        out.extend(per_rank[r][i] for r in range(ws))
    return out


@pytest.mark.parametrize("ws", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("drop_last", [False, True])
def test_ranks_split_the_plan_without_duplication_or_loss(ws, drop_last):
    plan = _plan()
    per_rank = [list(ClusterClipSampler(plan, rank=r, world_size=ws, drop_last=drop_last)) for r in range(ws)]
    lengths = {len(x) for x in per_rank}
    assert len(lengths) == 1
    assert len(per_rank[0]) == len(ClusterClipSampler(plan, rank=0, world_size=ws, drop_last=drop_last))
    merged = _interleave(per_rank)
    if drop_last:
        assert merged == plan[: (len(plan) // ws) * ws].tolist()
    else:
        padded = np.concatenate([plan, plan])[: -(-len(plan) // ws) * ws]
        assert merged == padded.tolist()


@pytest.mark.parametrize(("ws_before", "ws_after"), [(4, 4), (4, 2), (2, 3), (1, 8), (3, 1)])
def test_resume_yields_exactly_the_remaining_positions(ws_before, ws_after):
    plan = _plan(101)
    steps, batch = 5, 2
    samplers = [ClusterClipSampler(plan, rank=r, world_size=ws_before) for r in range(ws_before)]
    seen = []
    for s in samplers:
        it = iter(s)
        seen.append([next(it) for _ in range(steps * batch)])
    consumed = steps * batch * ws_before
    assert all(s.state_dict()["consumed"] == consumed for s in samplers)
    assert _interleave(seen) == plan[:consumed].tolist()
    state = samplers[0].state_dict()
    resumed = []
    for r in range(ws_after):
        s = ClusterClipSampler(plan, rank=r, world_size=ws_after)
        s.load_state_dict(state)
        resumed.append(list(s))
    rest = _interleave(resumed)
    remaining = plan[consumed:].tolist()
    assert rest[: len(remaining)] == remaining
    assert len(rest) - len(remaining) < ws_after


def test_set_consumed_and_start_and_validation():
    plan = _plan(20)
    s = ClusterClipSampler(plan, rank=1, world_size=2, start=8)
    assert list(s) == plan[9::2].tolist()
    assert s.consumed == 0
    s.set_consumed(18)
    assert len(s) == 1 and list(s) == [plan[19]]
    with pytest.raises(ClusterClipError, match=r"0\.\.20"):
        s.set_consumed(21)
    with pytest.raises(ClusterClipError, match="plan of 5"):
        s.load_state_dict({"consumed": 1, "plan_length": 5})
    with pytest.raises(ClusterClipError, match="rank"):
        ClusterClipSampler(plan, rank=2, world_size=2)


def test_epoch_after_full_pass_restarts_the_plan():
    plan = _plan(9)
    s = ClusterClipSampler(plan)
    assert list(s) == plan.tolist() and list(s) == plan.tolist()


def _run_dir_with_plans(tmp_path, configs):
    run = RunDir(tmp_path / "run")
    labels = np.random.default_rng(0).integers(0, 5, 200).astype(np.int32)
    save_npy(run.path("labels.npy"), labels)
    write_record(run, "cluster", {"k": 5}, "x", ["labels.npy"], 0.0)
    for cfg in configs:
        plan_stage(run, cfg)
    return run


def test_plan_locations_and_ambiguity(tmp_path):
    a, b = PlanConfig(budget=300, seed=1), PlanConfig(budget=300, seed=2)
    run = _run_dir_with_plans(tmp_path, [a])
    expected = np.load(run.path("plans", a.name(), "plan.npy"))
    for where in (run.root, run.path("plans", a.name()), run.path("plans", a.name(), "plan.npy")):
        assert list(ClusterClipSampler(where)) == expected.tolist()
    plan_stage(run, b)
    with pytest.raises(ClusterClipError, match=a.name()):
        ClusterClipSampler(run.root)
    assert len(ClusterClipSampler(run.root, plan_name=b.name())) == 300
    with pytest.raises(ClusterClipError, match="no finished plan"):
        ClusterClipSampler(run.root, plan_name="nope")


class _IndexDataset(Dataset):
    def __len__(self):
        return 1000

    def __getitem__(self, i):
        return i


def test_dataloader_with_workers_follows_the_plan(tmp_path):
    run = _run_dir_with_plans(tmp_path, [PlanConfig(budget=250)])
    sampler = ClusterClipSampler(run.root)
    clone = pickle.loads(pickle.dumps(sampler))
    assert clone._reader_cache is None, "the memory map is not pickled"
    loader = DataLoader(_IndexDataset(), batch_size=8, sampler=sampler, num_workers=2)
    got = torch.cat(list(loader)).tolist()
    assert got == load_plan(run.root).tolist()


def test_reorder_dataset():
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"text": [f"doc {i}" for i in range(10)]})
    plan = np.array([3, 3, 0, 9, 1])
    out = reorder_dataset(ds, plan)
    assert out["text"] == ["doc 3", "doc 3", "doc 0", "doc 9", "doc 1"]
    with pytest.raises(ClusterClipError, match="10 rows"):
        reorder_dataset(ds, np.array([10]))


@pytest.mark.parametrize("at_end", ["stop", "raise"])
def test_plan_trainer_ends_at_the_end_of_a_plan_instead_of_replaying_it(tmp_path, at_end):
    """Issue 42: a plan given as an array is the whole schedule; max_steps beyond it trains the plan's whole
    global batches and stops (or is refused before training), never drawing a second pass."""
    pytest.importorskip("accelerate")  # the Trainer needs it
    transformers = pytest.importorskip("transformers")
    datasets = pytest.importorskip("datasets")
    from clusterclip.torch.hf import PlanTrainer, PlanTrainerError

    n = 64
    plan = np.random.default_rng(1).integers(0, n, 14).astype(np.int64)
    ds = datasets.Dataset.from_dict({"input_ids": [[i + 1] * 4 for i in range(n)],
                                     "labels": [[i + 1] * 4 for i in range(n)]})
    seen: list[int] = []

    class Recording(PlanTrainer):
        def compute_loss(self, model, inputs, *args, **kwargs):
            seen.extend((inputs["input_ids"][:, 0] - 1).tolist())
            return super().compute_loss(model, inputs, *args, **kwargs)

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=n + 2, n_positions=8, n_embd=32, n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0))
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, max_steps=5, report_to=[],
        use_cpu=True, save_strategy="no", logging_strategy="no", dataloader_num_workers=0, seed=0)
    trainer = Recording(model=model, args=args, train_dataset=ds, plan=plan, at_end=at_end)
    if at_end == "raise":
        with pytest.raises(PlanTrainerError, match=r"max_steps=5 goes past the end of plan .*14 positions left from "
                                                   r"0 are 3 steps of 4 \(to step 3\)"):
            trainer.train()
        assert seen == []
    else:
        trainer.train()
        assert seen == plan[:12].tolist(), "three whole batches of the plan, then the end of the data"
        assert trainer.state.global_step == 3


def test_plan_written_by_format_1_still_loads(tmp_path):
    """A plan recorded before plan format 2 (no ``plan_format``, ``stats["draws"]``, no mtimes) loads."""
    cfg = PlanConfig(budget=300, seed=1)
    run = _run_dir_with_plans(tmp_path, [cfg])
    expected = np.load(run.path("plans", cfg.name(), "plan.npy")).tolist()
    stage = f"plans/{cfg.name()}/plan"
    rec = run.record(stage)
    for meta in rec["artifacts"].values():
        meta.pop("mtime_ns", None)
    rec["stats"]["draws"] = rec["stats"].pop("length")
    rec.pop("plan_format", None)
    save_json(run.record_path(stage), {**rec, "format_version": 1})
    assert list(ClusterClipSampler(run.root)) == expected
    assert load_plan(run.root).tolist() == expected


def test_sampler_refuses_a_plan_made_stale_by_reclustering(tmp_path):
    """Issue 16 item 4: after `cluster --k 3` the old plan's indices belong to another clustering."""
    from clusterclip.cli.main import main
    from tests.test_cli import make_corpus

    corpus = make_corpus(tmp_path / "c.jsonl", {"cooking": 60, "astronomy": 30, "finance": 20, "sailing": 10})
    run = tmp_path / "run"
    assert main(["run", str(corpus), "--out", str(run), "--k", "4", "--embedder", "hashing",
                 "--strategies", "clusterclip", "-q"]) == 0
    assert len(list(ClusterClipSampler(run, rank=0, world_size=1))) > 0
    assert main(["cluster", str(run), "--k", "3", "-q"]) == 0
    with pytest.raises(ClusterClipError, match=r"stale.*clusterclip plan"):
        ClusterClipSampler(run, rank=0, world_size=1)


def test_epochs_replay_the_plan_and_set_epoch_moves_forward_only():
    plan = _plan(9)
    s = ClusterClipSampler(plan)
    s.set_epoch(0)
    assert list(s) == plan.tolist() and (s.epoch, s.consumed) == (1, 0)
    s.set_epoch(1)  # the epoch the finished pass moved to: no change
    assert s.state_dict()["epoch"] == 1
    with pytest.raises(ClusterClipError, match=r"set_epoch\(0\).*epoch 1"):
        s.set_epoch(0)
    s.set_consumed(4)
    s.set_epoch(3)  # a later epoch starts at its first position
    assert (s.epoch, s.consumed) == (3, 0) and list(s) == plan.tolist()


@pytest.mark.parametrize(("ws_before", "ws_after", "batch"), [(2, 3, 2), (2, 1, 3), (3, 2, 1)])
def test_consumed_state_resumes_across_an_epoch_boundary(ws_before, ws_after, batch):
    plan = _plan(23)
    samplers = [ClusterClipSampler(plan, rank=r, world_size=ws_before) for r in range(ws_before)]
    per_rank = len(samplers[0])
    for s in samplers:
        assert len(list(s)) == per_rank  # epoch 0 done
        s.set_epoch(1)
        it = iter(s)
        [next(it) for _ in range(3 * batch)]  # three batches of epoch 1
    state = samplers[0].state_dict(consumed_batches=3, batch_size=batch)
    assert (state["epoch"], state["consumed"], state["world_size"]) == (1, 3 * batch * ws_before, ws_before)
    assert state["pad"] == (-23) % ws_before
    resumed = [ClusterClipSampler(plan, rank=r, world_size=ws_after) for r in range(ws_after)]
    for s in resumed:
        s.load_state_dict(state)
        s.set_epoch(1)  # the loop's epoch: the sampler is in it already
    pad = resumed[0].pad
    assert pad == (-(23 - state["consumed"])) % ws_after
    assert _interleave([list(s) for s in resumed]) == plan[state["consumed"]:].tolist() + plan[:pad].tolist()
    assert all((s.epoch, s.consumed) == (2, 0) for s in resumed)


def test_consumed_state_checks_its_arguments():
    s = ClusterClipSampler(_plan(10), rank=0, world_size=2)
    with pytest.raises(ClusterClipError, match="together"):
        s.state_dict(consumed_batches=1)
    assert s.state_dict(consumed_batches=2, batch_size=3)["consumed"] == 10  # the last batch is short
    with pytest.raises(ClusterClipError, match="exceeds the 5 samples"):
        s.state_dict(consumed_batches=3, batch_size=3)
    assert len(list(s)) == 5  # a finished pass: its last batch, or nothing yet of the next epoch
    assert s.state_dict(consumed_batches=2, batch_size=3)["epoch"] == 0
    assert (s.state_dict(consumed_batches=0, batch_size=3)["epoch"], s.consumed) == (1, 0)


def test_world_size_beyond_the_plan_is_refused_and_endless_streams_epochs():
    plan = _plan(5)
    with pytest.raises(ClusterClipError, match="world_size 8 exceeds the plan's 5 draws"):
        ClusterClipSampler(plan, rank=0, world_size=8)
    s = ClusterClipSampler(plan, rank=1, world_size=2, endless=True)
    with pytest.raises(TypeError):
        len(s)
    it = iter(s)
    assert [next(it) for _ in range(6)] == np.tile(plan, 3)[1::2][:6].tolist()
    assert (s.epoch, s.consumed) == (2, 2)


def test_stateful_dataloader_saves_what_it_handed_over(tmp_path):
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    run = _run_dir_with_plans(tmp_path, [PlanConfig(budget=250)])
    sampler = ClusterClipSampler(run.root)
    loader = sdl.StatefulDataLoader(_IndexDataset(), batch_size=8, sampler=sampler, num_workers=2)
    it = iter(loader)
    got = [next(it) for _ in range(5)]
    assert sampler.consumed > 40, "workers fetched ahead"
    from clusterclip.torch import sampler_state

    state = sampler_state(loader.state_dict())
    assert (state["epoch"], state["consumed"], state["counted"]) == (0, 40, "yielded")
    fresh = ClusterClipSampler(run.root)
    fresh.load_state_dict(state)
    assert torch.cat(got).tolist() + list(fresh) == load_plan(run.root).tolist()
    del it


def test_a_plan_file_without_its_record_says_what_is_not_checked(tmp_path):
    run = _run_dir_with_plans(tmp_path, [PlanConfig(budget=50)])
    folder = next(run.path("plans").iterdir())
    (folder / "plan.json").unlink()
    with pytest.warns(UserWarning, match=r"no plan\.json.*0\.\.199 \(the run's documents\).*cannot be"):
        s = ClusterClipSampler(folder / "plan.npy")
    assert len(list(s)) == 50
    order = np.load(folder / "plan.npy")
    order[3] = 200
    np.save(folder / "plan.npy", order)
    with pytest.warns(UserWarning), pytest.raises(ClusterClipError, match="document index 200"):
        list(ClusterClipSampler(folder / "plan.npy"))


def test_a_plan_file_shipped_alone_needs_n_docs_to_bound_its_indices(tmp_path):
    run = _run_dir_with_plans(tmp_path, [PlanConfig(budget=50)])
    shipped = tmp_path / "shipped" / "plan.npy"
    shipped.parent.mkdir()
    order = np.load(next(run.path("plans").iterdir()) / "plan.npy")
    order[3] = 10**9
    np.save(shipped, order)
    with pytest.raises(PlanIntegrityError, match=r"no plan\.json beside it and no run directory.*pass n_docs="):
        ClusterClipSampler(shipped)
    with pytest.raises(PlanIntegrityError, match=r"no plan\.json"):
        load_plan(shipped)
    with pytest.warns(UserWarning, match=r"0\.\.199 \(n_docs\)"), \
            pytest.raises(ClusterClipError, match="document index 1000000000"):
        list(ClusterClipSampler(shipped, n_docs=200))
