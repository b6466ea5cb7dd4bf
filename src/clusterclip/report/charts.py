"""The report's charts: one function per chart, each writing a PNG and returning what it drew.

Figures are built with :class:`matplotlib.figure.Figure` and rendered by the Agg canvas directly, never
through ``pyplot``: nothing is registered in pyplot's global figure list (so nothing leaks when a report
is built inside a long-lived process or a notebook), no GUI backend is ever touched and the caller's
backend choice is left alone. Every chart has a title and axis labels; :class:`Chart` returns them so
tests and the HTML page can use them. The style, the colours and :class:`Chart` are shared with the experiment
(:mod:`clusterclip.charts.style`); the centroid map is in :mod:`clusterclip.report.centroid_map`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from clusterclip.charts.style import (
    CATEGORICAL,
    OTHER_COLOUR,
    SMALL_COLOUR,
    STYLE,
    Chart,
    cluster_colour,
    new_figure,
    save_chart,
)
from clusterclip.report.metrics import effective_number

if TYPE_CHECKING:
    from clusterclip.report.continued import Switch
    from clusterclip.report.scale import RepeatScale


def _plain_log_axis(ax: Axes, values: np.ndarray) -> None:
    """Log y axis with plain numbers (1,000 rather than 10^3); minor ticks labelled over < 2 decades."""
    ax.set_yscale("log")
    pos = np.asarray(values, dtype=np.float64)
    pos = pos[pos > 0]
    plain = FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0)))
    few_decades = pos.size > 0 and pos.max() / pos.min() < 100
    ax.yaxis.set_minor_formatter(plain if few_decades else NullFormatter())


def plot_sizes(sizes: np.ndarray, path: str | os.PathLike[str]) -> Chart:
    """Cluster sizes sorted from largest to smallest on a log scale (a long tail shows as a slope)."""
    s = np.sort(np.asarray(sizes, dtype=np.int64))[::-1]
    title = f"Cluster size distribution (K={s.size})"
    with rc_context(STYLE):
        fig = new_figure()
        ax = fig.add_subplot()
        ranks = np.arange(1, s.size + 1)
        ax.bar(ranks, np.maximum(s, 0), width=1.0, color=CATEGORICAL[0], linewidth=0)
        if s.size and s.max() > 0:
            _plain_log_axis(ax, s)
            mean = s.mean()
            ax.axhline(mean, color="#333333", linestyle="--", linewidth=1, label=f"mean size ({mean:,.0f})")
            ax.legend(loc="upper right")
        ax.set_xlim(0.5, max(s.size, 1) + 0.5)
        ax.set_xlabel("cluster rank (largest first)")
        ax.set_ylabel("documents (log scale)")
        ax.set_title(title)
        return save_chart(fig, path, title)


def plot_mixture(
    mixture: np.ndarray,
    sizes: np.ndarray,
    window: int,
    path: str | os.PathLike[str],
    plan: str,
    top: int = 8,
    exhausted_at: np.ndarray | None = None,
    switch: Switch | None = None,
) -> Chart:
    """Stacked shares of the ``top`` largest clusters in each window, the rest in two grey bands.

    The other clusters are split by size into a larger and a smaller half, so the drift stays visible
    when K is large and the top clusters hold little of the corpus.

    Two reference lines give the share of those clusters under random sampling (their natural share)
    and under perfect balance (top/K); a ClusterClip plan starts near the second and drifts to the
    first as small clusters are exhausted, marked by ticks along the top edge.

    ``switch`` (a continued plan) replaces the mixture by the stream across the switch (the parent's
    windows, then this plan's, at their training positions) and marks the switch with a vertical line.
    """
    if switch is not None:
        mixture, exhausted_at = switch.mixture, switch.exhausted_at
    m = np.asarray(mixture, dtype=np.float64)
    sizes = np.asarray(sizes, dtype=np.float64)
    k = m.shape[1] if m.ndim == 2 else 0
    title = f"Mixture over training: {plan}"
    if switch is not None:
        title = f"Mixture over training: {switch.parent}, then from position {switch.at:,} {plan}"
    order = np.argsort(-sizes, kind="stable")[: min(top, k)]
    totals = m.sum(axis=1, keepdims=True) if k else np.zeros((len(m), 1))
    shares = np.divide(m, totals, out=np.zeros_like(m), where=totals > 0)
    x = np.arange(len(m)) * max(int(window), 1) if switch is None else np.asarray(switch.positions)
    with rc_context(STYLE):
        fig = new_figure(9.0, 4.4)
        ax = fig.add_subplot()
        if k and len(m):
            layers, labels, colours = _mixture_layers(shares, sizes, order)
            if len(x) == 1:
                x = np.array([0, max(int(window), 1)])
                layers = [np.repeat(layer, 2) for layer in layers]
            ax.stackplot(x, np.vstack(layers), labels=labels, colors=colours, linewidth=0, alpha=0.95)
            _mixture_references(ax, k, len(order), sizes[order].sum() / max(sizes.sum(), 1.0))
            if exhausted_at is not None:
                _exhaustion_ticks(ax, np.asarray(exhausted_at))
            if switch is not None:
                ax.axvline(switch.at, color="black", linewidth=1.5, linestyle="--", label="switch to continuation")
            ax.set_xlim(x[0], x[-1])
            ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
        ax.set_ylim(0, 1)
        ax.set_xlabel(f"training position (draws; windows of {int(window):,})")
        ax.set_ylabel("share of draws in window")
        ax.set_title(title)
        return save_chart(fig, path, title)


def _mixture_layers(
    shares: np.ndarray, sizes: np.ndarray, order: np.ndarray
) -> tuple[list[np.ndarray], list[str], list[str]]:
    """Stacked layers (shares per window), labels and colours: the top clusters, then the rest in two halves."""
    layers = [shares[:, c] for c in order]
    labels = [f"cluster {c} ({int(sizes[c]):,} docs)" for c in order]
    colours = [cluster_colour(r) for r in range(len(order))]
    rest = np.argsort(-sizes, kind="stable")[len(order) :]
    groups = np.array_split(rest, 2) if len(rest) >= 4 else [rest]
    names = ["other clusters, larger half", "other clusters, smaller half"] if len(groups) == 2 else ["other"]
    for members, name, colour in zip(groups, names, (OTHER_COLOUR, SMALL_COLOUR), strict=False):
        if len(members):
            layers.append(shares[:, members].sum(axis=1))
            labels.append(f"{name} ({len(members)}, {int(sizes[members].sum()):,} docs)")
            colours.append(colour)
    return layers, labels, colours


def _mixture_references(ax: Axes, k: int, top: int, natural: float) -> None:
    """Dashed: the natural share of the ``top`` largest clusters; dotted: their balanced share top/K."""
    ax.axhline(
        natural, color="black", linestyle="--", linewidth=1.2, label=f"natural share of top {top} ({natural:.0%})"
    )
    balanced = top / k
    ax.axhline(
        balanced, color="black", linestyle=":", linewidth=1.2, label=f"balanced share of top {top} ({balanced:.0%})"
    )


def _exhaustion_ticks(ax: Axes, exhausted_at: np.ndarray) -> None:
    """Red ticks on the top edge at the positions where clusters were exhausted (-1: never)."""
    ex = exhausted_at[exhausted_at >= 0]
    if ex.size:
        ax.plot(
            ex,
            np.full(ex.size, 1.0),
            "|",
            color="#b00000",
            markersize=9,
            clip_on=False,
            label=f"cluster exhausted ({ex.size})",
        )


def plot_repeats(repeat_hist: np.ndarray, path: str | os.PathLike[str], plan: str,
                 scale: RepeatScale | None = None) -> Chart:
    """How many documents a plan draws 0, 1, 2, ... times (log scale when counts span decades).

    ``scale`` is the y axis shared by the charts of all plans, so bars of the same height mean the same count.
    """
    h = np.asarray(repeat_hist, dtype=np.int64)
    title = f"Repetition: {plan}"
    with rc_context(STYLE):
        fig = new_figure(6.0, 3.8)
        ax = fig.add_subplot()
        times = np.arange(h.size)
        colours = [OTHER_COLOUR if t == 0 else CATEGORICAL[0] for t in times]
        ax.bar(times, h, color=colours, width=0.8)
        pos = h[h > 0]
        if scale is not None:
            if scale.log:
                _plain_log_axis(ax, np.array([scale.bottom, scale.top]))
            ax.set_ylim(scale.bottom if scale.log else 0, scale.top)
        elif pos.size and pos.max() / pos.min() > 50:
            _plain_log_axis(ax, pos)
        if h.size <= 25:
            ax.set_xticks(times)
        total = h.sum()
        if total:
            ax.text(
                0.98,
                0.95,
                f"never drawn: {h[0] / total:.1%}\nmost repeats: {int(np.flatnonzero(h).max())}",
                transform=ax.transAxes,
                ha="right",
                va="top",
                fontsize=9,
                bbox={"facecolor": "white", "edgecolor": "#d1d9e0", "alpha": 0.9, "boxstyle": "round"},
            )
        ax.set_xlabel("times a document is drawn")
        ax.set_ylabel("documents")
        ax.set_title(title)
        return save_chart(fig, path, title)


def plot_effective_clusters(
    plans: Mapping[str, tuple[np.ndarray, int]],
    sizes: np.ndarray,
    path: str | os.PathLike[str],
    starts: Mapping[str, int] | None = None,
) -> Chart:
    """Effective number of clusters (exp of the entropy of cluster shares) per window, one line per plan.

    ``plans`` maps a plan name to (mixture [W, K], window); ``starts`` the training position a plan's first
    window is drawn at (a continuation's switch position; default 0). A last window holding less than half a
    window of draws is left out: fewer draws see fewer clusters, which would show as a spurious drop.
    References: K (every cluster equally often), the corpus's own value, and what random sampling
    gives in a window of the same size; the last is lower than the corpus's value because a window of
    w draws cannot hit every cluster, and it is the fair baseline for the plans' lines.
    """
    sizes = np.asarray(sizes, dtype=np.float64)
    title = "Effective number of clusters per window"
    windows: set[int] = set()
    with rc_context(STYLE):
        fig = new_figure()
        ax = fig.add_subplot()
        drawn: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for i, (name, (mixture, window)) in enumerate(plans.items()):
            m = np.asarray(mixture)
            window = max(int(window), 1)
            if m.ndim != 2 or not len(m):
                continue
            if len(m) > 1 and m[-1].sum() < window / 2:
                m = m[:-1]
            windows.add(window)
            x = int((starts or {}).get(name, 0)) + np.arange(len(m)) * window
            y = effective_number(m, axis=1)
            _plan_line(ax, x, y, name, i, drawn)
        if sizes.size:
            ax.axhline(sizes.size, color="black", linestyle=":", linewidth=1.2, label=f"K = {sizes.size}")
            natural = float(effective_number(sizes))
            ax.axhline(natural, color="black", linestyle="--", linewidth=1.2, label=f"corpus mixture = {natural:.1f}")
            for window in sorted(windows)[:3]:
                expected = expected_random_effective(sizes, window)
                ax.axhline(
                    expected,
                    color="#7f7f7f",
                    linestyle="-.",
                    linewidth=1.2,
                    label=f"random, windows of {window:,} = {expected:.1f}",
                )
        ax.set_ylim(bottom=0)
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
        ax.set_xlabel("training position (draws)")
        ax.set_ylabel("effective number of clusters")
        ax.set_title(title)
        return save_chart(fig, path, title)


PLAN_DASHES: list[str | tuple[int, tuple[int, ...]]] = ["-", (0, (6, 2)), (0, (2, 2)), (0, (6, 2, 2, 2))]
PLAN_MARKERS = "os^Dv"


def _plan_line(ax: Axes, x: np.ndarray, y: np.ndarray, name: str, i: int,
               drawn: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    """Plan ``i``'s line: its own colour, dash pattern and markers (placed apart from the other plans'), so a line
    that runs on top of another for a stretch still shows both; one identical to a line drawn before is dashed
    on top of it and says so in the legend."""
    twins = [other for other, (ox, oy) in drawn.items()
             if len(ox) == len(x) and np.array_equal(ox, x) and np.allclose(oy, y, rtol=1e-9, atol=1e-9)]
    drawn[name] = (x, y)
    step = max(1, len(x) // 10)
    dashes = (0, (3, 3)) if twins else PLAN_DASHES[i % len(PLAN_DASHES)]
    ax.plot(x, y, color=CATEGORICAL[i % len(CATEGORICAL)], linewidth=2.2 if twins else 1.6, linestyle=dashes,
            marker=PLAN_MARKERS[i % len(PLAN_MARKERS)], markersize=4.5,
            markevery=(i * max(1, step // len(PLAN_MARKERS)) % step, step), zorder=3 if twins else 2,
            label=f"{name} (same as {twins[0]})" if twins else name)


def expected_random_effective(sizes: np.ndarray, window: int, n_sims: int = 200, seed: int = 0) -> float:
    """Mean effective number of clusters in windows of ``window`` documents drawn at random without
    replacement (Monte Carlo, seeded so the report is reproducible)."""
    counts = np.asarray(sizes, dtype=np.int64)
    total = int(counts.sum())
    if total == 0:
        return 0.0
    draws = np.random.default_rng(seed).multivariate_hypergeometric(
        counts, min(int(window), total), size=n_sims, method="marginals"
    )
    return float(effective_number(draws, axis=1).mean())


def plot_curves(
    series: Mapping[str, tuple[np.ndarray, np.ndarray]],
    path: str | os.PathLike[str],
    title: str,
    xlabel: str = "step",
    ylabel: str = "value",
) -> Chart:
    """Generic line chart of named (x, y) series, used for an experiment's loss curves."""
    with rc_context(STYLE):
        fig = new_figure()
        ax = fig.add_subplot()
        for i, (name, (x, y)) in enumerate(series.items()):
            ax.plot(
                np.asarray(x, dtype=np.float64),
                np.asarray(y, dtype=np.float64),
                color=CATEGORICAL[i % len(CATEGORICAL)],
                linewidth=1.6,
                label=name,
            )
        if series:
            ax.legend(loc="best")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        return save_chart(fig, path, title)
