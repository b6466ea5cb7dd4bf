"""A budget that fits before it starts: from one measured proxy run, the runs and minutes the search's settings
need, whether ``--max-minutes`` (and ``--max-runs``) let it reach a verdict, and, when they do not, the smaller
search that can.

A verdict needs the last comparison (the grid's last rung, the weight search's finals) on every search pair, at
least :data:`~clusterclip.experiment.stats.MIN_PAIRS`. The search is counted phase by phase as it runs (a rung,
a round, the finals: ``--jobs`` runs at a time within a phase), with the split preparations measured in this
session. When it does not fit, it is shrunk rather than left to spend the budget on candidates measured on one
pair: the weight search measures its candidates on at least two pairs and drops rounds, then candidates per round;
then the grid keeps fewer candidates per rung (a larger ``eta``). A search that cannot reach a verdict even then
says so at once, with the ``--max-minutes`` that would, and runs as far as the budget goes (its runs are reused by a
later search with more time). While the search runs, :mod:`.pace` cuts it again whenever the runs get slower.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any

from clusterclip.experiment.config import ExperimentConfig
from clusterclip.experiment.stats import MIN_PAIRS
from clusterclip.experiment.tune.config import TuneConfig
from clusterclip.experiment.tune.halving import rung_sizes, search_pairs
from clusterclip.experiment.tune.pace import halving_phases
from clusterclip.experiment.tune.pool import prefetch
from clusterclip.experiment.tune.search import Search

SHRUNK = ("weight_rounds", "weight_runs", "weight_pairs", "eta")
"""The settings a shrink may change."""
SLACK = 0.8
"""A search fits when its estimate takes at most this share of the time left: on a shared machine the runs after
the first are often slower (measured on 2 cores at load 8-11: a first run of 319 s, later ones of 480-700 s)."""


@dataclass(frozen=True)
class Schedule:
    """The new runs of every phase of a search (a grid rung, a weight round, the finals), random's included."""

    phases: tuple[int, ...]

    @property
    def runs(self) -> int:
        return sum(self.phases)

    def seconds(self, per_run: float, jobs: int) -> float:
        """Wall time at ``per_run`` seconds a run, ``jobs`` runs at a time within a phase."""
        return per_run * sum(math.ceil(p / jobs) for p in self.phases)


def schedule(cfg: ExperimentConfig, tune: TuneConfig, grid: int) -> Schedule:
    """The runs of a complete search with ``grid`` grid candidates (besides random): every rung of the halving,
    every weight round and the weight finals (no run reused or shared)."""
    n_pairs = len(search_pairs(cfg))
    phases: list[int] = []
    random_pairs = 0
    if "grid" in tune.search and grid:
        phases += halving_phases(grid, rung_sizes(n_pairs, tune.eta), 0, tune.eta)
        random_pairs = n_pairs
    if "weights" in tune.search:
        p = min(tune.weight_pairs, n_pairs)
        for r in range(tune.weight_rounds):
            phases.append(tune.weight_runs * p + (max(0, p - random_pairs) if r == 0 else 0))
        random_pairs = max(random_pairs, p)
        finalists = max(1, math.ceil(tune.weight_rounds * tune.weight_runs / tune.eta))
        phases.append(finalists * (n_pairs - p) + (n_pairs - random_pairs))
    return Schedule(tuple(phases))


def smaller(cfg: ExperimentConfig, tune: TuneConfig, grid: int) -> list[TuneConfig]:
    """Smaller searches, best first: the weight search on at least two pairs a candidate with fewer rounds, then
    fewer candidates a round (then one pair a candidate); then the grid with fewer candidates a rung (the larger
    ``eta`` values that need fewer runs, largest first)."""
    n_pairs = len(search_pairs(cfg))
    out: list[TuneConfig] = []
    weights = [tune]
    if "weights" in tune.search:
        pairs = [max(tune.weight_pairs, min(2, n_pairs)), *([1] if tune.weight_pairs == 1 else [])]
        weights = [replace(tune, weight_rounds=r, weight_runs=n, weight_pairs=p) for p in pairs
                   for r in range(tune.weight_rounds, 0, -1) for n in range(tune.weight_runs, 1, -1)]
        out += weights
    if "grid" in tune.search:
        base = weights[-1] if "weights" in tune.search else tune
        etas = [replace(base, eta=e) for e in range(tune.eta + 1, max(n_pairs, tune.eta + 1) + 1)]
        by_runs: dict[int, TuneConfig] = {}
        for t in etas:  # the smallest eta of each size
            by_runs.setdefault(schedule(cfg, t, grid).runs, t)
        out += [by_runs[n] for n in sorted(by_runs, reverse=True) if n < schedule(cfg, base, grid).runs]
    return [t for t in out if t != tune]


