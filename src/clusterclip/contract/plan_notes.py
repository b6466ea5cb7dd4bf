"""What a plan's recorded statistics say in one line: what the cap did (:func:`clip_note`), how the plans' token
totals compare (:func:`tokens_note`) and what each tier drew (:func:`strata_note`). Pure readers of
``plan.json``'s ``stats`` (written by :func:`clusterclip.plan.clip.clip_stats` and the planner), shared by
``clusterclip plan``, the run summary and the report."""

from __future__ import annotations

from typing import Any


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
