"""What ``clusterclip tune`` prints: a line per proxy run, then the candidates, the choice and its command."""

from __future__ import annotations

import sys
from typing import Any

from clusterclip.experiment.stats import format_interval


def print_event(text: str) -> None:
    """Progress line on stderr."""
    print(text, file=sys.stderr, flush=True)


def format_summary(res: dict[str, Any]) -> str:
    """The candidates as a markdown table (intervals vs random), the choice, why, and its plan command."""
    obj = res.get("objective") or "heldout_macro_cluster"
    lines = [f"Objective: {obj} (lower is better); Δ: paired difference to random over (split, seed) pairs "
             "[95 % bootstrap interval] verdict (wins/pairs).", "",
             "| candidate | status | pairs | Δ objective | Δ micro | feasible |", "|---|---|---|---|---|---|"]
    for name, c in (res.get("candidates") or {}).items():
        a = c.get("assessment") or {}
        lines.append(f"| {name} | {c['status']} | {a.get('pairs', '–')} | {format_interval(a.get('objective'))} | "
                     f"{format_interval(a.get('micro'))} | {a.get('feasible', '–')} |")
    lines += ["", f"Chosen: {res.get('winner')}. {res.get('reason', '')}", f"Status: {res.get('status')}."]
    lines += _weight_lines(res.get("weight_search"))
    unseen = res.get("unseen")
    if unseen:
        lines.append(f"Unseen splits {unseen['split_seeds']}: chosen {unseen['chosen']} minus best fixed candidate "
                     f"{unseen['best_fixed']}: {format_interval(unseen['chosen_minus_best'])}; "
                     f"{'holds' if unseen['holds'] else 'does NOT hold'} (at least as good within its interval).")
    if res.get("plan"):
        lines.append(f"Plan for the whole corpus: {res['plan']['name']}; the same plan by hand:\n  "
                     f"{res['plan']['command']}")
    return "\n".join(lines) + "\n"


def _weight_lines(ws: dict[str, Any] | None) -> list[str]:
    """The weight search in a few lines: groups, rounds, the finalists and the comparison with the grid."""
    if not ws:
        return []
    sp = ws.get("space", {})
    n = sum(len(r["candidates"]) for r in ws.get("rounds", []))
    lines = [f"Weight search: {len(ws.get('rounds', []))} rounds, {n} mixtures over {sp.get('groups')} groups "
             f"(max_repeat {sp.get('max_repeat')}); finalists: {', '.join(ws.get('final') or ()) or 'none'}."]
    if ws.get("stopped"):
        lines.append(f"Weight search stopped: {ws['stopped']}.")
    vs = ws.get("versus_grid")
    if vs:
        lines.append(f"{vs['a']} minus best grid candidate {vs['b']}: {format_interval(vs['minus'])}.")
    return lines
