"""The chart of cluster weights over an online-mixed run, readable at any K.

Two panels share the x axis. Above, the stacked share of the weight: per cluster while K is small (the clusters
whose weight moved most, the others in one grey band), else per group of weight ranks (how much of the weight the
most weighted 1 %, 10 %, 50 % of the clusters hold), which a thousand thin layers could not show. Below, the weights
relative to uniform (``K w``: 1 is uniform) of the clusters whose weight moved most as step lines, over a grey
band of the 10-90 % quantiles of all clusters and their median, with dots for the share each cluster actually got
until the next update. Whatever K, the chart draws a bounded number of artists: the data arrives reduced
(:class:`WeightTrack`).

The report draws it per chain of continuations (:mod:`clusterclip.report.online`); :func:`experiment_online`
reduces the ``online`` record of ``clusterclip experiment``'s proxy runs to the same track, for the report's
experiment section and the experiment's own charts alike.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.ticker import FuncFormatter, NullFormatter

from clusterclip.charts.style import OTHER_COLOUR, STYLE, Chart, cluster_colour, new_figure, save_chart

TOP_CHANGERS = 8
"""Clusters drawn on their own: those whose weight moved most over the run."""
BAND = (0.1, 0.5, 0.9)
"""Quantiles of all clusters' relative weights (``K w``) drawn as a band and a median line."""
PER_CLUSTER_STACK = 10
"""Up to this K the stacked chart has a layer per cluster; beyond it, one per group of weight ranks."""
RANK_GROUPS = (0.01, 0.1, 0.5)
"""Bounds of the weight-rank groups of the stacked chart, as shares of K (the most weighted 1 %, up to 10 %, ...)."""
RANK_COLOURS = ("#1f4e79", "#4e79a7", "#a0cbe8", OTHER_COLOUR)
LOG_SPAN = 20.0
"""Relative weights spanning more than this factor are drawn on a log scale."""
MAX_EXPERIMENT_RUNS = 6

Draw = Callable[[Path], Chart]


@dataclass(frozen=True)
class WeightTrack:
    """Cluster weights over a run, reduced to a bounded size whatever K.

    Row ``i`` of the weights holds from ``starts[i]`` to the next start (the last to ``end``). ``clusters`` are
    the clusters whose weight moved most (largest max - min, biggest first), ``top`` their weights
    ``[rows, len(clusters)]``, ``band`` the :data:`BAND` quantiles of ``K w`` over all clusters ``[3, rows]``,
    ``realised`` the realised shares of ``clusters`` in each row's segment (NaN where unknown; None without any).
    ``stack`` ``[layers, rows]`` is the stacked share of the weight, one layer per ``stack_labels``: per cluster
    (then "other") when K is small, else by weight rank (the most weighted 1 %, the next 9 %, ...).
    """

    starts: np.ndarray
    end: float
    k: int
    clusters: np.ndarray
    top: np.ndarray
    band: np.ndarray
    stack: np.ndarray
    stack_labels: tuple[str, ...]
    realised: np.ndarray | None = None

    @property
    def by_rank(self) -> bool:
        """Whether the stack groups clusters by weight rank (K too large for one layer per cluster)."""
        return self.k > PER_CLUSTER_STACK


def _rank_stack(w: np.ndarray) -> tuple[np.ndarray, tuple[str, ...]]:
    """The share of the weight held by the :data:`RANK_GROUPS` of clusters, most weighted first, in each row."""
    k = w.shape[1]
    bounds = np.unique(np.ceil(np.array([*RANK_GROUPS, 1.0]) * k).astype(np.int64))
    held = np.cumsum(-np.sort(-w, axis=1), axis=1)[:, bounds - 1]
    stack = np.diff(held, axis=1, prepend=0.0).T
    edges = np.concatenate([[0], bounds])
    labels = tuple(f"weight ranks {lo + 1:,}-{hi:,} ({(hi - lo) / k:.0%} of clusters)"
                   for lo, hi in itertools.pairwise(edges))
    return stack, labels


def weight_track(weights: np.ndarray, starts: Sequence[float], end: float, realised: np.ndarray | None = None,
                 top: int = TOP_CHANGERS) -> WeightTrack:
    """The :class:`WeightTrack` of ``weights`` ``[rows, K]``; ``realised`` shares ``[rows, K]`` (NaN rows: unknown)."""
    w = np.asarray(weights, np.float64)
    k = w.shape[1]
    moved = w.max(axis=0) - w.min(axis=0)
    clusters = np.argsort(-moved, kind="stable")[: min(top, k)]
    if k > PER_CLUSTER_STACK:
        stack, labels = _rank_stack(w)
    else:
        rest = np.clip(1.0 - w[:, clusters].sum(axis=1), 0.0, 1.0)
        stack = np.vstack([w[:, clusters].T, rest[None]] if k > len(clusters) else [w[:, clusters].T])
        labels = tuple(f"cluster {c}" for c in clusters) + ((f"other {k - len(clusters)} clusters",)
                                                             if k > len(clusters) else ())
    shown = None
    if realised is not None and np.isfinite(realised).any():
        shown = np.asarray(realised, np.float64)[:, clusters]
    return WeightTrack(np.asarray(starts, np.float64), float(end), k, clusters, w[:, clusters],
                       np.quantile(w * k, BAND, axis=1), stack, labels, shown)


def _held(values: np.ndarray) -> np.ndarray:
    """Values per row with the last repeated, for step drawing up to the end of the run."""
    return np.concatenate([values, values[..., -1:]], axis=-1)


