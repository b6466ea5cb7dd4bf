"""Each sampling group's target weight, and water-filling from log-weights for weights beyond float range.

Ordinary weights (within ``e^+-300`` of 1) are used as given, so their quotas and orders are unchanged;
beyond that (``--tau -1000``, a weight of ``1e308``) ``n_c ** tau`` or the sums of weights would
over- or underflow, so the quotas are water-filled from the log-weights instead.
"""

from __future__ import annotations

import numpy as np

from clusterclip.errors import InfeasiblePlanError
from clusterclip.plan.config import PlanConfig, PlanConfigError
from clusterclip.plan.groups import Groups
from clusterclip.plan.strategies import STRATEGIES

_LOG_SAFE = 300.0
"""Weights within ``e^+-300`` of 1 are used as given; beyond, they are handled in log space."""
_W_FLOOR = 1e-280
"""Smallest relative weight kept for the order (its draws come after every other group's)."""


def group_weights(config: PlanConfig, groups: Groups) -> tuple[np.ndarray, np.ndarray | None]:
    """Target share of each group, as the strategy (:data:`~clusterclip.plan.strategies.STRATEGIES`) weighs
    it: equal (clusterclip, uniform), ``n_c ** tau``, user weights, or size.

    Returns ``(weights, log_weights)``. ``log_weights`` is None for weights in a safe float range (then
    ``weights`` are as the strategy gives them, e.g. ``n_c ** tau``); otherwise (``tau = -1000``, a weight of
    1e308) the weights would over- or underflow, so quotas are water-filled from ``log_weights`` (``-inf``:
    weight 0) and ``weights`` are relative to the largest (at least ``1e-280`` where positive), for the order.
    """
    strategy = STRATEGIES[config.strategy]
    if strategy.USES_WEIGHTS:
        _check_cluster_ids(config, groups.k)
    with np.errstate(divide="ignore"):
        logw = strategy.log_weights(groups.unit_sizes, config)
    finite = logw[np.isfinite(logw)]
    if finite.size == 0:
        raise PlanConfigError("weights", "give every cluster with documents weight 0: nothing to sample; give at "
                              "least one non-empty cluster a positive weight")
    if float(np.abs(finite).max()) > _LOG_SAFE:
        w = np.exp(logw - finite.max())
        w[np.isfinite(logw)] = np.maximum(w[np.isfinite(logw)], _W_FLOOR)
        return w, logw
    return strategy.weights(groups.unit_sizes, config), None


def _check_cluster_ids(config: PlanConfig, k: int) -> None:
    """Refuse per-cluster weights that name a cluster beyond the ``k`` there are."""
    bad = [c for c, _ in config.weights or () if c >= k]
    if bad:
        raise PlanConfigError("weights", f"name unknown cluster(s) {bad[:5]}; valid cluster ids are 0..{k - 1}")


def water_fill_log(log_weights: np.ndarray, caps: np.ndarray, budget: float) -> tuple[np.ndarray, float]:
    """:func:`water_fill` from log-weights (``-inf``: weight 0), for weights beyond the float range.

    Same quotas ``q_c = min(lambda * w_c, cap_c)``; sums of weights are log-sum-exps. Returns ``(q,
    lambda)`` with lambda relative to the largest weight (at most the largest float).
    """
    lw = np.asarray(log_weights, dtype=np.float64)
    cap = np.asarray(caps, dtype=np.float64)
    q = np.zeros_like(lw)
    act = np.flatnonzero(np.isfinite(lw))
    if budget <= 0 or act.size == 0:
        return q, 0.0
    la, ca = lw[act], cap[act]
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        ratio = np.log(ca) - la
        order = np.argsort(ratio, kind="stable")
        rs, ls, cs = ratio[order], la[order], ca[order]
        cum_cap = np.concatenate(([0.0], np.cumsum(cs)[:-1]))
        suffix = np.logaddexp.accumulate(ls[::-1])[::-1]
        level = cum_cap + np.exp(rs + suffix)
        level[-1] = cum_cap[-1] + cs[-1]
        hit = np.flatnonzero(level >= budget)
        if hit.size == 0:
            raise InfeasiblePlanError(f"budget {budget} exceeds the capacity {float(cs.sum())}")
        j = int(hit[0])
        log_lam = np.log(budget - cum_cap[j]) - suffix[j]
        q[act] = np.minimum(np.exp(log_lam + la), ca)
        lam = float(np.exp(log_lam + la.max()))
    return q, min(lam, float(np.finfo(np.float64).max))
