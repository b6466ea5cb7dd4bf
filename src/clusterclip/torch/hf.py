"""Hugging Face ``Trainer`` integration: train on a plan and resume exactly at any number of processes.

The ``Trainer`` resumes by skipping ``global_step x gradient_accumulation`` batches of *the new* loader, so
a checkpoint resumed with another number of processes or batch size lands elsewhere in the data, and it
never reads a sampler's state. :class:`PlanTrainer` instead gives the Trainer an endless
``ClusterClipSampler`` over the global plan (accelerate deals its batches out to the processes), writes the
plan position reached at each checkpoint (``clusterclip_plan.json``: global step x global batch after the
position the run started at), restores it on resume and turns the Trainer's own batch skipping off.
"""

from __future__ import annotations

import json
import os
from typing import Any

from transformers import Trainer, TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from clusterclip.errors import ClusterClipError
from clusterclip.torch.sampler import ClusterClipSampler

__all__ = ["PLAN_STATE_FILE", "PlanTrainer", "PlanTrainerError"]

PLAN_STATE_FILE = "clusterclip_plan.json"


class PlanTrainerError(ClusterClipError, ValueError):
    """A ``PlanTrainer`` set-up or checkpoint that cannot give an exact data position."""


class PlanTrainer(Trainer):
    """A ``Trainer`` that trains on plan order, one global position after the other, and resumes exactly.

    ``train_dataset`` must hold the run's documents in corpus order (row ``i`` is document ``i`` of the run,
    as the corpus parts or ``clusterclip export`` without reordering give it), not ``reorder_dataset``'s
    output: the sampler maps plan positions to rows. ``plan``/``plan_name`` as for ``ClusterClipSampler``
    (the run directory and the plan's name when it holds several). Or ``export``: a ``clusterclip export``
    folder (``--format hf``, say), with ``train_dataset`` its rows (``datasets.load_from_disk``), which already
    hold the plan's order: the sampler walks its rows. ``max_steps`` is required: training is
    counted in steps of the global batch (per device x processes x accumulation) along the plan, epochs
    following each other without a pad. Resuming (``train(resume_from_checkpoint=...)``) continues at the
    checkpoint's plan position with any number of processes or batch size.
    """

    def __init__(self, *args: Any, plan: Any = None, plan_name: str | None = None,
                 export: str | os.PathLike[str] | None = None, **kwargs: Any) -> None:
        if (plan is None) == (export is None):
            raise PlanTrainerError("give PlanTrainer either plan= (a run's plan; train_dataset: the run's documents "
                                   "in corpus order) or export= (a clusterclip export; train_dataset: its rows)")
        super().__init__(*args, **kwargs)
        self.export = export
        self.plan_sampler = ClusterClipSampler.from_export(export, rank=0, world_size=1, endless=True) \
            if export is not None else \
            ClusterClipSampler(plan, rank=0, world_size=1, plan_name=plan_name, endless=True)
        if self.args.max_steps <= 0:
            raise PlanTrainerError(
                f"PlanTrainer counts training in steps: set TrainingArguments(max_steps=...) (one epoch of the "
                f"plan is {self.plan_sampler.total} samples / {self._global_batch()} per step)")
        if not hasattr(Trainer, "get_resumed_dataloader") and not self.args.ignore_data_skip:
            raise PlanTrainerError("this transformers version skips batches on resume on its own; set "
                                   "TrainingArguments(ignore_data_skip=True) (the plan position is restored instead)")
        self._check_rows()
        self._start = (0, 0)  # (stream position, global step) this train() call began at
        self.add_callback(_SaveState(self))

    def _global_batch(self) -> int:
        return int(self.get_total_train_batch_size(self.args))

    def _check_rows(self) -> None:
        n_docs, rows = self.plan_sampler._reader.n_docs, getattr(self.train_dataset, "__len__", None)
        if n_docs is None or rows is None or len(self.train_dataset) == n_docs:
            return
        if self.export is not None:
            raise PlanTrainerError(f"train_dataset has {len(self.train_dataset)} rows but the export {self.export} "
                                   f"holds {n_docs}; pass its rows as they are (hf: datasets.load_from_disk)")
        raise PlanTrainerError(
            f"train_dataset has {len(self.train_dataset)} rows but the plan indexes a run of {n_docs} documents; "
            "pass the run's documents in corpus order (row i = document i), not a reordered dataset")

    def _get_train_sampler(self, train_dataset: Any = None) -> ClusterClipSampler:
        return self.plan_sampler

    def get_resumed_dataloader(self, dataloader: Any, num_batches: int) -> Any:
        """No skipping: the sampler already starts at the checkpoint's plan position."""
        return dataloader

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        """``Trainer.train``, restoring the plan position from ``resume_from_checkpoint`` first."""
        if resume_from_checkpoint is True:
            resume_from_checkpoint = get_last_checkpoint(self.args.output_dir)
        if isinstance(resume_from_checkpoint, (str, os.PathLike)):
            self._restore(os.fspath(resume_from_checkpoint))
        else:
            self._start = (self.plan_sampler.epoch * self.plan_sampler.total + self.plan_sampler.consumed, 0)
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def _restore(self, checkpoint: str) -> None:
        path = os.path.join(checkpoint, PLAN_STATE_FILE)
        if not os.path.isfile(path):
            raise PlanTrainerError(f"{checkpoint} has no {PLAN_STATE_FILE}, so its plan position is unknown (saved "
                                   "by another Trainer?); resume it with the Trainer that wrote it")
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
        state = saved["sampler"]
        self.plan_sampler.load_state_dict(state)
        self._start = (state["epoch"] * self.plan_sampler.total + state["consumed"], int(saved["global_step"]))

    def plan_state(self, global_step: int) -> dict[str, Any]:
        """What a checkpoint at ``global_step`` stores: the sampler state at the plan position trained so far."""
        stream, step0 = self._start
        epoch, consumed = divmod(stream + (global_step - step0) * self._global_batch(), self.plan_sampler.total)
        return {"global_step": global_step, "global_batch": self._global_batch(), "processes": self.args.world_size,
                "sampler": self.plan_sampler.state_at(epoch, consumed)}


class _SaveState(TrainerCallback):
    """Writes ``clusterclip_plan.json`` into every checkpoint (main process)."""

    def __init__(self, trainer: PlanTrainer) -> None:
        self.trainer = trainer

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        folder = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        if os.path.isdir(folder):
            with open(os.path.join(folder, PLAN_STATE_FILE), "w", encoding="utf-8") as f:
                json.dump(self.trainer.plan_state(state.global_step), f, indent=1)
