"""How many draws each cluster gets: the sampling groups, their weights, water-filling and rounding.

ClusterClip's quotas are ``q_c = min(lambda * w_c, R * n_c)`` with ``lambda`` chosen so that
``sum(q_c) = budget`` (water-filling), rounded to integers by largest remainder with ties broken by a
seeded cluster order. ``random`` is the same construction on one pseudo-cluster holding every document.
"""

from __future__ import annotations

from typing import Any, NoReturn

import numpy as np

from clusterclip.errors import InfeasiblePlanError
from clusterclip.plan.config import PlanConfig, PlanConfigError
from clusterclip.plan.groups import Corpus, Groups, Quotas
from clusterclip.plan.weights import group_weights, water_fill_log

_SALT_JITTER = 0x6A17
_INT_ROOM = np.iinfo(np.int64).max // 2


def check_inputs(labels: Any, tokens: Any, n_clusters: int | None) -> Corpus:
    """Validate the label and token arrays; ``n_clusters`` declares K when trailing clusters are empty."""
    lab = np.asarray(labels)
    if lab.ndim != 1:
        raise PlanConfigError(f"labels must be a 1-D array of cluster ids, got shape {lab.shape}")
    if lab.size == 0:
        raise PlanConfigError("labels is empty: the plan needs at least one document")
    if not np.issubdtype(lab.dtype, np.integer):
        raise PlanConfigError(f"labels must be integers, got dtype {lab.dtype}")
    lo, hi = int(lab.min()), int(lab.max())
    if lo < 0:
        raise PlanConfigError(f"labels must be cluster ids >= 0; found {lo}")
    k = hi + 1
    if n_clusters is not None:
        if hi >= n_clusters:
            raise PlanConfigError(f"labels hold cluster {hi} but n_clusters is {n_clusters} (ids 0..{n_clusters - 1})")
        k = int(n_clusters)
    lab = lab.astype(np.int64 if k >= 2**31 else np.int32, copy=False)
    tok = None if tokens is None else _check_tokens(tokens, lab.shape)
    return Corpus(lab, tok, k, np.bincount(lab, minlength=k).astype(np.int64))


def _check_tokens(tokens: Any, shape: tuple[int, ...]) -> np.ndarray:
    tok = np.asarray(tokens)
    if tok.shape != shape:
        raise PlanConfigError(f"tokens has shape {tok.shape}; expected one count per document {shape}")
    if not np.issubdtype(tok.dtype, np.integer):
        raise PlanConfigError(f"tokens must be integers, got dtype {tok.dtype}")
    if tok.size and int(tok.min()) < 0:
        raise PlanConfigError(f"tokens must be >= 0; found {int(tok.min())}")
    return tok.astype(np.int64, copy=False)


def sampling_groups(corpus: Corpus, config: PlanConfig) -> Groups:
    """The clusters, or one pseudo-cluster of all documents for a strategy that samples no clusters (``random``:
    epochs of permutations)."""
    pseudo = not config.strategy_class.CLUSTERED
    labels = np.zeros(corpus.n, np.int32) if pseudo else corpus.labels
    k = 1 if pseudo else corpus.k
    sizes = np.array([corpus.n], np.int64) if pseudo else corpus.sizes
    if config.budget_unit == "docs":
        return Groups(labels, k, sizes, sizes, pseudo)
    if corpus.tokens is None:
        raise PlanConfigError("budget_unit='tokens' needs per-document token counts (tokens=...)")
    if int(corpus.tokens.sum()) == 0:
        raise PlanConfigError("every document has 0 tokens: a token budget cannot be met")
    unit_sizes = np.bincount(labels, weights=corpus.tokens, minlength=k).astype(np.int64)
    return Groups(labels, k, sizes, unit_sizes, pseudo)


def compute_quotas(groups: Groups, config: PlanConfig, capacity: np.ndarray | None = None) -> Quotas:
    """Integer quotas (budget units) per group by water-filling under the cap and largest remainder.

    ``capacity`` (draws per group) replaces ``cap * n_c`` for a continuation, whose documents have
    already used part of the cap.
    """
    total = int(groups.unit_sizes.sum())
    budget = config.budget_for(total)
    cap = config.effective_max_repeat
    u = np.random.default_rng([config.seed, _SALT_JITTER]).random(groups.k)
    rank = np.argsort(u, kind="stable")
    weights, log_weights = group_weights(config, groups)
    caps = np.full(groups.k, np.inf) if cap is None else (cap * groups.unit_sizes).astype(np.float64)
    if capacity is not None:
        caps = capacity
        left = float(capacity[weights > 0].sum())
        if budget > left:
            raise InfeasiblePlanError(
                f"budget of {budget} documents is infeasible for this continuation: under max_repeat={cap} the "
                f"documents have {left:.0f} draws left after the parent's prefix; "
                + (f"lower the budget to {left:.0f} or raise max_repeat" if left >= 1 else
                   "raise max_repeat (the parent's prefix already used every document's cap)"))
    elif cap is not None:
        active = int(groups.unit_sizes[weights > 0].sum())
        if budget > cap * active:
            raise_infeasible(budget, cap, active, "tokens" if config.budget_unit == "tokens" else "documents",
                             config.strategy_class.DRAWS_FROM)
    if log_weights is None:
        q_real, level = water_fill(weights, caps, budget)
    else:
        q_real, level = water_fill_log(log_weights, caps, budget)
    return Quotas(weights, round_quotas(q_real, caps, budget, rank), cap, budget, level, u, rank)