def plot_online_weights(track: WeightTrack, path: str | os.PathLike[str], title: str, xlabel: str) -> Chart:
    """Stacked shares of the weight (top) and weights relative to uniform (bottom) over the run."""
    x = np.append(track.starts, max(track.end, track.starts[-1] + 1))
    colours = [cluster_colour(r) for r in range(len(track.clusters))]
    stack_colours = list(RANK_COLOURS) if track.by_rank else [*colours, OTHER_COLOUR]
    with rc_context(STYLE):
        fig = new_figure(9.0, 6.6)
        share, rel = fig.subplots(2, 1, sharex=True)
        share.stackplot(x, _held(track.stack), labels=track.stack_labels, colors=stack_colours[: len(track.stack)],
                        step="post", linewidth=0)
        share.set_ylim(0, 1)
        share.set_ylabel("share of the weight")
        share.set_title(title)
        share.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
        _relative(rel, track, x, colours)
        rel.set_xlim(x[0], x[-1])
        rel.set_xlabel(xlabel)
        return save_chart(fig, path, title)


def _relative(ax: Axes, track: WeightTrack, x: np.ndarray, colours: list[str]) -> None:
    """Weights times K of the clusters that moved most, the band of all clusters, realised shares as dots."""
    k = track.k
    lo, mid, hi = _held(track.band)
    ax.fill_between(x, lo, hi, step="post", color=OTHER_COLOUR, alpha=0.45, linewidth=0,
                    label=f"{BAND[0]:.0%}-{BAND[2]:.0%} of all {k:,} clusters")
    ax.step(x, mid, where="post", color="#555555", linestyle="--", linewidth=1, label="median cluster")
    ax.axhline(1.0, color="black", linestyle=":", linewidth=1, label="uniform (1/K)")
    for j, colour in enumerate(colours):
        label = f"cluster {track.clusters[j]}" if track.by_rank else None
        ax.step(x, k * _held(track.top[:, j]), where="post", color=colour, linewidth=1.6, label=label)
    values = [k * track.top, track.band]
    if track.realised is not None:
        centres = (x[:-1] + x[1:]) / 2
        for j, colour in enumerate(colours):
            ax.plot(centres, k * track.realised[:, j], "o", color=colour, markersize=4, markeredgecolor="white")
        ax.plot([], [], "o", color="#555555", markersize=4, label="realised share until the next update")
        values.append(k * track.realised)
    positive = np.concatenate([np.ravel(v) for v in values])
    positive = positive[np.isfinite(positive) & (positive > 0)]
    if positive.size and positive.max() / positive.min() > LOG_SPAN:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel("weight x K (1 = uniform)")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))


def float_list(v: object, k: int | None) -> np.ndarray | None:
    """``v`` as floats (null: NaN) when it is a list of ``k`` numbers (any length for None), else None."""
    if not isinstance(v, list) or not v or (k is not None and len(v) != k):
        return None
    if not all(x is None or (isinstance(x, (int, float)) and not isinstance(x, bool)) for x in v):
        return None
    return np.array([math.nan if x is None else x for x in v], np.float64)


def experiment_online(results: object) -> dict[str, tuple[WeightTrack, str]]:
    """The weights over the run of each online strategy's first proxy run (first split, first seed) in an
    experiment's ``results.json``: ``{strategy: (track, rule)}``. Runs without a well-formed ``online`` record
    are left out (the report does not own that format)."""
    if not isinstance(results, dict) or not isinstance(runs := results.get("runs"), dict):
        return {}
    chosen: dict[str, dict[str, Any]] = {}
    for key, run in runs.items():
        if not isinstance(run, dict) or not isinstance(run.get("online"), dict) or "/split-" in str(key):
            continue
        name = str(run.get("strategy") or str(key).split("/")[0])
        seed = run.get("seed") if isinstance(run.get("seed"), int) else math.inf
        if name not in chosen or seed < chosen[name]["seed"]:
            chosen[name] = {"seed": seed, "online": run["online"]}
    steps = results["data"].get("steps") if isinstance(results.get("data"), dict) else None
    tracks = {}
    for name in sorted(chosen)[:MAX_EXPERIMENT_RUNS]:
        track = _experiment_track(chosen[name]["online"], steps)
        if track is not None:
            tracks[name] = (track, str(chosen[name]["online"].get("rule", "–")))
    return tracks


def _experiment_track(online: Mapping[str, Any], steps: object) -> WeightTrack | None:
    """The weights of one proxy run (uniform until its first update) against training steps."""
    updates = online.get("updates")
    if not isinstance(updates, list) or not updates or not all(isinstance(u, dict) for u in updates):
        return None
    rows = [float_list(u.get("weights"), None) for u in updates]
    k = len(rows[0]) if rows[0] is not None else 0
    at = [u.get("step") for u in updates]
    if not k or any(r is None or r.size != k or not np.isfinite(r).all() for r in rows) \
            or not all(isinstance(s, int) and not isinstance(s, bool) for s in at):
        return None
    every = online.get("every_steps") if isinstance(online.get("every_steps"), int) else 1
    last = at[-1]
    end = steps if isinstance(steps, int) and steps > last else last + max(every, 1)
    return weight_track(np.vstack([np.full(k, 1.0 / k), *rows]), [0, *at], end)


def experiment_online_charts(results: object, prefix: str) -> list[tuple[str, Draw]]:
    """A weights chart per online strategy of :func:`experiment_online`, named ``<prefix><strategy>.png``."""
    out: list[tuple[str, Draw]] = []
    taken: set[str] = set()
    for i, (name, (track, rule)) in enumerate(experiment_online(results).items()):
        slug = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in name).strip("-.") or "strategy"
        slug = f"{slug}-{i}" if slug in taken else slug
        taken.add(slug)
        out.append((f"{prefix}{slug}.png", partial(plot_online_weights, track, xlabel="training step",
                                                   title=f"Online weights ({rule}): {name}, first split and seed")))
    return out
