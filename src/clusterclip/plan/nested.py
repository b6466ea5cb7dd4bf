"""Quotas over strata: water-filling twice, across the clusters and inside each cluster.

Across clusters it is ClusterClip's own construction on the clusters' *drawable* capacity: ``q_c = min(lambda
* w_c, C_c)`` with ``C_c = sum_s cap_s * n_s`` over the cluster's strata of positive rate (``w_c`` the
strategy's weight of the cluster's effective size ``E_c = sum_s rate_s * n_s``), rounded by largest
remainder. Inside a cluster the same construction splits ``q_c`` over its strata: ``q_s = min(mu_c * rate_s
* n_s, cap_s * n_s)``, rounded by largest remainder inside the cluster, ties by a seeded order. So a cluster
stays balanced against the others while one of its tiers runs out (its other tiers take the share), and a
cluster drops out only when all its drawable strata are exhausted. Sizes are documents, or tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clusterclip.errors import InfeasiblePlanError
from clusterclip.plan.config import PlanConfig
from clusterclip.plan.groups import Groups
from clusterclip.plan.quotas import round_quotas, water_fill
from clusterclip.plan.strata import Strata
from clusterclip.plan.weights import group_weights, water_fill_log

_SALT_JITTER = 0x6A17
_SALT_STRATA = 0x57A7


@dataclass(frozen=True)
class NestedQuotas:
    """Cluster weights and quotas (``cluster_weights``, ``cluster_quota``: K), stratum quotas (``quota``: S), each
    stratum's capacity in budget units, the budget, the water level, and the seeded jitter ``u`` of the strata
    with their ``rank`` (ties in rounding and order)."""

    cluster_weights: np.ndarray
    cluster_quota: np.ndarray
    quota: np.ndarray
    capacity: np.ndarray
    budget: int
    level: float
    u: np.ndarray
    rank: np.ndarray


def nested_quotas(strata: Strata, config: PlanConfig, unit_sizes: np.ndarray, n_clusters: int,
                  capacity: np.ndarray | None = None) -> NestedQuotas:
    """Quotas of the strata (``unit_sizes``: documents or tokens per stratum) under ``config``; ``capacity``
    (per stratum) replaces ``cap_s * n_s`` for a continuation."""
    sizes = unit_sizes.astype(np.float64)
    budget = config.budget_for(int(unit_sizes.sum()))
    inner = strata.rate * sizes
    effective = np.bincount(strata.cluster, weights=inner, minlength=n_clusters)
    groups = Groups(np.zeros(0, np.int32), n_clusters, effective, effective, False)
    weights, log_weights = group_weights(config, groups)
    continuation = capacity is not None
    if capacity is None:
        with np.errstate(invalid="ignore"):
            capacity = np.where(strata.rate > 0, np.nan_to_num(strata.cap * sizes, nan=0.0, posinf=np.inf), 0.0)
    else:
        capacity = np.where(strata.rate > 0, capacity, 0.0)
    cluster_cap = np.bincount(strata.cluster, weights=capacity, minlength=n_clusters)
    _check_feasible(budget, float(cluster_cap[weights > 0].sum()), config, continuation)
    u_c = np.random.default_rng([config.seed, _SALT_JITTER]).random(n_clusters)
    if log_weights is None:
        q_real, level = water_fill(weights, cluster_cap, budget)
    else:
        q_real, level = water_fill_log(log_weights, cluster_cap, budget)
    cluster_quota = round_quotas(q_real, cluster_cap, budget, np.argsort(u_c, kind="stable"))
    u = np.random.default_rng([config.seed, _SALT_STRATA]).random(strata.k)
    rank = np.argsort(u, kind="stable")
    inner_real = segment_water_fill(strata.cluster, inner, capacity, cluster_quota)
    quota = segment_round(strata.cluster, inner_real, capacity, cluster_quota, rank)
    return NestedQuotas(weights, cluster_quota, quota, capacity, budget, level, u, rank)


def _check_feasible(budget: int, room: float, config: PlanConfig, continuation: bool) -> None:
    if budget <= room:
        return
    unit = "tokens" if config.budget_unit == "tokens" else "documents"
    why = "after the parent's prefix" if continuation else "under the tier caps and --max-repeat"
    raise InfeasiblePlanError(
        f"budget of {budget} {unit} is infeasible over these strata: {why} the drawable strata (rate > 0) hold "
        f"{room:.0f} {unit}; lower the budget to {int(room)} or raise --max-repeat / --max-repeats-by-tier (or the "
        "weight of a tier at 0)")


def _segments(seg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start of each run of equal values in the sorted ``seg``, and each entry's run start."""
    n = seg.size
    starts = np.flatnonzero(np.r_[True, seg[1:] != seg[:-1]]) if n else np.zeros(0, np.int64)
    return starts, np.repeat(starts, np.diff(np.r_[starts, n]))


