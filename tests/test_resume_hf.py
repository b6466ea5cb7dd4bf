"""The Hugging Face ``Trainer`` on a plan: checkpoints written at 2 processes, resumed at 1 and 3 with another
per-device batch size; every sample trained once, in plan order, up to the plan's end, where training stops.

``train_on_plan`` is the recipe of docs/sampling.md verbatim. Processes are a gloo group (accelerate's
multi-CPU mode); a tiny GPT-2 built from its config (no download) logs the rows of every micro-batch it trains.
"""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
datasets = pytest.importorskip("datasets")

from clusterclip.torch import load_plan
from tests.test_resume_loops import DOCS, PLAN, README, _free_port, make_run_dir

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def train_on_plan(run_dir, plan_name, documents, model, output_dir, batch_size, max_steps, resume=None):
    from transformers import TrainingArguments

    from clusterclip.torch.hf import PlanTrainer

    args = TrainingArguments(output_dir=output_dir, per_device_train_batch_size=batch_size,
                             max_steps=max_steps, save_steps=1, use_cpu=True, report_to=[])
    trainer = PlanTrainer(model=model, args=args, train_dataset=documents,  # row i = document i of the run
                          plan=run_dir, plan_name=plan_name)             # the plan, by name
    trainer.train(resume_from_checkpoint=resume)  # a checkpoint of any process count and batch size


def train_on_export(export_dir, rows, model, output_dir, batch_size, max_steps, resume=None):
    from transformers import TrainingArguments

    from clusterclip.torch.hf import PlanTrainer

    args = TrainingArguments(output_dir=output_dir, per_device_train_batch_size=batch_size,
                             max_steps=max_steps, save_steps=1, use_cpu=True, report_to=[])
    trainer = PlanTrainer(model=model, args=args, train_dataset=rows,  # the export's rows (load_from_disk), tokenized
                          export=export_dir)                         # rows in plan order, walked in that order
    trainer.train(resume_from_checkpoint=resume)  # a checkpoint of any process count and batch size


def test_docs_show_this_recipe():
    for doc in (DOCS, README):
        assert inspect.getsource(train_on_plan) in doc.read_text(encoding="utf-8"), f"{doc.name} shows the recipe"
    export_doc = DOCS.parent / "export.md"
    assert inspect.getsource(train_on_export) in export_doc.read_text(encoding="utf-8"), "export.md shows the recipe"


class _Logged(transformers.GPT2LMHeadModel):
    """Logs the document of every row it trains on (row ``i`` holds token ``i + 1``)."""

    trained: list[list[int]]

    def forward(self, input_ids: Any = None, labels: Any = None, **kwargs: Any) -> Any:
        if self.training:
            self.trained.append((input_ids[:, 0] - 1).tolist())
        return super().forward(input_ids=input_ids, labels=labels, **kwargs)


def _model(n_docs: int) -> _Logged:
    torch.manual_seed(0)
    model = _Logged(transformers.GPT2Config(vocab_size=n_docs + 2, n_positions=8, n_embd=16, n_layer=1, n_head=2,
                                            bos_token_id=0, eos_token_id=0))
    model.trained = []
    return model


def _documents(n_docs: int) -> Any:
    rows = [[i + 1] * 4 for i in range(n_docs)]
    return datasets.Dataset.from_dict({"input_ids": rows, "labels": rows})


def _train(job: dict[str, Any], rank: int = 0) -> None:
    model = _model(job["n_docs"])
    if "export" in job:  # the export's rows, row i tokenized as [i + 1] * 4 so the model logs the row
        rows = datasets.load_from_disk(job["export"])
        rows = rows.map(lambda _, i: {"input_ids": [i + 1] * 4, "labels": [i + 1] * 4}, with_indices=True,
                        remove_columns=rows.column_names)
        train_on_export(job["export"], rows, model, job["out"], job["batch"], job["steps"], job["resume"])
    else:
        train_on_plan(job["run"], PLAN, _documents(job["n_docs"]), model, job["out"], job["batch"], job["steps"],
                      job["resume"])
    Path(f"{job['out']}/trained.rank{rank}.json").write_text(json.dumps(model.trained))


def _process(rank: int, world_size: int, job: dict[str, Any]) -> None:
    from accelerate.state import AcceleratorState, PartialState

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(job["port"]), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_WORLD_SIZE=str(world_size))
    AcceleratorState._reset_state(True)  # forked from pytest: forget its single-process state
    PartialState._reset_state()
    job.get("train", _train)(job, rank)


def run_trainer(processes: int, **job: Any) -> list[list[int]]:
    """Train on ``processes`` processes (``job["train"]``: the function training one, default :func:`_train`); the
    global order trained, micro-step by micro-step, rank by rank."""
    job = {"resume": None, "port": _free_port(), **job}
    if processes == 1:
        job.get("train", _train)(job)
    else:
        torch.multiprocessing.start_processes(_process, args=(processes, job), nprocs=processes, start_method="fork")
    logs = [json.loads(Path(f"{job['out']}/trained.rank{r}.json").read_text()) for r in range(processes)]
    return [[i for log in logs for i in log[step]] for step in range(len(logs[0]))]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run_dir(tmp_path_factory.mktemp("resume_hf"))


