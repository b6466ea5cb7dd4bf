"""Online mixing under the Hugging Face ``Trainer``: what ``PlanTrainer(..., online=OnlineMixer(...))`` adds.

Each training micro-batch's per-sample loss (:func:`sample_losses`) is kept with the clusters of its documents,
which follow from the plan positions the batch holds: the Trainer trains the global stream in steps of
``per-device batch x processes x accumulation``, and micro-batch ``m`` of process ``r`` holds the ``b`` positions
after ``(m x processes + r) x b`` (accelerate deals the batches out round robin; a batch of another size, as
``split_batches`` makes, is refused), so the dataset needs no index column. At every step end the step's losses
go to :meth:`~clusterclip.torch.mixer.OnlineMixer.report` (one all-reduce, one controller round per optimizer
step, as in ODM) and :meth:`~clusterclip.torch.mixer.OnlineMixer.maybe_switch` runs at the position trained; on
a switch the trainer's plan sampler becomes the continuation's and the epoch ends, so the train ``DataLoader``
(which iterates :class:`CurrentPlan`) starts its next iteration on the new plan at that position, whatever it
had fetched ahead. Checkpoints hold the mixer's state beside the sampler's (``PlanTrainer.plan_state``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F
from torch.utils.data import Sampler
from transformers import TrainerCallback

from clusterclip.errors import ClusterClipError
from clusterclip.torch.mixer import OnlineMixer
from clusterclip.torch.sampler import ClusterClipSampler

__all__ = ["IGNORE_INDEX", "CurrentPlan", "OnlineMixing", "sample_losses"]

IGNORE_INDEX = -100
"""The label of a token without a loss (padding, prompt), as in Hugging Face's causal-LM losses."""


def sample_losses(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The next-token loss of each sample of a causal-LM batch, averaged over its labelled tokens, and whether
    it has any (``(batch,)`` each; computed without gradient, on the batch's device).

    Token ``t`` predicts label ``t + 1``, as the model's own loss shifts them; labels equal to
    :data:`IGNORE_INDEX` count nowhere. A sample without a labelled token gets loss 0 and ``False``.
    """
    with torch.no_grad():
        target = labels[:, 1:]
        token = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), target.flatten(), ignore_index=IGNORE_INDEX,
                                reduction="none").view(target.shape)
        counts = (target != IGNORE_INDEX).sum(dim=1)
        return token.sum(dim=1) / counts.clamp(min=1), counts > 0


class CurrentPlan(Sampler[int]):
    """The train ``DataLoader``'s sampler: each iteration walks the trainer's plan sampler of that moment, so a
    switch to a continuation reaches the loader however accelerate wrapped it. Endless, like the plan sampler."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def __iter__(self) -> Iterator[int]:
        return iter(self.trainer.plan_sampler)


class OnlineMixing(TrainerCallback):
    """``PlanTrainer``'s side of an :class:`~clusterclip.torch.mixer.OnlineMixer` (added by ``online=``):
    :meth:`keep` stores each micro-batch's losses and clusters, :meth:`on_step_end` reports them and switches
    plans, :meth:`restore` puts a checkpoint's mixer state back and points the trainer at its plan."""

    def __init__(self, trainer: Any, mixer: OnlineMixer) -> None:
        self.trainer, self.mixer = trainer, mixer
        self.loader_sampler = CurrentPlan(trainer)
        self.begin()

    def current_sampler(self) -> ClusterClipSampler:
        """A sampler over the global stream of the mixer's current plan, as ``PlanTrainer`` walks it."""
        return self.mixer.sampler(rank=0, world_size=1, endless=True)

    def begin(self) -> None:
        """Forget kept losses: training (re)starts at the trainer's start position."""
        self.micro = 0
        self._losses: list[torch.Tensor] = []
        self._kept: list[torch.Tensor] = []
        self._clusters: list[np.ndarray] = []

    def keep(self, outputs: Any, labels: Any) -> None:
        """Store the per-sample losses of the micro-batch just trained, with its documents' clusters."""
        logits = outputs.get("logits") if isinstance(outputs, Mapping) else None
        if logits is None or not isinstance(labels, torch.Tensor) or labels.dim() != 2:
            raise ClusterClipError("online mixing needs causal-LM batches: a `labels` tensor (batch x tokens, "
                                   f"{IGNORE_INDEX} where no loss) and model outputs with `logits`")
        losses, kept = sample_losses(logits, labels)
        self._losses.append(losses)
        self._kept.append(kept)
        self._clusters.append(self.mixer.labels[self._documents(labels.shape[0])])
        self.micro += 1

    def _documents(self, size: int) -> np.ndarray:
        """The documents of this process's next micro-batch, from the plan positions it holds."""
        trainer = self.trainer
        per_device, processes = int(trainer._train_batch_size), int(trainer.args.world_size)
        if size != per_device:
            raise ClusterClipError(f"a training batch of {size} samples, but the per-device batch is {per_device}: "
                                   "online mixing cannot tell which plan positions it holds")
        first = trainer.stream_start() + (self.micro * processes + trainer.args.process_index) * size
        sampler = trainer.plan_sampler
        return sampler._reader.take((first + np.arange(size, dtype=np.int64)) % sampler.total)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Report the step's losses; at an update, continue on the new plan from the position trained."""
        expected = self.trainer.steps_since_start(state.global_step) * args.gradient_accumulation_steps
        if self.micro != expected:
            raise ClusterClipError(f"online mixing kept {self.micro} micro-batches where {expected} were trained "
                                   "since its plan began: compute_loss must run once per training micro-batch")
        kept = torch.cat(self._kept).cpu().numpy()
        self.mixer.report(np.concatenate(self._clusters)[kept], torch.cat(self._losses).cpu().numpy()[kept])
        self._losses, self._kept, self._clusters = [], [], []
        epoch, consumed = self.trainer.position_at(state.global_step)
        if epoch:
            return
        state_now = self.trainer.plan_sampler.state_at(0, consumed)
        sampler = self.mixer.maybe_switch(state_now, rank=0, world_size=1, endless=True)
        if sampler is not None:
            self.trainer.switch_plan(sampler, state.global_step)
            self.micro = 0
            control.should_epoch_stop = True

    def restore(self, saved: Mapping[str, Any]) -> None:
        """Put back the mixer state of a checkpoint's ``clusterclip_plan.json`` and the sampler of its plan."""
        if "mixer" not in saved:
            raise ClusterClipError("the checkpoint holds no mixer state (written without online mixing): resume it "
                                   "without online=, or start the online run from the root plan")
        self.mixer.load_state_dict(saved["mixer"])
        self.trainer.plan_sampler = self.current_sampler()
        self.begin()
