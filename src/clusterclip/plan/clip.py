"""What the repetition cap did to a plan: how many documents reached it, which clusters it exhausted, and, when
it never bound, what budget or cap would make it bind.

Under the cap ``R`` a cluster's quota is ``min(lambda * w_c, R * n_c)`` (water-filling). When no cluster reaches
``R * n_c`` the cap changed nothing: the plan is the same strategy's plan without a cap (for ``clusterclip``,
``uniform``'s). Without a cap each cluster's share of a budget ``B`` is ``B * w_c / W`` (``W``: the sum of the
weights), so the cap surely binds once some cluster's share reaches ``R * n_c``: from the budget
``B* = ceil(min_c R * n_c * W / w_c)``, or at the planned budget with any cap up to ``floor(max_c share_c / n_c)``.
Integer quotas round each share up or down, so a budget a little below ``B*`` (or a cap a little above) may bind
too; the hints are what is sure. Sizes ``n_c`` count documents, or tokens for a token budget.
The one-line notes that read these statistics back are :mod:`clusterclip.contract.plan_notes`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

EXHAUSTED_LISTED = 50
"""At most this many exhausted clusters are listed (in the order they ran out); the count is always given."""


def clip_stats(cap: int | None, weights: np.ndarray, unit_sizes: np.ndarray, budget: int,
               exhausted_at: np.ndarray, repeat_hist: np.ndarray) -> dict[str, Any]:
    """The cap's effect on a plan, for its statistics: ``docs_at_cap`` (documents drawn ``cap`` times),
    ``exhausted_clusters`` (those that ran out, first listed first), ``cap_binds``, and when it does not bind
    ``bind_budget`` (a budget at which it surely binds, None beyond the corpus' capacity) and ``bind_cap`` (a cap
    that surely binds at this budget, None when even a cap of 1 would not)."""
    if cap is None:
        return {"cap_binds": False}
    hit = np.flatnonzero(exhausted_at >= 0)
    hit = hit[np.argsort(exhausted_at[hit], kind="stable")]
    out: dict[str, Any] = {
        "docs_at_cap": int(repeat_hist[cap]) if cap < len(repeat_hist) else 0,
        "exhausted_clusters": hit[:EXHAUSTED_LISTED].tolist(),
        "cap_binds": bool(hit.size),
    }
    if not hit.size:
        out.update(_binding(cap, np.asarray(weights, np.float64), np.asarray(unit_sizes, np.float64), budget))
    return out


def _binding(cap: int, weights: np.ndarray, sizes: np.ndarray, budget: int) -> dict[str, Any]:
    active = (weights > 0) & (sizes > 0)
    if not active.any():
        return {"bind_budget": None, "bind_cap": None}
    w, n = weights[active], sizes[active]
    total = float(w.sum())
    bind_budget = math.ceil(float((cap * n * total / w).min()) - 1e-9)
    need = float((budget * w / total / n).max())  # repeats the most squeezed cluster would need without a cap
    bind_cap = math.floor(need + 1e-9)
    return {"bind_budget": bind_budget if bind_budget <= cap * float(n.sum()) else None,
            "bind_cap": bind_cap if bind_cap >= 1 else None}