def plan_budget(s: Search) -> dict[str, Any]:
    """Train the first run (random on the first pair), estimate the search from it, and shrink ``s.tune`` when the
    budget cannot reach a verdict as asked; the record of ``results["budget"]`` (its ``message`` says it)."""
    pairs = search_pairs(s.cfg)
    wall = time.perf_counter()
    prefetch(s, [("random", pairs[0])])
    first = s.get("random", pairs[0])
    if first is None:
        return {"message": "budget: the first run did not start (the budget was spent)"}
    took = time.perf_counter() - wall
    per_run = float(first.get("seconds") or took)
    grid = len(s.specs) - 1 if "grid" in s.tune.search else 0
    splits = len({p[0] for p in pairs} | (set(s.tune.check_split_seeds) if "weights" in s.tune.search else set()))
    prepare = max(0.0, took - per_run) if first.get("seconds") else 0.0
    left = _left(s, prepare * (splits - 1))
    asked = schedule(s.cfg, s.tune, grid)
    rec: dict[str, Any] = {"seconds_per_run": round(per_run, 1), "jobs": s.tune.jobs, "pairs": len(pairs),
                           "prepare_seconds": round(prepare, 1), "asked": _cost(asked, per_run, s.tune),
                           "seconds_left": None if left[0] is None else round(left[0], 1), "shrunk_to": None}
    if len(pairs) < MIN_PAIRS:
        rec.update(verdict="impossible", message=f"budget: {len(pairs)} search pair(s), fewer than the {MIN_PAIRS} a "
                   "verdict needs: no budget reaches one (train more --seeds or --split-seeds)")
        return rec
    fits = lambda t: _fits(schedule(s.cfg, t, grid), per_run, t.jobs, left)  # noqa: E731
    head = f"budget: a proxy run takes {per_run:.0f} s (measured); the search needs {_said(asked, per_run, s.tune)}"
    if fits(s.tune):
        within = f"within {_limits(s, left)}" if left != (None, None) else "(no --max-minutes or --max-runs limit)"
        rec.update(verdict="fits", message=f"{head} {within}: it can reach a verdict on {len(pairs)} pairs")
        return rec
    option = next((t for t in smaller(s.cfg, s.tune, grid) if fits(t)), None)
    if option is None:
        least = (smaller(s.cfg, s.tune, grid) or [s.tune])[-1]
        need = schedule(s.cfg, least, grid).seconds(per_run, s.tune.jobs) / 60 / SLACK + _spent(s) / 60
        rec.update(verdict="cannot", message=f"{head}, beyond {_limits(s, left)}: it cannot reach a verdict, nor can "
                   f"the smallest search ({_flags(least)}: {_said(schedule(s.cfg, least, grid), per_run, least)}); "
                   f"it runs as far as the budget goes and will choose random: raise --max-minutes to about "
                   f"{math.ceil(need)}")
        return rec
    rec.update(verdict="shrunk", shrunk_to={k: getattr(option, k) for k in SHRUNK if getattr(option, k) !=
                                            getattr(s.tune, k)},
               message=f"{head}, beyond {_limits(s, left)}, so it could not reach a verdict; shrunk to "
                       f"{_flags(option, s.tune)} ({_said(schedule(s.cfg, option, grid), per_run, option)}), which can")
    s.shrink(option)
    return rec


def _left(s: Search, prepare: float) -> tuple[float | None, int | None]:
    """Seconds and runs the budget leaves after this point (None: no limit), less the splits still to prepare."""
    seconds = None if s.tune.max_minutes is None else 60 * s.tune.max_minutes - _spent(s) - prepare
    runs = None if s.tune.max_runs is None else s.tune.max_runs - len(s.used)
    return seconds, runs


def _spent(s: Search) -> float:
    return time.perf_counter() - s.t0


def _fits(sched: Schedule, per_run: float, jobs: int, left: tuple[float | None, int | None]) -> bool:
    seconds, runs = left
    return (seconds is None or sched.seconds(per_run, jobs) - per_run <= SLACK * seconds) and \
        (runs is None or sched.runs - 1 <= runs)  # the first run (random, first pair) is done


def _cost(sched: Schedule, per_run: float, tune: TuneConfig) -> dict[str, Any]:
    return {"runs": sched.runs, "minutes": round(sched.seconds(per_run, tune.jobs) / 60, 1)}


def _said(sched: Schedule, per_run: float, tune: TuneConfig) -> str:
    return f"about {sched.runs} runs, {sched.seconds(per_run, tune.jobs) / 60:.0f} minutes with --jobs {tune.jobs}"


def _limits(s: Search, left: tuple[float | None, int | None]) -> str:
    parts = []
    if left[0] is not None:
        parts.append(f"{SLACK:.0%} of the {max(left[0], 0) / 60:.0f} minutes left of --max-minutes "
                     f"{s.tune.max_minutes:g}")
    if left[1] is not None:
        parts.append(f"the {left[1]} runs left of --max-runs {s.tune.max_runs}")
    return " and ".join(parts)


def _flags(t: TuneConfig, asked: TuneConfig | None = None) -> str:
    keys = [k for k in SHRUNK if asked is None or getattr(t, k) != getattr(asked, k)]
    if asked is None:
        keys = [k for k in keys if k != "eta" or "grid" in t.search]
        keys = [k for k in keys if not k.startswith("weight_") or "weights" in t.search]
    return " ".join(f"--{k.replace('_', '-')} {getattr(t, k)}" for k in keys)
