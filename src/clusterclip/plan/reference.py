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
    """The order of a plan over strata for small inputs (the oracle of :mod:`clusterclip.plan.interleave`): every
    cluster's draws at ``(k + u_c) * scale_c`` sorted stably by time; the cluster's ``k``-th draw is the draw of the
    ``k``-th smallest key ``(i + u_s) / d_s`` of its strata (ties: the lower stratum first)."""
    corpus = check_inputs(labels, tokens, n_clusters)
    strata = unit_strata(corpus, config, fields)
    with strata_draws(corpus, config, strata, DEFAULT_CHUNK, prior) as p:
        inside = {}
        for c in np.flatnonzero(p.cluster_draws > 0).tolist():
            keys, docs, tie = [], [], []
            for s in np.flatnonzero((strata.cluster == c) & (p.draws > 0)).tolist():
                d = int(p.draws[s])
                keys.append((np.arange(d) + p.quotas.u[s]) / d)
                docs.append(p.passes.sequence(s, d))
                tie.append(np.full(d, s))
            key, doc, low = np.concatenate(keys), np.concatenate(docs), np.concatenate(tie)
            inside[c] = doc[np.lexsort((low, key))]
        clusters, times = [], []
        for c, seq in inside.items():
            clusters.append(np.full(seq.size, c))
            times.append((np.arange(seq.size) + p.quotas.cluster_u[c]) * p.cluster_scale[c])
    if not inside:
        return np.zeros(0, np.int64)
    order = np.argsort(np.concatenate(times), kind="stable")
    return np.concatenate(list(inside.values()))[order].astype(np.int64)
