"""Online mixing under the Hugging Face ``Trainer``: ``PlanTrainer(..., online=OnlineMixer(...))`` trains exactly
the chain of plans its mixer writes, each up to its switch, under the root's cap; a run killed after a checkpoint
and resumed from it trains the same documents and writes the same chain as an uninterrupted one; 2 processes
train the chain in order too. ``train_online`` is the recipe of docs/sampling.md verbatim. A tiny GPT-2 built
from its config (no download, no dropout, so a resumed run computes the same losses) logs the documents it trains.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
datasets = pytest.importorskip("datasets")

from clusterclip.contract.cluster import CLUSTER_STAGE, LABELS
from clusterclip.contract.plan import list_plans
from clusterclip.errors import ClusterClipError
from clusterclip.plan import PlanConfig
from clusterclip.plan.stage import plan_stage
from clusterclip.store import RunDir, save_npy
from clusterclip.torch.hf_online import IGNORE_INDEX, sample_losses
from clusterclip.torch.mixer import OnlineMixer, online_record
from tests.records import write_record
from tests.test_online import CAP, DOCS, ROOT, chain_of, trained_stream
from tests.test_resume_hf import _documents, _Logged
from tests.test_resume_loops import _free_port

os.environ.setdefault("HF_HUB_OFFLINE", "1")
N_DOCS = 120
EVERY = 40
STEPS = 25  # 25 steps of 8: the root's 200 positions, updates after steps 5, 10, 15 and 20


def train_online(run_dir, plan_name, documents, model, output_dir, batch_size, max_steps, every, resume=None):
    from transformers import TrainingArguments

    from clusterclip.torch.hf import PlanTrainer
    from clusterclip.torch.mixer import OnlineMixer

    args = TrainingArguments(output_dir=output_dir, per_device_train_batch_size=batch_size,
                             max_steps=max_steps, save_steps=1, use_cpu=True, report_to=[])
    mixer = OnlineMixer(run_dir, plan_name, every=every)  # rule="bandit" (ODM) or "gradient"
    trainer = PlanTrainer(model=model, args=args, train_dataset=documents,  # row i = document i, with labels
                          online=mixer)                   # trains the root plan, then each continuation
    trainer.train(resume_from_checkpoint=resume)  # the plan the checkpoint reached, its controller and window


def test_docs_show_this_recipe():
    assert inspect.getsource(train_online) in DOCS.read_text(encoding="utf-8"), \
        "docs/sampling.md does not show train_online as tested"


class _Killed(Exception):
    """The training process dies."""


class _Model(_Logged):
    """Logs its documents; raises :class:`_Killed` at micro-batch ``kill_at`` (counted from 0)."""

    kill_at: int | None = None

    def forward(self, input_ids: Any = None, labels: Any = None, **kwargs: Any) -> Any:
        if self.training and len(self.trained) == self.kill_at:
            raise _Killed
        return super().forward(input_ids=input_ids, labels=labels, **kwargs)


def _model(kill_at: int | None = None) -> _Model:
    torch.manual_seed(0)
    model = _Model(transformers.GPT2Config(vocab_size=N_DOCS + 2, n_positions=8, n_embd=16, n_layer=1, n_head=2,
                                           bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0,
                                           attn_pdrop=0.0))
    model.trained, model.kill_at = [], kill_at
    return model


def _make_run(folder: Path) -> Path:
    """A run of 120 documents in 5 clusters with one root plan of 200 draws, each document at most twice."""
    run = RunDir(folder)
    save_npy(run.path(LABELS), np.random.default_rng(0).integers(0, 5, N_DOCS).astype(np.int32))
    write_record(run, CLUSTER_STAGE, {"k": 5}, "x", [LABELS], 0.0)
    plan_stage(run, PlanConfig(budget=200, max_repeat=CAP))
    return run.root


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _make_run(tmp_path_factory.mktemp("online_hf") / "run")


def _fresh(pristine: Path, folder: Path) -> str:
    """A copy of the run with its root plan only."""
    shutil.copytree(pristine, folder)
    return str(folder)


def _saved(out: str, step: int) -> dict[str, Any]:
    return json.loads(Path(out, f"checkpoint-{step}", "clusterclip_plan.json").read_text())


def _flat(model: _Model) -> list[int]:
    return [d for batch in model.trained for d in batch]


def _spy_on_reports(monkeypatch: Any) -> list[list[int]]:
    """The cluster ids of every ``OnlineMixer.report`` call (this process's, before the all-reduce)."""
    reports: list[list[int]] = []
    report = OnlineMixer.report

    def spy(self: OnlineMixer, cluster_ids: Any, losses: Any) -> None:
        assert np.isfinite(losses).all() and len(losses) == len(cluster_ids)
        reports.append(np.asarray(cluster_ids).tolist())
        report(self, cluster_ids, losses)

    monkeypatch.setattr(OnlineMixer, "report", spy)
    return reports


@pytest.fixture(scope="module")
def whole(pristine: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """An uninterrupted online run on its own copy of the run directory."""
    tmp = tmp_path_factory.mktemp("whole")
    run, out, model = _fresh(pristine, tmp / "run"), str(tmp / "out"), _model()
    train_online(run, ROOT, _documents(N_DOCS), model, out, 8, STEPS, EVERY)
    return {"run": run, "trained": _flat(model), "end": _saved(out, STEPS)}


def test_the_online_trainer_trains_the_chain_in_order_under_the_cap(whole):
    plan = whole["end"]["mixer"]["plan"]
    chain = chain_of(Path(whole["run"]), plan)
    assert [(name, n) for name, n in chain[1:-1]] == [(name, EVERY) for name, _ in chain[1:-1]]
    assert len(chain) == 5, "a switch after every 40 positions"
    assert whole["trained"] == trained_stream(Path(whole["run"]), plan), "each plan of the chain up to its switch"
    assert len(whole["trained"]) == 200 and int(np.bincount(whole["trained"]).max()) <= CAP
    record = online_record(whole["run"], plan)
    assert record.position == 160 and record.controller.to_json() == whole["end"]["mixer"]["controller"]
    sampler = whole["end"]["sampler"]
    assert (sampler["plan"], sampler["epoch"], sampler["consumed"]) == (plan, 1, 0), "the chain's end, in its plan"


def test_past_the_end_of_the_chain_the_trainer_stops_instead_of_replaying(pristine, tmp_path):
    """``max_steps`` beyond the chain (30 steps of 8 > the root's 200 positions): the Trainer trains the chain and
    stops at its end (step 25, checkpointed) instead of replaying the last continuation as a new epoch (documents
    drawn beyond the cap). The learning-rate schedule follows max_steps, so the losses and weights are not the
    25-step run's."""
    from clusterclip.torch.hf import PlanTrainerError

    run, out, model = _fresh(pristine, tmp_path / "run"), str(tmp_path / "out"), _model()
    train_online(run, ROOT, _documents(N_DOCS), model, out, 8, STEPS + 5, EVERY)
    plan = _saved(out, STEPS)["mixer"]["plan"]
    assert _flat(model) == trained_stream(Path(run), plan) and len(_flat(model)) == 200
    assert int(np.bincount(_flat(model)).max()) <= CAP and not Path(out, f"checkpoint-{STEPS + 1}").exists()
    with pytest.raises(PlanTrainerError, match=r"nothing of the online chain of plan .* is left to train"):
        train_online(run, ROOT, _documents(N_DOCS), _model(), out, 8, STEPS + 5, EVERY,
                     resume=f"{out}/checkpoint-{STEPS}")


def test_at_end_raise_refuses_max_steps_past_the_chain(pristine, tmp_path):
    from clusterclip.torch.hf import PlanTrainer, PlanTrainerError

    run = _fresh(pristine, tmp_path / "run")
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "o"), per_device_train_batch_size=8,
                                          max_steps=STEPS + 1, use_cpu=True, report_to=[])
    trainer = PlanTrainer(model=_model(), args=args, train_dataset=_documents(N_DOCS), at_end="raise",
                          online=OnlineMixer(run, ROOT, every=EVERY))
    with pytest.raises(PlanTrainerError, match=rf"max_steps={STEPS + 1} goes past the end of the online chain"):
        trainer.train()
    assert list_plans(RunDir(run)) == [ROOT], "refused before training"


