"""The stage protocol: what a stage of a run directory is (:class:`Stage`) and the one runner that does the
bookkeeping of every writing command (:func:`run_stage`). See :mod:`clusterclip.stages.protocol`."""

from clusterclip.stages.protocol import Built, Job, Stage, grow_stage, run_stage, writing

__all__ = ["Built", "Job", "Stage", "grow_stage", "run_stage", "writing"]
