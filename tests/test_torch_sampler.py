"""ClusterClipSampler: rank split, padding, resume across world sizes, DataLoader workers, HF Trainer."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, Dataset  # noqa: E402

from clusterclip.errors import ClusterClipError  # noqa: E402
from clusterclip.plan import PlanConfig, plan_stage  # noqa: E402
from clusterclip.store import RunDir, save_json, save_npy  # noqa: E402
from clusterclip.torch import ClusterClipSampler, load_plan, reorder_dataset  # noqa: E402


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
    run.write_record("cluster", {"k": 5}, "x", ["labels.npy"], 0.0)
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


def test_hf_trainer_recipe_follows_the_plan(tmp_path):
    pytest.importorskip("accelerate")  # the Trainer needs it
    transformers = pytest.importorskip("transformers")
    datasets = pytest.importorskip("datasets")
    n = 64
    plan = np.random.default_rng(1).integers(0, n, 40).astype(np.int64)
    ds = datasets.Dataset.from_dict({"input_ids": [[i + 1] * 4 for i in range(n)],
                                     "labels": [[i + 1] * 4 for i in range(n)]})
    seen: list[int] = []

    class PlanTrainer(transformers.Trainer):
        def _get_train_sampler(self, train_dataset=None):
            return ClusterClipSampler(plan, rank=0, world_size=1)

        def compute_loss(self, model, inputs, *args, **kwargs):
            seen.extend((inputs["input_ids"][:, 0] - 1).tolist())
            return super().compute_loss(model, inputs, *args, **kwargs)

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=n + 2, n_positions=8, n_embd=32, n_layer=1, n_head=2))
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, max_steps=5, report_to=[],
        use_cpu=True, save_strategy="no", logging_strategy="no", dataloader_num_workers=0, seed=0)
    PlanTrainer(model=model, args=args, train_dataset=ds).train()
    assert seen == plan[:20].tolist()


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
    from clusterclip.cli import main
    from tests.test_cli import make_corpus

    corpus = make_corpus(tmp_path / "c.jsonl", {"cooking": 60, "astronomy": 30, "finance": 20, "sailing": 10})
    run = tmp_path / "run"
    assert main(["run", str(corpus), "--out", str(run), "--k", "4", "--embedder", "hashing",
                 "--strategy", "clusterclip", "-q"]) == 0
    assert len(list(ClusterClipSampler(run, rank=0, world_size=1))) > 0
    assert main(["cluster", str(run), "--k", "3", "-q"]) == 0
    with pytest.raises(ClusterClipError, match=r"stale.*clusterclip plan"):
        ClusterClipSampler(run, rank=0, world_size=1)
