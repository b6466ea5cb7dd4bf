"""The report's tune section: what ``clusterclip tune`` tried (``tune/results.json``), its intervals,
the search trajectory, and why the winner won or that nothing beat random."""

from __future__ import annotations

from typing import Any

from clusterclip.contract.tune_results import TuneResults
from clusterclip.report import html as h


def _interval(e: object) -> h.Cell:
    """``-0.012 [-0.030, +0.004] inconclusive (2/3)``, sortable by the mean."""
    if not isinstance(e, dict) or "mean" not in e:
        return h.Cell("–")
    text = f"{e['mean']:+.4f} [{e['low']:+.4f}, {e['high']:+.4f}] {e['verdict']} ({e['wins']}/{e['n']})"
    return h.Cell(h.esc(text), sort=float(e["mean"]), numeric=True, cls=f"verdict-{e['verdict']}")


def _candidate_rows(candidates: dict[str, Any]) -> list[list[object]]:
    rows = []
    for name, c in candidates.items():
        a = c.get("assessment") or {}
        rows.append([name, c.get("status"), c.get("rung"), a.get("pairs"), _interval(a.get("objective")),
                     _interval(a.get("micro")), a.get("feasible")])
    return rows


def _trajectory_rows(trajectory: list[dict[str, Any]]) -> list[list[object]]:
    return [[t["rung"], len(t["pairs"]), len(t["alive"]), ", ".join(t["kept"]), "yes" if t["complete"] else "no"]
            for t in trajectory]


def _unseen(u: dict[str, Any]) -> str:
    d = u["chosen_minus_best"]
    verdict = "holds" if u["holds"] else "does not hold"
    text = (f"On split seeds {u['split_seeds']} (never seen by the search), the chosen {u['chosen']} minus the "
            f"best fixed candidate there ({u['best_fixed']}): {d['mean']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}] "
            f"over {d['n']} pairs; the choice {verdict} (at least as good within its interval).")
    rows = _candidate_rows({n: {"status": "", "rung": None, "assessment": a} for n, a in u["candidates"].items()})
    cols = ["candidate", "", "", h.Column("pairs", True), h.Column("Δ objective vs random", True),
            h.Column("Δ micro vs random", True), "feasible"]
    return f"<h3>Unseen splits</h3><p>{h.esc(text)}</p>" + h.table(cols, rows, "tune-unseen", True)


def _chosen_weights(res: TuneResults, ws: dict[str, Any]) -> tuple[str | None, list[float] | None]:
    """The chosen weight candidate, else the best weight finalist: its name and group weights."""
    names = list(ws.get("final") or {})
    name = res.winner if str(res.winner or "").startswith("weights-") else (names[0] if names else None)
    spec = res.specs().get(name, {}) if name else {}
    return name, spec.get("group_weights")


def _weight_search(res: TuneResults, ws: dict[str, Any]) -> str:
    """Rounds (predicted vs measured), the chosen weights against natural and uniform, and the grid."""
    space = ws.get("space", {})
    rows = [[r["round"], c["name"], c.get("predicted"), c.get("measured")]
            for r in ws.get("rounds", []) for c in r["candidates"]]
    text = (f"{space.get('groups')} groups of clusters (reference split {space.get('reference_split')}), "
            f"max_repeat {space.get('max_repeat')}; measured: mean objective minus random's over each round's pairs.")
    out = f"<h3>Weight search</h3><p>{h.esc(text)}</p>" + h.table(
        [h.Column("round", True), "candidate", h.Column("predicted", True), h.Column("measured", True)],
        rows, "tune-weight-rounds", True)
    name, chosen = _chosen_weights(res, ws)
    natural = space.get("natural") or []
    if chosen and len(chosen) == len(natural):
        m = len(natural)
        wrows = [[f"g{g}", natural[g], 1 / m, chosen[g]] for g in range(m)]
        out += f"<p>{h.esc(f'Weights of {name} against the natural (size) and uniform mixtures:')}</p>" + h.table(
            ["group", h.Column("natural", True), h.Column("uniform", True), h.Column(str(name), True)], wrows,
            "tune-weights")
    vs = ws.get("versus_grid")
    if vs:
        out += h.note(f"{vs['a']} minus the best grid candidate {vs['b']} over {vs['pairs']} search pairs:")
        out += h.table(["", h.Column("Δ objective", True)], [[vs["a"], _interval(vs["minus"])]], "tune-vs-grid")
    return out


def tune_section(res: TuneResults) -> str:
    """The section's HTML from ``tune/results.json`` (an unfinished search gives what it holds)."""
    if not res.candidates:
        body = h.note(f"tune/results.json holds no finished search yet (status: {res.status}).")
        return h.section("tune", "Tune", body)
    facts = [("chosen plan", res.winner), ("why", res.reason), ("objective", res.objective),
             ("micro tolerance", res.tune.get("max_micro_regression")), ("status", res.status),
             ("proxy runs trained / reused", f"{res.progress['trained']} / {res.progress['reused']}"
              if res.progress is not None else None)]
    if res.plan:
        facts.append(("the same plan by hand", res.plan["command"]))
    cols = ["candidate", "status", h.Column("last rung", True), h.Column("pairs", True),
            h.Column("Δ objective vs random", True, "mean paired difference [95 % bootstrap interval] verdict"),
            h.Column("Δ micro vs random", True), "feasible"]
    body = h.key_values(facts) + h.table(cols, _candidate_rows(res.candidates), "tune-candidates", True)
    body += "<h3>Search trajectory</h3>" + h.table(
        [h.Column("rung", True), h.Column("pairs", True), h.Column("candidates", True), "kept", "complete"],
        _trajectory_rows(res.trajectory), "tune-trajectory")
    if res.weight_search:
        body += _weight_search(res, res.weight_search)
    if res.unseen:
        body += _unseen(res.unseen)
    intro = ("Plans searched by <code>clusterclip tune</code> with proxy runs (<code>tune/results.json</code>): "
             "each candidate's paired difference to random over (held-out split, seed) pairs with its 95 % "
             "bootstrap interval. A candidate wins only with an objective interval below zero and micro loss "
             "within the tolerance; otherwise random is chosen.")
    return h.section("tune", "Tune", body, intro)
