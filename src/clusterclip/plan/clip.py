"""What the repetition cap did to a plan: how many documents reached it, which clusters it exhausted, and, when
it never bound, what budget or cap would make it bind.

Under the cap ``R`` a cluster's quota is ``min(lambda * w_c, R * n_c)`` (water-filling). When no cluster reaches
``R * n_c`` the cap changed nothing: the plan is the same strategy's plan without a cap (for ``clusterclip``,
``uniform``'s). Without a cap each cluster's share of a budget ``B`` is ``B * w_c / W`` (``W``: the sum of the
weights), so the cap surely binds once some cluster's share reaches ``R * n_c``: from the budget
``B* = ceil(min_c R * n_c * W / w_c)``, or at the planned budget with any cap up to ``floor(max_c share_c / n_c)``.
Integer quotas round each share up or down, so a budget a little below ``B*`` (or a cap a little above) may bind
too; the hints are what is sure. Sizes ``n_c`` count documents, or tokens for a token budget.
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


def clip_note(stats: dict[str, Any], unit: str = "docs") -> str | None:
    """One line on what the cap did (None for a plan without a cap), and for a continuation under a lower cap
    than its parent's, how many documents the parent's prefix already drew more often (never drawn again)."""
    note = _cap_note(stats, unit)
    over = stats.get("over_cap_before")
    if not over:
        return note
    before = (f"{over:,} documents were drawn more than {stats.get('max_repeat')} times before the switch (up to "
              f"{stats.get('max_total_repeat')}); the continuation draws none of them again")
    return before if note is None else f"{note}; {before}"


def _cap_note(stats: dict[str, Any], unit: str) -> str | None:
    cap = stats.get("max_repeat")
    if (cap is None and "strata" not in stats) or "cap_binds" not in stats:
        return None
    if "strata" in stats and not stats["cap_binds"]:
        return None
    if stats["cap_binds"]:
        ids = stats.get("exhausted_clusters") or []
        shown = ", ".join(map(str, ids[:10])) + (", ..." if stats.get("clusters_exhausted", 0) > 10 else "")
        caps = f"the cap of {cap}" if "strata" not in stats else f"the caps (--max-repeat {cap} and the tiers')"
        return (f"{caps} clipped {stats.get('docs_at_cap', 0):,} documents and exhausted "
                f"{stats.get('clusters_exhausted', len(ids)):,} clusters ({shown}); they drop out as they run out")
    same = "uniform's" if stats.get("strategy") == "clusterclip" else "the same strategy's without a cap"
    hints = [f"a budget of {stats['bind_budget']:,} {unit} or more" if stats.get("bind_budget") else None,
             f"--max-repeat {stats['bind_cap']} or less" if stats.get("bind_cap") else None]
    hint = " or ".join(h for h in hints if h) or "no budget this corpus can supply"
    return f"the cap of {cap} never binds, so this plan equals {same}; it would bind with {hint}"


TOKEN_GAP = 1.10
"""Plans whose token totals differ by more than this ratio are not compared at equal tokens (the summary says so)."""


def tokens_note(plans: dict[str, dict[str, Any]]) -> str | None:
    """One line when the plans (``{name: stats}``, continuations left out) differ in tokens by more than 10 %:
    a document budget gives a balanced plan the short documents of small clusters, so it may hold a fraction of
    random's tokens, and training comparisons should be made at equal tokens."""
    totals = {name: int(s["tokens"]) for name, s in plans.items()
              if s.get("tokens") and not s.get("max_total_repeat") and "-cont-" not in name}
    if len(totals) < 2:
        return None
    lo, hi = min(totals, key=totals.__getitem__), max(totals, key=totals.__getitem__)
    if totals[hi] <= TOKEN_GAP * totals[lo]:
        return None
    return (f"the plans differ in tokens by {totals[hi] / totals[lo]:.2g}x ({hi}: {totals[hi]:,}, {lo}: "
            f"{totals[lo]:,}); compare strategies at equal tokens: plan them with --budget-unit tokens and one "
            "--budget (docs/sampling.md)")


def strata_note(stats: dict[str, Any]) -> str | None:
    """One line on a plan over strata: its settings and what each tier drew."""
    strata = stats.get("strata")
    if not strata:
        return None
    tiers = strata.get("tiers") or []
    shown = ", ".join(f"{t['label']} {t['draws']:,}" for t in tiers[:12]) + (", ..." if len(tiers) > 12 else "")
    spec = " ".join(f"{k}={v}" for k, v in (strata.get("settings") or {}).items())
    return f"strata: {spec}; draws per tier: {shown}"
