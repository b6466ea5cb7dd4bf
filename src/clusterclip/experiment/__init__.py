"""Training experiment: does the sampling plan change what a small language model learns?

Holds out a stratified evaluation split, runs the pipeline on the rest, and trains one small GPT per
(strategy, seed) with identical data, budget, model and optimiser; only the plan differs. See
``docs/experiment.md``. The configuration imports without torch; ``run_experiment`` needs it.
"""

from __future__ import annotations

from typing import Any

from clusterclip.experiment.config import ExperimentConfig, ModelConfig, TrainConfig, quick_config

__all__ = ["ExperimentConfig", "ModelConfig", "TrainConfig", "quick_config", "run_experiment"]


def __getattr__(name: str) -> Any:
    if name == "run_experiment":
        from clusterclip.experiment.proxy_runs import run_experiment

        return run_experiment
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