def segment_water_fill(seg: np.ndarray, weights: np.ndarray, caps: np.ndarray, budgets: np.ndarray) -> np.ndarray:
    """Per segment ``c`` (``seg``: segment of each item, ascending), real quotas ``min(mu_c * w, cap)`` summing
    to ``budgets[c]`` (which the segment's capacity must hold)."""
    q = np.zeros(weights.size)
    act = np.flatnonzero((weights > 0) & (budgets[seg] > 0))
    if act.size == 0:
        return q
    s, w, cap = seg[act], weights[act], caps[act]
    ratio = cap / w
    order = np.lexsort((ratio, s))
    s, w, cap, ratio = s[order], w[order], cap[order], ratio[order]
    starts, first = _segments(s)
    finite_cap = np.where(np.isfinite(cap), cap, 0.0)  # an infinite cap sorts last and hits there: no sum needs it
    cum_cap = np.cumsum(finite_cap) - finite_cap
    cum_cap = cum_cap - cum_cap[first]
    w_cum = np.cumsum(w)
    seg_total_w = np.add.reduceat(w, starts)
    suffix = np.repeat(seg_total_w, np.diff(np.r_[starts, s.size])) - (w_cum - w - (w_cum - w)[first])
    with np.errstate(invalid="ignore", over="ignore"):
        level = cum_cap + ratio * suffix
    last = np.r_[starts[1:], s.size] - 1
    level[last] = cum_cap[last] + cap[last]
    hit = level >= budgets[s]
    pos = np.arange(s.size)
    j = np.minimum.reduceat(np.where(hit, pos, s.size), starts)
    j = np.minimum(j, last)
    lam = (budgets[s[j]] - cum_cap[j]) / suffix[j]
    q_sorted = np.minimum(np.repeat(lam, np.diff(np.r_[starts, s.size])) * w, cap)
    q[act[order]] = q_sorted
    return q


def segment_round(seg: np.ndarray, q: np.ndarray, caps: np.ndarray, budgets: np.ndarray,
                  priority: np.ndarray) -> np.ndarray:
    """Largest-remainder rounding of ``q`` inside each segment to integers summing to ``budgets[c]``, never above
    ``caps``; ties go to the items first in ``priority``."""
    cap_i = np.where(np.isfinite(caps), np.floor(np.minimum(caps, 2.0 ** 62)), 2.0 ** 62).astype(np.int64)
    base = np.minimum(np.floor(q), cap_i).astype(np.int64)
    rank = np.empty_like(priority)
    rank[priority] = np.arange(priority.size)
    for _ in range(64):
        extra = budgets - np.bincount(seg, weights=base, minlength=budgets.size).astype(np.int64)
        if not extra.any():
            return base
        grow = extra[seg] > 0
        ok = np.flatnonzero(np.where(grow, (base < cap_i) & (q > 0), base > 0) & (extra[seg] != 0))
        frac = q[ok] - base[ok]
        key = np.where(grow[ok], -frac, frac)
        order = ok[np.lexsort((rank[ok], key, seg[ok]))]
        _, first = _segments(seg[order])
        within = np.arange(order.size) - first
        pick = order[within < np.abs(extra[seg[order]])]
        if pick.size == 0:
            raise InfeasiblePlanError("a cluster's quota exceeds the capacity of its strata")
        base[pick] += np.sign(extra[seg[pick]])
    raise InfeasiblePlanError("rounding the quotas of the strata did not converge")


def nested_scale(config: PlanConfig, strata: Strata, quotas: NestedQuotas, draws: np.ndarray, sizes: np.ndarray,
                 unit_sizes: np.ndarray, n_clusters: int) -> np.ndarray:
    """Virtual time between two draws of each stratum: ``spread`` spreads each over the whole run; ``equal-rate``
    spreads a stratum's draws over its cluster's span, the span of the cluster's draws at the cluster's rate (in
    tokens for a token budget), so clusters are drawn as ClusterClip draws them and tiers mix evenly inside."""
    scale = np.full(strata.k, np.inf)
    has = draws > 0
    if config.order == "spread":
        scale[has] = 1.0 / draws[has]
        return scale
    d_c = np.bincount(strata.cluster, weights=draws, minlength=n_clusters)
    w = quotas.cluster_weights
    if config.budget_unit == "tokens":
        n_c = np.bincount(strata.cluster, weights=sizes, minlength=n_clusters)
        t_c = np.bincount(strata.cluster, weights=unit_sizes, minlength=n_clusters)
        step = np.divide(t_c, n_c * w, out=np.full(n_clusters, np.inf), where=(n_c > 0) & (w > 0))
    else:
        step = np.divide(1.0, w, out=np.full(n_clusters, np.inf), where=w > 0)
    span = np.where(d_c > 0, d_c * np.where(d_c > 0, step, 0.0), np.inf)
    scale[has] = span[strata.cluster[has]] / draws[has]
    return scale
