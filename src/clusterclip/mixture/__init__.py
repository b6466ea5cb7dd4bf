"""Mixture search: predict a proxy run's objective from its mixture weights and propose new mixtures.

``swarm`` reads proxy runs (weights + objective) from CSV, ``predictors`` fits a predictor of the
objective (log-linear mixing law, ridge, LightGBM), ``propose`` draws candidate mixtures and picks the
next round, ``fromcsv`` proposes from a swarm file (``clusterclip tune --from-csv``) and ``blend`` writes
chosen weights for Megatron and OLMo-core. See docs/mixture-search.md.
"""

from __future__ import annotations

from clusterclip.mixture.blend import megatron_data_path, olmo_source_mixture, write_blend
from clusterclip.mixture.fromcsv import format_proposal, load_any, propose_from_swarm, write_weights
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
    "format_proposal",
    "from_arrays",
    "load_any",
    "make_predictor",
    "megatron_data_path",
    "next_round",
    "olmo_source_mixture",
    "propose",
    "propose_from_swarm",
    "rank_candidates",
    "read_regmix",
    "read_swarm",
    "rowwise",
    "temperature_candidates",
    "write_blend",
    "write_swarm",
    "write_weights",
]
