"""The report's strata section: for every plan over strata, a table of its tiers (rate, cap, documents, draws,
share of draws, unique documents, tokens) and a chart of the tiers' shares over the run.

Reads only what the plan stage recorded (``plan.json``'s ``stats["strata"]`` and ``tier_mixture.npy``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.contract.plan import PLAN_TIER_MIXTURE, plan_path
from clusterclip.report import charts
from clusterclip.report import html as h
from clusterclip.store import load_npy

TIERS_SHOWN = 24
"""Tiers drawn as their own band in the chart; the others share one grey band."""
POINTS = 40
"""Points along the run in the chart (consecutive mixture windows are summed)."""


@dataclass(frozen=True)
class StrataPlan:
    """One plan over strata: its name, settings, tiers (as recorded) and the chart file of its tiers over the run."""

    name: str
    settings: dict[str, Any]
    tiers: tuple[dict[str, Any], ...]
    chart: str | None
    mixture: np.ndarray | None
    window: int


def strata_plans(root: Path, plans: list[tuple[str, str, dict[str, Any]]]) -> tuple[StrataPlan, ...]:
    """The plans over strata among ``plans`` (name, chart slug, statistics), with their tier mixtures."""
    out = []
    for name, slug, stats in plans:
        strata = stats.get("strata")
        if not strata:
            continue
        path = root / plan_path(name, PLAN_TIER_MIXTURE)
        mixture = np.asarray(load_npy(path)) if path.exists() else None
        out.append(StrataPlan(name, dict(strata.get("settings") or {}), tuple(strata.get("tiers") or ()),
                              f"tiers-{slug}.png" if mixture is not None else None, mixture,
                              int(stats.get("window") or 1)))
    return tuple(out)


def plot_tiers(plan: StrataPlan, path: str | os.PathLike[str]) -> charts.Chart:
    """Stacked shares of each tier's draws in each mixture window."""
    m = np.asarray(plan.mixture, np.float64)
    labels = [t["label"] for t in plan.tiers]
    if m.shape[1] > TIERS_SHOWN:
        top = np.argsort(-m.sum(axis=0), kind="stable")[:TIERS_SHOWN - 1]
        rest = np.setdiff1d(np.arange(m.shape[1]), top)
        m = np.column_stack([m[:, top], m[:, rest].sum(axis=1)])
        labels = [labels[i] for i in top] + ["other tiers"]
    bins = max(1, -(-len(m) // POINTS))  # windows per point: a readable band whatever the number of windows
    m = np.add.reduceat(m, np.arange(0, len(m), bins), axis=0) if len(m) else m
    totals = m.sum(axis=1, keepdims=True)
    shares = np.divide(m, totals, out=np.zeros_like(m), where=totals > 0)
    x = np.arange(len(m)) * max(plan.window, 1) * bins
    with charts.rc_context(charts.STYLE):
        fig = charts.new_figure(9.0, 3.8)
        ax = fig.add_subplot()
        if len(m) == 1:
            x, shares = np.array([0, max(plan.window, 1)]), np.repeat(shares, 2, axis=0)
        colours = [charts.cluster_colour(i) for i in range(shares.shape[1])]
        ax.stackplot(x, shares.T, labels=labels, colors=colours, linewidth=0)
        ax.set_xlabel("plan position (draws)")
        ax.set_ylabel("share of the window's draws")
        ax.set_ylim(0, 1)
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, title="tier")
        fig.tight_layout()
        return charts.save_chart(fig, path, f"Tiers over training: {plan.name}",
                                 "each tier's share of the draws in every window of the plan")


def render_strata(plans: tuple[StrataPlan, ...], made: dict[str, charts.Chart]) -> str:
    """The section's HTML: per plan, its settings, the tier table and the chart."""
    body = []
    for p in plans:
        total = sum(int(t["draws"]) for t in p.tiers) or 1
        cols = ["tier", h.Column("rate", True), h.Column("cap", True), h.Column("documents", True),
                h.Column("draws", True), h.Column("% draws", True), h.Column("unique", True), h.Column("tokens", True)]
        rows = [[t["label"], t["rate"], "none" if t["cap"] is None else t["cap"], t["docs"], t["draws"],
                 h.Cell(f"{t['draws'] / total:.1%}", sort=t["draws"] / total, numeric=True), t["unique"],
                 "–" if t.get("tokens") is None else t["tokens"]] for t in p.tiers]
        settings = " · ".join(f"{k} <code>{h.esc(str(v))}</code>" for k, v in p.settings.items())
        chart = h.figure(made[p.chart], p.chart) if p.chart and p.chart in made else ""
        body.append(f"<h3>{h.esc(p.name)}</h3><p>{settings}</p><div class=\"scroll\">"
                    f"{h.table(cols, rows, sortable=True)}</div>{chart}")
    intro = ("Plans over strata (<code>--strata</code>, <code>--within</code>, <code>--duplicates rehydrate</code>): "
             "clusters are balanced as the strategy says, the tiers inside a cluster by their rate (a document of a "
             "tier at rate 2 is drawn twice as often as one at rate 1), and no document is drawn more often than "
             "its tier's cap. The chart shows each tier's share of the draws over the run.")
    return h.section("strata", "Strata", "".join(body), intro)