@pytest.mark.parametrize("killed_at", [7, 10])  # mid-window; at the step that switched to the third plan
def test_a_killed_online_run_resumes_in_the_plan_it_reached(pristine, whole, tmp_path, killed_at):
    run, out = _fresh(pristine, tmp_path / "run"), str(tmp_path / "out")
    first = _model(kill_at=killed_at)  # dies in step killed_at + 1, after checkpoint-<killed_at>
    with pytest.raises(_Killed):
        train_online(run, ROOT, _documents(N_DOCS), first, out, 8, STEPS, EVERY)
    saved = _saved(out, killed_at)
    assert saved["mixer"]["plan"] == saved["sampler"]["plan"] != ROOT
    second = _model()
    train_online(run, ROOT, _documents(N_DOCS), second, out, 8, STEPS, EVERY, resume=f"{out}/checkpoint-{killed_at}")
    assert _flat(first) + _flat(second) == whole["trained"], "the same documents as the uninterrupted run"
    assert _saved(out, STEPS)["mixer"] == whole["end"]["mixer"], "the same controller, window and plan"
    assert list_plans(RunDir(run)) == list_plans(RunDir(whole["run"])), "the same chain"
    for name in list_plans(RunDir(run)):
        assert Path(run, "plans", name, "plan.npy").read_bytes() == \
            Path(whole["run"], "plans", name, "plan.npy").read_bytes()


