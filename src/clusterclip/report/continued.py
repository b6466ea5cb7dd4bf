"""A continued plan across its switch: the parent's mixture up to the switch, then the continuation's.

A continuation (``clusterclip plan --continue PARENT --consumed N``) is trained after ``PARENT[:N]``, so
its mixture chart shows what training actually sees: the parent's windows that end by ``N``, then the
continuation's windows from ``N`` on, with a marker at the switch. Built from the recorded mixtures only
(no plan is read back); the parent window that straddles ``N`` is left out, so the chart may show a gap
of less than one parent window before the marker.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from clusterclip.report.load import PlanView


@dataclass(frozen=True)
class Switch:
    """The combined stream: ``mixture`` rows start at ``positions`` (training positions); the switch
    from ``parent`` happens at ``at``; ``exhausted_at`` holds both plans' exhaustion positions."""

    parent: str
    at: int
    mixture: np.ndarray
    positions: np.ndarray
    exhausted_at: np.ndarray


def across_switch(plan: PlanView, plans: Sequence[PlanView]) -> Switch | None:
    """The stream across the switch of a continuation whose parent (the same bytes) is in the run, else None."""
    cont = plan.record.continues
    if cont is None or plan.mixture is None or not plan.window:
        return None
    parent = next((p for p in plans if p.name == cont.get("name")), None)
    if parent is None or parent.mixture is None or not parent.window:
        return None
    if parent.record.order_identity() != cont.get("identity"):
        return None
    at = int(cont.get("consumed", 0))
    rows = min(at // parent.window, len(parent.mixture))
    mixture = np.concatenate([np.asarray(parent.mixture)[:rows], np.asarray(plan.mixture)])
    positions = np.concatenate([np.arange(rows, dtype=np.int64) * parent.window,
                                at + np.arange(len(plan.mixture), dtype=np.int64) * plan.window])
    ex = [np.zeros(0, np.int64)]
    if parent.exhausted_at is not None:
        before = np.asarray(parent.exhausted_at)
        ex.append(before[(before >= 0) & (before < at)])
    if plan.exhausted_at is not None:
        after = np.asarray(plan.exhausted_at)
        ex.append(after[after >= 0] + at)
    return Switch(parent.name, at, mixture, positions, np.concatenate(ex))
