"""TRL's ``SFTTrainer`` on a plan: supervised fine-tuning that trains the planned stream and resumes exactly at any
number of processes.

:class:`PlanSFTTrainer` is :class:`~clusterclip.torch.hf.PlanTrainer` over ``trl.SFTTrainer`` (Python's method
order puts PlanTrainer's sampler, checkpoint state and resume before SFTTrainer's, and SFTTrainer's dataset
preparation, chat template and losses before the plain Trainer's), so what PlanTrainer does for the Trainer it does
here: an endless ``ClusterClipSampler`` over the global plan, the plan position written into every checkpoint and
restored on resume, whatever the process count or batch size. The usual dataset is a ``clusterclip export`` that
kept the records (``--format hf``: a ``messages`` column SFTTrainer applies the chat template to), given with
``export=``; ``plan=`` takes a run's documents in corpus order, as PlanTrainer does. Imported on its own (trl is
optional: ``pip install 'clusterclip[sft]'``).

SFTTrainer's ``packing`` is refused: it concatenates the dataset's rows before training, so a row is no longer one
planned document; pack in the export instead (``--tokenizer ... --seq-len``, with ``--assistant-only-loss``).
Online mixing (``online=``) runs as under PlanTrainer, each sample's loss over its trained (response) tokens;
SFTTrainer computes its loss without the logits, which online mixing reads, so each training step runs the model
once more without gradient (and TRL warns that ``return_outputs`` will go).
"""

from __future__ import annotations

from typing import Any

from trl import SFTTrainer

from clusterclip.torch.hf import PlanTrainer, PlanTrainerError

__all__ = ["PlanSFTTrainer"]


class PlanSFTTrainer(PlanTrainer, SFTTrainer):
    """``trl.SFTTrainer`` trained on plan order, one global position after the other, resumed exactly.

    Takes SFTTrainer's arguments (by keyword) and PlanTrainer's ``plan``/``plan_name``, ``export`` and ``online``;
    ``args`` (``SFTConfig`` or ``TrainingArguments``) needs ``max_steps``. SFTTrainer keeps the dataset's rows in
    their order (it tokenizes them, one row each), which the sampler then walks in the plan's.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        config = kwargs.get("args")
        if getattr(config, "packing", False):
            raise PlanTrainerError("SFTConfig(packing=True) concatenates the dataset's rows, so a packed row is no "
                                   "planned document: leave packing off, or pack in the export (clusterclip export "
                                   "--tokenizer ... --seq-len N) and train that with PlanTrainer")
        super().__init__(*args, **kwargs)
