"""The charts' common ground, below the report and the experiment that both draw: the style, the colours, a
figure on its own Agg canvas (never through ``pyplot``, so nothing leaks into a long-lived process and the
caller's backend is left alone) and :class:`Chart`, what a written PNG drew (its title and axis labels, for
tests and the HTML page).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from clusterclip.store import atomic_path

STYLE: dict[str, object] = {
    "font.size": 10,
    "axes.titlesize": 12,
    "axes.titleweight": "bold",
    "axes.labelsize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linestyle": "-",
    "legend.fontsize": 8,
    "legend.frameon": False,
    "savefig.dpi": 110,
    "savefig.bbox": "tight",
    "figure.facecolor": "white",
    "text.parse_math": False,
}
"""Chart style. ``text.parse_math`` is off: labels hold user data (group values, plan and run names), and a
``$`` in them must print as a dollar sign, not start a mathtext formula (which can fail to parse)."""
CATEGORICAL = [
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#8cd17d",
    "#499894",
    "#d37295",
    "#a0cbe8",
    "#ffbe7d",
    "#86bcb6",
]
OTHER_COLOUR = "#b9b9b9"
SMALL_COLOUR = "#e3e3e3"


@dataclass
class Chart:
    """A chart written to ``path``: its title and the labels of its axes (x, y) for each axes drawn."""

    path: Path
    title: str
    labels: list[tuple[str, str]] = field(default_factory=list)
    caption: str = ""


def new_figure(width: float = 8.0, height: float = 4.2) -> Figure:
    """A figure on its own Agg canvas (never registered with pyplot)."""
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def save_chart(fig: Figure, path: str | os.PathLike[str], title: str, caption: str = "") -> Chart:
    """Write ``fig`` as a PNG to ``path`` atomically, clear it, and return what it drew."""
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    labels = [(ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes if ax.get_xlabel() or ax.get_ylabel()]
    fig.clear()
    return Chart(path=path, title=title, labels=labels, caption=caption)


def cluster_colour(rank: int) -> str:
    """The colour of the cluster with this size rank (0 = largest), shared by all mixture charts."""
    return CATEGORICAL[rank % len(CATEGORICAL)]
