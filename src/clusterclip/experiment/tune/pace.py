"""The budget while the search runs: before every later phase (a grid rung, a weight round, the weight finals) the
rest of the search is estimated again at the pace of the runs trained so far, and cut to what still reaches a
verdict (fewer candidates kept, no further round, fewer finalists) when the runs got slower than the first one.

With neither ``--max-minutes`` nor ``--max-runs`` nothing is cut. The cuts only ever keep at least one candidate for
the last comparison, on every pair.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from clusterclip.experiment.tune.search import Search


def pace(s: Search) -> float:
    """Seconds a run takes: the mean of the runs trained in this session, else of every finished one (0: unknown)."""
    seconds = s.seconds or [float(m.get("seconds") or 0.0) for m in s.cache.values()]
    return sum(seconds) / len(seconds) if seconds else 0.0


def fits(s: Search, phases: Sequence[int]) -> bool:
    """Whether ``phases`` more runs (``--jobs`` at a time within each) fit the time and the runs left."""
    if s.tune.max_runs is not None and sum(phases) > s.tune.max_runs - len(s.used):
        return False
    if s.tune.max_minutes is None:
        return True
    wall = pace(s) * sum(math.ceil(p / s.tune.jobs) for p in phases)
    return wall <= 60 * s.tune.max_minutes - (time.perf_counter() - s.t0)


def halving_phases(alive: int, sizes: Sequence[int], done: int, eta: int, random: bool = True) -> list[int]:
    """The new runs of the rungs ``sizes`` (pairs per rung) with ``alive`` candidates after ``done`` pairs (random
    too, when ``random``)."""
    phases = []
    for size in sizes:
        phases.append((alive + random) * (size - done))
        alive, done = max(1, math.ceil(alive / eta)), size
    return phases


def keep_that_fits(s: Search, keep: int, sizes: Sequence[int], done: int) -> int:
    """How many candidates the next rung may keep (at most ``keep``, at least 1) for the rest of the halving to fit."""
    while keep > 1 and not fits(s, halving_phases(keep, sizes, done, s.tune.eta)):
        keep -= 1
    return keep


def finalists_that_fit(s: Search, top: int, new_pairs: int, random_pairs: int) -> int:
    """How many finalists (at most ``top``, at least 1) fit on ``new_pairs`` more pairs each, with random's
    ``random_pairs``."""
    while top > 1 and not fits(s, [top * new_pairs + random_pairs]):
        top -= 1
    return top
