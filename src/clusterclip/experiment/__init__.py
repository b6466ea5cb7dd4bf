"""Training experiment: does the sampling plan change what a small language model learns?

Holds out a stratified evaluation split, runs the pipeline on the rest, and trains one small GPT per
(strategy, seed) with identical data, budget, model and optimiser; only the plan differs. See
``docs/experiment.md``. The configuration imports without torch; ``run_experiment`` needs it.
"""
