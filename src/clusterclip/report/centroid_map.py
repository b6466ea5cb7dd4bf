"""The centroid map of the report: the cluster centroids projected on their first two principal components."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
from matplotlib import rc_context

from clusterclip.charts.style import CATEGORICAL, OTHER_COLOUR, SMALL_COLOUR, STYLE, Chart, new_figure, save_chart

MAX_GROUPS = 12
"""Groups the map colours and names in its legend (those leading the most documents); the others share one grey."""


def centroid_projection(centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """2-D PCA of the centroids via SVD: (coordinates [K, 2], explained variance ratio of the 2 axes)."""
    c = np.asarray(centroids, dtype=np.float64)
    k = c.shape[0]
    if k == 0:
        return np.zeros((0, 2)), np.zeros(2)
    centred = c - c.mean(axis=0)
    u, s, _ = np.linalg.svd(centred, full_matrices=False)
    coords = np.zeros((k, 2))
    n = min(2, s.size)
    coords[:, :n] = u[:, :n] * s[:n]
    var = s**2
    ratio = np.zeros(2)
    if var.sum() > 0:
        ratio[:n] = var[:n] / var.sum()
    return coords, ratio


def _legend_groups(groups: Sequence[str | None], sizes: np.ndarray) -> list[str]:
    """The :data:`MAX_GROUPS` groups whose clusters hold the most documents, by name."""
    led: dict[str, float] = {}
    for g, size in zip(groups, sizes, strict=True):
        if g is not None:
            led[g] = led.get(g, 0.0) + float(size)
    return sorted(sorted(led, key=lambda g: (-led[g], g))[:MAX_GROUPS])


def plot_centroid_map(
    centroids: np.ndarray,
    sizes: np.ndarray,
    path: str | os.PathLike[str],
    groups: Sequence[str | None] | None = None,
    annotate: int = 10,
) -> Chart:
    """Centroids projected on their first two principal components; area ∝ cluster size.

    With ``groups`` (the majority ground-truth group of each cluster) points are coloured by group, so
    one can see whether the embedding separates the known domains.
    """
    sizes = np.asarray(sizes, dtype=np.float64)
    coords, ratio = centroid_projection(centroids)
    title = "Map of the cluster centroids (PCA)"
    with rc_context(STYLE):
        fig = new_figure(8.0, 6.0)
        ax = fig.add_subplot()
        area = 12 + 600 * sizes / max(sizes.max(initial=0.0), 1.0)
        if groups is not None:
            names = _legend_groups(groups, sizes)
            colour_of = {g: CATEGORICAL[i % len(CATEGORICAL)] for i, g in enumerate(names)}
            keys = [g if g is None or g in colour_of else "" for g in groups]
            others = len({g for g, key in zip(groups, keys, strict=True) if key == ""})
            labels = {**{g: g for g in names}, "": f"{others} other groups", None: "no group"}
            for g in [*names, "", None]:
                sel = np.array([x == g for x in keys], dtype=bool)
                if sel.any():
                    ax.scatter(
                        coords[sel, 0],
                        coords[sel, 1],
                        s=area[sel],
                        alpha=0.7,
                        edgecolors="white",
                        linewidths=0.6,
                        color=colour_of.get(g, OTHER_COLOUR if g == "" else SMALL_COLOUR),
                        label=labels[g],
                    )
            legend = ax.legend(title="majority group", loc="center left", bbox_to_anchor=(1.01, 0.5))
            for handle in legend.legend_handles:
                handle.set_sizes([50])
        else:
            ax.scatter(
                coords[:, 0], coords[:, 1], s=area, alpha=0.7, edgecolors="white", linewidths=0.6, color=CATEGORICAL[0]
            )
        for c in np.argsort(-sizes, kind="stable")[:annotate]:
            ax.annotate(str(int(c)), coords[c], fontsize=8, ha="center", va="center")
        ax.set_xlabel(f"PC 1 ({ratio[0]:.0%} of centroid variance)")
        ax.set_ylabel(f"PC 2 ({ratio[1]:.0%} of centroid variance)")
        ax.set_title(title)
        return save_chart(fig, path, title, caption="labels: ids of the largest clusters")
