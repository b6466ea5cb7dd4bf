"""Training experiment: does the sampling plan change what a small language model learns?

Holds out a stratified evaluation split, runs the pipeline on the rest, and trains one small GPT per
(strategy, seed) with identical data, budget, model and optimiser; only the plan differs. See
``docs/experiment.md``.
"""

from clusterclip.experiment.run import ExperimentConfig, quick_config, run_experiment

__all__ = ["ExperimentConfig", "quick_config", "run_experiment"]
