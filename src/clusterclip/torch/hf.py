"""Hugging Face ``Trainer`` integration: train on a plan and resume exactly at any number of processes.

The ``Trainer`` resumes by skipping ``global_step x gradient_accumulation`` batches of *the new* loader, so
a checkpoint resumed with another number of processes or batch size lands elsewhere in the data, and it
never reads a sampler's state. :class:`PlanTrainer` instead gives the Trainer an endless
``ClusterClipSampler`` over the global plan (accelerate deals its batches out to the processes), writes the
plan position reached at each checkpoint (``clusterclip_plan.json``: global step x global batch after the
position the run started at), restores it on resume and turns the Trainer's own batch skipping off. With
``online=OnlineMixer(...)`` it steers the cluster mixture as it trains (:mod:`clusterclip.torch.hf_online`).
The end of the plan (or of the online chain) is the end of the data: training stops at the last whole global
batch before it, or ``at_end="raise"`` refuses a ``max_steps`` beyond it before training, instead of replaying the
plan as another epoch (which would draw documents beyond the plan's cap).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from transformers import Trainer, TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from clusterclip.errors import ClusterClipError
from clusterclip.torch.hf_online import OnlineMixing
from clusterclip.torch.mixer import OnlineMixer
from clusterclip.torch.sampler import ClusterClipSampler

__all__ = ["PLAN_STATE_FILE", "PlanTrainer", "PlanTrainerError"]

PLAN_STATE_FILE = "clusterclip_plan.json"
AT_END = ("stop", "raise")
"""What ``PlanTrainer`` does when ``max_steps`` goes past the end of the plan: stop there, or raise before training."""
log = logging.getLogger(__name__)


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
    counted in steps of the global batch (per device x processes x accumulation) along the plan. The plan is the
    whole schedule: its end is the end of the data. With ``at_end="stop"`` (the default) a ``max_steps`` beyond
    it ends training after the last whole global batch before the end (a warning says so at the start, and that
    step is checkpointed); ``at_end="raise"`` refuses it before training starts. Resuming
    (``train(resume_from_checkpoint=...)``) continues at the checkpoint's plan position with any number of
    processes or batch size.

    ``online``: an :class:`~clusterclip.torch.mixer.OnlineMixer` on the run (``plan``/``plan_name`` default to
    its run and root plan, or must name them): every step's per-sample causal-LM losses (``labels`` in the batch)
    go to the mixer with their documents' clusters, and at each update training continues on the continuation
    from the position reached; checkpoints hold the mixer's state and resume in the plan they reached
    (``docs/sampling.md``, "Online mixing").
    """

    def __init__(self, *args: Any, plan: Any = None, plan_name: str | None = None,
                 export: str | os.PathLike[str] | None = None, online: OnlineMixer | None = None,
                 at_end: str = "stop", **kwargs: Any) -> None:
        if at_end not in AT_END:
            raise PlanTrainerError(f"at_end must be 'stop' (training ends at the end of the plan) or 'raise' (a "
                                   f"max_steps beyond it is refused), got {at_end!r}")
        if online is not None:
            plan, plan_name = _online_plan(online, plan, plan_name, export)
        if (plan is None) == (export is None):
            raise PlanTrainerError("give PlanTrainer either plan= (a run's plan; train_dataset: the run's documents "
                                   "in corpus order) or export= (a clusterclip export; train_dataset: its rows)")
        super().__init__(*args, **kwargs)
        self.export = export
        self.online = None if online is None else OnlineMixing(self, online)
        if export is not None:
            self.plan_sampler = ClusterClipSampler.from_export(export, rank=0, world_size=1, endless=True)
        elif self.online is not None:
            self.plan_sampler = self.online.current_sampler()
        else:
            self.plan_sampler = ClusterClipSampler(plan, rank=0, world_size=1, plan_name=plan_name, endless=True)
        if self.args.max_steps <= 0:
            raise PlanTrainerError(
                f"PlanTrainer counts training in steps: set TrainingArguments(max_steps=...) (one epoch of the "
                f"plan is {self.plan_sampler.total} samples / {self._global_batch()} per step)")
        if not hasattr(Trainer, "get_resumed_dataloader") and not self.args.ignore_data_skip:
            raise PlanTrainerError("this transformers version skips batches on resume on its own; set "
                                   "TrainingArguments(ignore_data_skip=True) (the plan position is restored instead)")
        self._check_rows()
        self._start = (0, 0)  # (stream position, global step) this train() call or plan of the chain began at
        self.at_end, self.last_step = at_end, 0
        self.add_callback(_SaveState(self))
        self.add_callback(_EndOfData(self))
        if self.online is not None:
            self.add_callback(self.online)

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

    def _get_train_sampler(self, train_dataset: Any = None) -> Any:
        return self.plan_sampler if self.online is None else self.online.loader_sampler

    def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> Any:
        """``Trainer.compute_loss``; under online mixing a training batch's per-sample losses are kept too."""
        if self.online is None or not model.training:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        labels = inputs.get("labels")
        loss, outputs = super().compute_loss(model, inputs, True, num_items_in_batch)
        self.online.keep(outputs, labels)
        return (loss, outputs) if return_outputs else loss

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
            if self.online is not None:
                self.online.begin()
        self.last_step = self._end_step()
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def _end_step(self) -> int:
        """The global step after the last whole global batch before the end of the plan (or of the online chain)
        from where this ``train()`` starts: a ``max_steps`` beyond it is a warning (``at_end="stop"``) or refused
        (``"raise"``); nothing left to train is refused either way."""
        batch, (stream, step) = self._global_batch(), self._start
        if self.online is not None:
            mixer = self.online.mixer
            at, end, what = mixer.start + stream, mixer.end, f"the online chain of plan {mixer.root!r}"
        else:
            at, end = stream, self.plan_sampler.total
            what = f"the export {self.export}" if self.export is not None else f"plan {self.plan_sampler.info.name!r}"
        steps = max(end - at, 0) // batch
        if steps == 0:
            raise PlanTrainerError(f"nothing of {what} is left to train: it ends at position {end:,} and training is "
                                   f"at {at:,} (less than one global batch of {batch}); plan a longer budget to train "
                                   "more")
        last = step + steps
        if self.args.max_steps > last:
            why = (f"max_steps={self.args.max_steps} goes past the end of {what}: the {end - at:,} positions left from "
                   f"{at:,} are {steps:,} steps of {batch} (to step {last:,})")
            if self.at_end == "raise":
                raise PlanTrainerError(f"{why}; lower max_steps, plan a longer budget, or PlanTrainer(at_end='stop') "
                                       "to end training there")
            log.warning("%s; training stops there: the end of the plan is the end of the data", why)
        return last

    def _restore(self, checkpoint: str) -> None:
        path = os.path.join(checkpoint, PLAN_STATE_FILE)
        if not os.path.isfile(path):
            raise PlanTrainerError(f"{checkpoint} has no {PLAN_STATE_FILE}, so its plan position is unknown (saved "
                                   "by another Trainer?); resume it with the Trainer that wrote it")
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
        if self.online is not None:
            self.online.restore(saved)
        elif "mixer" in saved:
            raise PlanTrainerError(f"{checkpoint} was written by an online run (it holds a mixer state): resume it "
                                   "with PlanTrainer(..., online=OnlineMixer(...)) on the same root plan")
        state = saved["sampler"]
        self.plan_sampler.load_state_dict(state)
        self._start = (state["epoch"] * self.plan_sampler.total + state["consumed"], int(saved["global_step"]))

    def stream_start(self) -> int:
        """The stream position (``epoch x plan length + position``) of the current plan this run began at."""
        return self._start[0]

    def steps_since_start(self, global_step: int) -> int:
        """Optimizer steps trained from :meth:`stream_start` to ``global_step``."""
        return global_step - self._start[1]

    def position_at(self, global_step: int) -> tuple[int, int]:
        """``(epoch, position)`` in the current plan after ``global_step``."""
        stream = self._start[0] + self.steps_since_start(global_step) * self._global_batch()
        return divmod(stream, self.plan_sampler.total)

    def switch_plan(self, sampler: ClusterClipSampler, global_step: int) -> None:
        """Train on ``sampler`` (a continuation, at its start) from ``global_step`` on."""
        self.plan_sampler, self._start = sampler, (sampler.consumed, global_step)

    def plan_state(self, global_step: int) -> dict[str, Any]:
        """What a checkpoint at ``global_step`` stores: the sampler state at the plan position trained so far
        (and under online mixing the mixer's state)."""
        state = {"global_step": global_step, "global_batch": self._global_batch(), "processes": self.args.world_size,
                 "sampler": self.plan_sampler.state_at(*self.position_at(global_step))}
        if self.online is not None:
            state["mixer"] = self.online.mixer.state_dict()
        return state


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


class _EndOfData(TrainerCallback):
    """Stops training at the end of the plan (``PlanTrainer.last_step``), saving that step as the Trainer saves
    its last one."""

    def __init__(self, trainer: PlanTrainer) -> None:
        self.trainer = trainer

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step >= self.trainer.last_step:
            control.should_training_stop = True
            control.should_save = args.save_strategy != "no" or control.should_save


def _online_plan(mixer: OnlineMixer, plan: Any, plan_name: str | None, export: Any) -> tuple[Any, str]:
    """The run and root plan of ``mixer``, which ``plan``/``plan_name`` must name when given."""
    if export is not None:
        raise PlanTrainerError("online mixing re-plans the run as it trains: give plan= (or nothing: the mixer's "
                               "run), not export=, whose order is fixed")
    other = plan is not None and not (isinstance(plan, (str, os.PathLike))
                                      and os.path.realpath(plan) == os.path.realpath(mixer.run.root))
    if other or plan_name not in (None, mixer.root):
        raise PlanTrainerError(f"plan={plan!r} plan_name={plan_name!r} but the mixer steers plan {mixer.root!r} of "
                               f"{mixer.run.root}; leave them out or name the mixer's")
    return mixer.run.root, mixer.root