def raise_infeasible(budget: int, cap: int, units: int, unit: str, what: str) -> NoReturn:
    """Say that ``budget`` cannot be met under ``cap`` and name both fixes (raise the cap, lower the budget)."""
    need = -(-budget // units) if units else None
    fix = f"raise max_repeat to {need} or lower the budget to {cap * units}" if need else "lower the budget"
    raise InfeasiblePlanError(
        f"budget of {budget} {unit} is infeasible with max_repeat={cap}: {what} hold {units} {unit}, so the "
        f"largest feasible budget is {cap * units}; the smallest max_repeat that fits is {need}; {fix}")


def water_fill(weights: np.ndarray, caps: np.ndarray, budget: float) -> tuple[np.ndarray, float]:
    """Real quotas ``q_c = min(lambda * w_c, cap_c)`` with ``sum(q) = budget``; returns (q, lambda).

    ``caps`` may be ``inf``. Raises ``InfeasiblePlanError`` (without the hint; callers add it) when
    ``budget`` exceeds the total capacity of the clusters with positive weight.
    """
    w = np.asarray(weights, dtype=np.float64)
    cap = np.asarray(caps, dtype=np.float64)
    q = np.zeros_like(w)
    act = np.flatnonzero(w > 0)
    if budget <= 0 or act.size == 0:
        return q, 0.0
    wa, ca = w[act], cap[act]
    ratio = ca / wa
    order = np.argsort(ratio, kind="stable")
    rs, ws, cs = ratio[order], wa[order], ca[order]
    cum_cap = np.concatenate(([0.0], np.cumsum(cs)[:-1]))
    suffix_w = np.cumsum(ws[::-1])[::-1]
    with np.errstate(invalid="ignore", over="ignore"):
        level = cum_cap + rs * suffix_w
    level[-1] = cum_cap[-1] + cs[-1]  # the total capacity, exactly: rs * w can round below the cap
    hit = np.flatnonzero(level >= budget)
    if hit.size == 0:
        raise InfeasiblePlanError(f"budget {budget} exceeds the capacity {float(cs.sum())}")
    j = int(hit[0])
    lam = (budget - cum_cap[j]) / suffix_w[j]
    q[act] = np.minimum(lam * wa, ca)
    return q, float(lam)


def round_quotas(q: np.ndarray, caps: np.ndarray, budget: int, priority: np.ndarray) -> np.ndarray:
    """Largest-remainder rounding of real quotas to integers summing to ``budget``, never above caps.

    Ties between equal remainders go to the clusters first in ``priority`` (a seeded cluster order).
    """
    cap_i = np.where(np.isfinite(caps), np.minimum(caps, _INT_ROOM), _INT_ROOM)
    base = np.minimum(np.floor(q), cap_i).astype(np.int64)
    frac = q - base
    extra = int(budget) - int(base.sum())
    rank = np.empty_like(priority)
    rank[priority] = np.arange(priority.size)
    while extra > 0:  # one pass, unless float error left more than one unit per cluster to place
        ok = np.flatnonzero((base < cap_i) & (q > 0))
        pick = ok[np.lexsort((rank[ok], -frac[ok]))][:extra]
        if pick.size == 0:
            raise InfeasiblePlanError(f"budget {budget} exceeds the capacity")
        base[pick] += 1
        extra -= pick.size
    while extra < 0:
        ok = np.flatnonzero(base > 0)
        pick = ok[np.lexsort((rank[ok], frac[ok]))][:-extra]
        base[pick] -= 1
        extra += pick.size
    return base


def feasible_weights(weights: np.ndarray, sizes: np.ndarray, cap: int | None, budget: float,
                     rtol: float = 1e-9) -> np.ndarray:
    """Which mixtures (rows of ``weights``, shape (m, k)) the planner meets exactly under ``cap``.

    A row is feasible when :func:`water_fill` of the budget under the caps ``cap * sizes`` gives every
    cluster its unclipped share ``budget * w_c / sum(w)`` (within ``rtol``): the plan then trains on that
    mixture, not on a clipped one. A positive weight on an empty cluster, a row without positive weight
    or a budget beyond the capacity is infeasible. ``cap`` None: every row with a positive weight on a
    non-empty cluster is feasible. Pure; the plan's own quotas are not touched.
    """
    w = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    n = np.asarray(sizes, dtype=np.float64)
    caps = np.full(n.shape, np.inf) if cap is None else cap * n
    ok = np.zeros(len(w), dtype=bool)
    for i, row in enumerate(w):
        total = row.sum()
        if not np.isfinite(total) or total <= 0 or (row < 0).any() or ((row > 0) & (n <= 0)).any():
            continue
        try:
            with np.errstate(over="ignore", divide="ignore"):
                q, _ = water_fill(row, caps, budget)
        except InfeasiblePlanError:
            continue
        ok[i] = bool(np.all(q >= budget * row / total * (1 - rtol)))
    return ok
