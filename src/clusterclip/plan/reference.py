"""The reference order: every draw's virtual time computed in memory, then one stable sort.

This is the definition the streaming merge (``order.emit``) must reproduce byte for byte; the tests
compare the two for every strategy, order and budget unit. It holds every draw in memory, so use it
only on small inputs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from clusterclip.plan.build import DEFAULT_CHUNK, plan_draws, unit_strata
from clusterclip.plan.config import PlanConfig
from clusterclip.plan.quotas import check_inputs
from clusterclip.plan.stratified import strata_draws


def reference_order(labels: np.ndarray, config: PlanConfig, tokens: np.ndarray | None = None,
                    n_clusters: int | None = None, prior: np.ndarray | None = None) -> np.ndarray:
    """The plan's order for small inputs: all draws ``(k + u_c) * scale_c``, sorted stably by time.

    ``prior`` (per-document counts of a parent's prefix) gives the reference of a continuation.

    Ties (equal times) keep group order, then draw order, as the streaming merge does.
    """
    with plan_draws(labels, config, tokens, n_clusters, DEFAULT_CHUNK, prior) as p:
        docs, times = [], []
        for c in np.flatnonzero(p.draws > 0).tolist():
            d = int(p.draws[c])
            docs.append(p.passes.sequence(c, d))
            times.append((np.arange(d) + p.quotas.u[c]) * p.scale[c])
    if not docs:
        return np.zeros(0, np.int64)
    return np.concatenate(docs)[np.argsort(np.concatenate(times), kind="stable")].astype(np.int64)


def reference_strata_order(labels: np.ndarray, config: PlanConfig, fields: Any = None, tokens: np.ndarray | None = None,
                           n_clusters: int | None = None, prior: np.ndarray | None = None) -> np.ndarray:
    """The order of a plan over strata for small inputs: every stratum's draws at ``(k + u_s) * scale_s``, sorted
    stably by time (the oracle of :func:`~clusterclip.plan.build.build_over_strata`)."""
    corpus = check_inputs(labels, tokens, n_clusters)
    strata = unit_strata(corpus, config, fields)
    with strata_draws(corpus, config, strata, DEFAULT_CHUNK, prior) as p:
        docs, times = [], []
        for s in np.flatnonzero(p.draws > 0).tolist():
            d = int(p.draws[s])
            docs.append(p.passes.sequence(s, d))
            times.append((np.arange(d) + p.quotas.u[s]) * p.scale[s])
    if not docs:
        return np.zeros(0, np.int64)
    return np.concatenate(docs)[np.argsort(np.concatenate(times), kind="stable")].astype(np.int64)