def test_gradient_accumulation_and_unlabelled_tokens(pristine, tmp_path, monkeypatch):
    """2 micro-batches of 4 per step; the last token's label ignored (a sample's loss averages the others)."""
    from clusterclip.torch.hf import PlanTrainer

    run, model, reports = _fresh(pristine, tmp_path / "run"), _model(), _spy_on_reports(monkeypatch)
    rows = [[i + 1] * 4 for i in range(N_DOCS)]
    documents = datasets.Dataset.from_dict({"input_ids": rows, "labels": [[*r[:-1], IGNORE_INDEX] for r in rows]})
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4,
                                          gradient_accumulation_steps=2, max_steps=12, save_steps=100, use_cpu=True,
                                          report_to=[])
    trainer = PlanTrainer(model=model, args=args, train_dataset=documents, plan=run, plan_name=ROOT,
                          online=OnlineMixer(run, ROOT, every=EVERY))
    trainer.train()
    plan = trainer.online.mixer.plan
    assert len(chain_of(Path(run), plan)) == 3
    assert _flat(model) == trained_stream(Path(run), plan)[:12 * 8]
    labels = np.load(Path(run) / LABELS)
    steps = [model.trained[i] + model.trained[i + 1] for i in range(0, len(model.trained), 2)]
    assert reports == [labels[step].tolist() for step in steps], "one report per step: its documents' clusters"


def test_sample_losses_are_each_samples_own_causal_lm_loss():
    model = _model().eval()
    ids = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]])
    labels = ids.clone()
    labels[1, :3] = IGNORE_INDEX
    labels[2, 1:] = IGNORE_INDEX  # no token left to predict
    with torch.no_grad():
        losses, kept = sample_losses(model(input_ids=ids).logits, labels)
        own = [float(model(input_ids=ids[i:i + 1], labels=labels[i:i + 1]).loss) for i in range(2)]
    assert kept.tolist() == [True, True, False]
    assert losses[:2].tolist() == pytest.approx(own, rel=1e-5)
    assert float(losses[2]) == 0.0


def test_online_refusals_name_the_fix(pristine, tmp_path):
    from clusterclip.torch.hf import PlanTrainer, PlanTrainerError

    run = _fresh(pristine, tmp_path / "run")
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "o"), per_device_train_batch_size=8,
                                          max_steps=3, save_steps=1, use_cpu=True, report_to=[])

    def trainer(**options: Any) -> PlanTrainer:
        return PlanTrainer(model=_model(), args=args, train_dataset=_documents(N_DOCS), **options)

    with pytest.raises(PlanTrainerError, match="not export="):
        trainer(export=str(tmp_path), online=OnlineMixer(run, ROOT, every=EVERY))
    with pytest.raises(PlanTrainerError, match="leave them out or name the mixer's"):
        trainer(plan=run, plan_name="other", online=OnlineMixer(run, ROOT, every=EVERY))
    trainer(plan=run, plan_name=ROOT).train()
    with pytest.raises(ClusterClipError, match="holds no mixer state"):
        trainer(online=OnlineMixer(run, ROOT, every=EVERY)).train(resume_from_checkpoint=str(tmp_path / "o" /
                                                                                             "checkpoint-2"))
    shutil.rmtree(tmp_path / "o")
    trainer(online=OnlineMixer(run, ROOT, every=8)).train()
    with pytest.raises(PlanTrainerError, match="online run"):
        trainer(plan=run, plan_name=ROOT).train(resume_from_checkpoint=str(tmp_path / "o" / "checkpoint-2"))


# -- two processes

def _process(rank: int, world_size: int, job: dict[str, Any]) -> None:
    from accelerate.state import AcceleratorState, PartialState

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(job["port"]), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_WORLD_SIZE=str(world_size))
    AcceleratorState._reset_state(True)  # forked from pytest: forget its single-process state
    PartialState._reset_state()
    model, reports = _model(), _spy_on_reports(pytest.MonkeyPatch())
    train_online(job["run"], ROOT, _documents(N_DOCS), model, job["out"], 4, STEPS, EVERY)
    Path(f"{job['out']}/trained.rank{rank}.json").write_text(json.dumps([model.trained, reports]))


@pytest.mark.slow
def test_two_processes_train_the_chain_in_order(pristine, tmp_path):
    """Both ranks switch together (the stream they interleave is the chain's); the chain is not one process's:
    losses of batches of 4 differ from those of 8 in their last bits, and so do the weights."""
    job = {"run": _fresh(pristine, tmp_path / "run"), "out": str(tmp_path / "out"), "port": _free_port()}
    torch.multiprocessing.start_processes(_process, args=(2, job), nprocs=2, start_method="fork")
    logs, reports = zip(*[json.loads(Path(job["out"], f"trained.rank{r}.json").read_text()) for r in range(2)],
                        strict=True)
    labels = np.load(Path(job["run"]) / LABELS)
    assert list(reports) == [[labels[b].tolist() for b in log] for log in logs], "each rank reports its documents"
    trained = [d for step in zip(*logs, strict=True) for batch in step for d in batch]
    plan = _saved(job["out"], STEPS)["mixer"]["plan"]
    assert len(chain_of(Path(job["run"]), plan)) == 5
    assert trained == trained_stream(Path(job["run"]), plan), "micro-batch m of rank r: positions (2m + r) x 4 on"
