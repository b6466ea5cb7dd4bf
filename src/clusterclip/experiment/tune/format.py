"""What ``clusterclip tune`` prints: a line per proxy run, then the candidates, the choice and its command."""

from __future__ import annotations

import sys
from typing import Any

from clusterclip.contract.tune_results import TuneResults
from clusterclip.experiment.stats import MIN_PAIRS, format_interval


def print_event(text: str) -> None:
    """Progress line on stderr."""
    print(text, file=sys.stderr, flush=True)


def format_summary(res: dict[str, Any]) -> str:
    """The candidates of a search's results (what :func:`~.search_stage.run_tune` returns) as a markdown table
    (intervals vs random), the choice, why, and its plan command."""
    r = TuneResults.from_json(res, "the tune results")
    obj = r.objective or "heldout_macro_cluster"
    lines = [f"Objective: {obj} (lower is better); Δ: paired difference to random over (split, seed) pairs "
             f"[95 % expanded bootstrap interval] verdict (wins/pairs); a verdict needs at least {MIN_PAIRS} pairs.",
             *_few_pairs(r), "",
             "| candidate | status | pairs | Δ objective | Δ micro | feasible |", "|---|---|---|---|---|---|"]
    for name, c in (r.candidates or {}).items():
        a = c.get("assessment") or {}
        lines.append(f"| {name} | {c['status']} | {a.get('pairs', '–')} | {format_interval(a.get('objective'))} | "
                     f"{format_interval(a.get('micro'))} | {a.get('feasible', '–')} |")
    lines += ["", f"Chosen: {r.winner}. {r.reason or ''}", f"Status: {r.status}."]
    if message := (r.budget or {}).get("message"):
        lines.append(message[0].upper() + message[1:] + ".")
    lines += _weight_lines(r.weight_search)
    unseen = r.unseen
    if unseen:
        check = unseen.get("check") or ("holds" if unseen["holds"] else "does NOT hold")
        lines.append(f"Unseen splits {unseen['split_seeds']}: chosen {unseen['chosen']} minus best fixed candidate "
                     f"{unseen['best_fixed']}: {format_interval(unseen['chosen_minus_best'])}; {check}"
                     + (" (at least as good within its interval)." if check == "holds" else "."))
    if r.plan:
        lines.append(f"Plan for the whole corpus: {r.plan['name']}; the same plan by hand:\n  "
                     f"{r.plan['command']}")
    if r.check_command:
        what = "the choice" if r.winner != "random" else "the best candidate (random was chosen)"
        lines.append(f"Check {what} against random on split seeds the search never saw:\n  {r.check_command}")
    return "\n".join(lines) + "\n"


def _few_pairs(res: TuneResults) -> list[str]:
    """A warning when the search has fewer (split, seed) pairs than a verdict needs: random is then chosen."""
    n = len(res.pairs)
    if not n or n >= MIN_PAIRS:
        return []
    return [f"Only {n} search pair(s), fewer than the {MIN_PAIRS} a verdict needs: no candidate can be `better`, "
            f"so random is chosen whatever the runs show; train more --seeds or --split-seeds for a decision."]


def _weight_lines(ws: dict[str, Any] | None) -> list[str]:
    """The weight search in a few lines: groups (and what was changed to make them feasible), rounds, the
    proposals that extrapolate, the finalists and the comparison with the grid."""
    if not ws:
        return []
    sp = ws.get("space", {})
    rounds = ws.get("rounds", [])
    per_round = ", ".join(f"{sum(c['measured'] is not None for c in r['candidates'])}/{len(r['candidates'])}"
                          for r in rounds)
    lines = [f"Weight search: {len(rounds)} rounds, {sum(len(r['candidates']) for r in rounds)} mixtures over "
             f"{sp.get('groups')} groups (max_repeat {sp.get('max_repeat')}; trained per round: {per_round or '–'}); "
             f"finalists: {', '.join(ws.get('final') or ()) or 'none'}."]
    if sp.get("changes"):
        lines.append(f"Weight search groups: {sp.get('groups_asked')} groups and max_repeat "
                     f"{sp.get('max_repeat_asked')} asked; the natural mixture did not fit every split, so: "
                     + "; ".join(sp["changes"]) + ".")
    flagged = [c for r in rounds for c in r["candidates"] if c.get("flags")]
    pulled = sum(bool(c.get("pulled")) for r in rounds for c in r["candidates"])
    predicted = sum(c.get("predicted") is not None for r in rounds for c in r["candidates"])
    if predicted:
        below = sum(any("below every measured" in f for f in c["flags"]) for c in flagged)
        lines.append(f"Predicted mixtures: {predicted}; {pulled} pulled back into the trust region, {len(flagged)} "
                     f"flagged as extrapolating ({below} predicted below every measured objective).")
    if ws.get("stopped"):
        lines.append(f"Weight search stopped: {ws['stopped']}.")
    for key in ("cut", "cut_finals", "late"):
        if ws.get(key):
            lines.append(f"Weight search cut to the budget: {ws[key]}.")
    vs = ws.get("versus_grid")
    if vs:
        lines.append(f"{vs['a']} minus best grid candidate {vs['b']}: {format_interval(vs['minus'])}.")
    return lines
