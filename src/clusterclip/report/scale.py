"""How the page adapts to the size of a run: the windows its mixture charts use, the one y scale of the repetition
charts, and the paths it shows.

The planner records a mixture row per window of ``plan.json``'s ``window`` draws (a hundredth of the plan by
default: 3 draws on 300 documents, where the shares jump from one window to the next). The charts merge
consecutive rows into windows of at least :data:`MIN_WINDOW_DRAWS` draws, fewer only to keep
:data:`MIN_WINDOWS` points on a short plan, and never draw more than :data:`MAX_WINDOWS` points.
"""

from __future__ import annotations

import dataclasses
import html
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from clusterclip.report.load import PlanView

MIN_WINDOW_DRAWS = 50
MIN_WINDOWS = 10
MAX_WINDOWS = 200


def merge_factor(window: int, rows: int) -> int:
    """How many consecutive mixture rows of ``window`` draws each chart point merges."""
    window, rows = max(int(window), 1), max(int(rows), 1)
    draws = window * rows
    wanted = min(MIN_WINDOW_DRAWS, math.ceil(draws / MIN_WINDOWS))
    return max(1, math.ceil(wanted / window), math.ceil(rows / MAX_WINDOWS))


def merge_rows(mixture: np.ndarray, factor: int) -> np.ndarray:
    """Sum each run of ``factor`` consecutive rows (the last run may be shorter)."""
    m = np.asarray(mixture)
    if factor <= 1 or not len(m):
        return m
    starts = np.arange(0, len(m), factor)
    return np.add.reduceat(m, starts, axis=0)


def charted(plan: PlanView) -> PlanView:
    """The plan with its mixture merged into the windows its charts use (``window`` becomes theirs)."""
    if plan.mixture is None or not plan.window:
        return plan
    factor = merge_factor(plan.window, len(plan.mixture))
    if factor == 1:
        return plan
    return dataclasses.replace(plan, mixture=merge_rows(plan.mixture, factor), window=plan.window * factor)


@dataclass(frozen=True)
class RepeatScale:
    """The y axis every repetition chart shares: its top, and log or linear."""

    top: float
    log: bool
    bottom: float = 0.0


def repeat_scale(hists: Sequence[np.ndarray]) -> RepeatScale | None:
    """One y scale for all repetition histograms: log when the counts of any plan span more than a factor 50."""
    counts = [np.asarray(h, dtype=np.int64) for h in hists]
    positive = [h[h > 0] for h in counts if (h > 0).any()]
    if not positive:
        return None
    high = max(int(p.max()) for p in positive)
    if any(p.max() / p.min() > 50 for p in positive):
        return RepeatScale(top=high * 2.0, log=True, bottom=min(int(p.min()) for p in positive) * 0.6)
    return RepeatScale(top=high * 1.08, log=False)


def shown_path(path: str | os.PathLike[str], cwd: Path | None = None) -> str:
    """A path as the page shows it: relative to the current directory when inside it, else only its name (the
    page is shared, so it never shows where a local path lives)."""
    p = Path(path)
    if not p.is_absolute() and ".." not in p.parts:
        return p.as_posix()
    here = (cwd or Path.cwd()).resolve()
    full = p.resolve() if p.is_absolute() else (here / p).resolve()
    try:
        return full.relative_to(here).as_posix() or "."
    except ValueError:
        return full.name or "."


def hide_paths(text: str, root: Path) -> str:
    """``text`` with the run directory's absolute path (as given and resolved) written as :func:`shown_path` shows
    it, so notes and commands name the run as the reader's shell does."""
    shown = shown_path(root)
    for full in dict.fromkeys([str(root.resolve()), str(root.absolute()), str(root)]):
        if Path(full).is_absolute():
            for form in dict.fromkeys([full, html.escape(full, quote=True)]):
                text = text.replace(form, shown)
    return text