@pytest.mark.slow
def test_trainer_checkpoints_resume_exactly_at_other_process_counts(run_dir, tmp_path):
    """Stopped at 2 processes, resumed at 1 and 3 with another batch size and a ``max_steps`` beyond the plan: each
    trains the plan on from the checkpoint's position and stops at its end (the last whole global batch), with a
    checkpoint there; nothing of the plan is replayed."""
    plan = load_plan(run_dir, PLAN).tolist()
    n_docs = int(np.load(run_dir / "labels.npy").shape[0])
    common = {"run": str(run_dir), "n_docs": n_docs}
    out = str(tmp_path / "two")
    first = run_trainer(2, **common, out=out, batch=4, steps=8)  # global batch 8
    assert [i for step in first for i in step] == plan[:8 * 8]
    state = json.loads(Path(out, "checkpoint-3", "clusterclip_plan.json").read_text())
    assert state["sampler"]["epoch"] == 0 and state["sampler"]["consumed"] == 24 and state["processes"] == 2
    for processes, batch, ckpt, at in ((1, 5, "checkpoint-3", 24), (3, 3, "checkpoint-8", 64)):
        done, steps = int(ckpt.split("-")[1]), (len(plan) - at) // (batch * processes)
        resumed = run_trainer(processes, **common, out=str(tmp_path / ckpt), batch=batch, steps=done + steps + 5,
                              resume=f"{out}/{ckpt}")
        assert len(resumed) == steps, "training stops at the plan's end, not at max_steps"
        assert [i for step in resumed for i in step] == plan[at:at + steps * batch * processes]
        end = json.loads(Path(tmp_path, ckpt, f"checkpoint-{done + steps}", "clusterclip_plan.json").read_text())
        assert (end["sampler"]["epoch"], end["sampler"]["consumed"]) == (0, at + steps * batch * processes)


def test_trainer_refusals_name_the_fix(run_dir, tmp_path):
    from clusterclip.torch.hf import PlanTrainer, PlanTrainerError

    n_docs = int(np.load(run_dir / "labels.npy").shape[0])

    def trainer(rows: int, max_steps: int, **options: Any) -> PlanTrainer:
        args = transformers.TrainingArguments(output_dir=str(tmp_path / "o"), per_device_train_batch_size=4,
                                              max_steps=max_steps, use_cpu=True, report_to=[])
        return PlanTrainer(model=_model(n_docs), args=args, train_dataset=_documents(rows), plan=run_dir,
                           plan_name=PLAN, **options)

    with pytest.raises(PlanTrainerError, match=r"at_end must be 'stop'.*got 'wrap'"):
        trainer(n_docs, 5, at_end="wrap")
    length = len(load_plan(run_dir, PLAN))
    with pytest.raises(PlanTrainerError, match=rf"max_steps=40 goes past the end of plan '{PLAN}': the {length} "
                                               rf"positions left from 0 are {length // 4} steps of 4"):
        trainer(n_docs, 40, at_end="raise").train()

    with pytest.raises(PlanTrainerError, match="max_steps"):
        trainer(n_docs, -1)
    with pytest.raises(PlanTrainerError, match=r"has 60 rows .* 101 documents.*row i = document i"):
        trainer(60, 5)
    (tmp_path / "checkpoint-2").mkdir()
    with pytest.raises(PlanTrainerError, match=r"clusterclip_plan\.json"):
        trainer(n_docs, 5).train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))


def test_the_trainer_stops_at_the_end_of_the_plan_instead_of_replaying_it(run_dir, tmp_path, caplog):
    """``max_steps`` beyond the plan: the last whole global batch before the end is the last step (checkpointed),
    with a warning at the start; no document is drawn again as a new epoch."""
    plan = load_plan(run_dir, PLAN).tolist()
    n_docs = int(np.load(run_dir / "labels.npy").shape[0])
    model, out = _model(n_docs), str(tmp_path / "o")
    with caplog.at_level("WARNING", logger="clusterclip.torch.hf"):
        train_on_plan(run_dir, PLAN, _documents(n_docs), model, out, 8, 40)
    steps = len(plan) // 8
    assert [i for batch in model.trained for i in batch] == plan[:steps * 8]
    assert "training stops there: the end of the plan is the end of the data" in caplog.text
    saved = json.loads(Path(out, f"checkpoint-{steps}", "clusterclip_plan.json").read_text())["sampler"]
    assert (saved["epoch"], saved["consumed"]) == (0, steps * 8)
    from clusterclip.torch.hf import PlanTrainerError

    with pytest.raises(PlanTrainerError, match=r"nothing of plan .* is left to train"):
        train_on_plan(run_dir, PLAN, _documents(n_docs), _model(n_docs), out, 8, 40,
                      resume=f"{out}/checkpoint-{steps}")


@pytest.mark.slow
def test_the_hf_export_recipe_resumes_exactly_at_another_process_count(run_dir, tmp_path):
    """docs/export.md's recipe for an ``hf`` export: stopped at 2 processes, resumed at 1 with another batch size,
    every row trained once, in the export's order (a SequentialSampler Trainer retrained 24 rows here)."""
    from clusterclip.export.stage import export_plan
    from clusterclip.store import RunDir

    export = tmp_path / "hf"
    export_plan(RunDir(run_dir), PLAN, export, fmt="hf")
    n_rows = datasets.load_from_disk(str(export)).num_rows
    stream = list(range(n_rows)) * 4
    common = {"export": str(export), "n_docs": n_rows}
    out = str(tmp_path / "two")
    first = run_trainer(2, **common, out=out, batch=4, steps=6)
    assert [i for step in first for i in step] == stream[:6 * 8]
    resumed = run_trainer(1, **common, out=str(tmp_path / "one"), batch=5, steps=9, resume=f"{out}/checkpoint-3")
    assert [i for step in resumed for i in step] == stream[24:24 + 6 * 5]
