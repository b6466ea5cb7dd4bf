"""Mixture search: predict a proxy run's objective from its mixture weights and propose new mixtures.

``swarm`` reads proxy runs (weights + objective) from CSV, ``predictors`` fits a predictor of the
objective (log-linear mixing law, ridge, LightGBM), ``propose`` draws candidate mixtures and picks the
next round. See docs/mixture-search.md.
"""

from __future__ import annotations

from clusterclip.mixture.predictors import PREDICTORS, Predictor, make_predictor
from clusterclip.mixture.propose import (
    Proposal,
    RoundConfig,
    accept_all,
    dirichlet_candidates,
    next_round,
    propose,
    rank_candidates,
    rowwise,
    temperature_candidates,
)
from clusterclip.mixture.swarm import MixtureError, Swarm, from_arrays, read_regmix, read_swarm, write_swarm

__all__ = [
    "PREDICTORS",
    "MixtureError",
    "Predictor",
    "Proposal",
    "RoundConfig",
    "Swarm",
    "accept_all",
    "dirichlet_candidates",
    "from_arrays",
    "make_predictor",
    "next_round",
    "propose",
    "rank_candidates",
    "read_regmix",
    "read_swarm",
    "rowwise",
    "temperature_candidates",
    "write_swarm",
]
