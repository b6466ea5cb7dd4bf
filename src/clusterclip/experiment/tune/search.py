"""The state of a search: the grid, the finished proxy runs (reused from their records or trained now), the
budget, and the assessment of a candidate against random."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusterclip.contract.tune_results import TuneResults
from clusterclip.experiment.config import ExperimentConfig
from clusterclip.experiment.stats import paired_interval
from clusterclip.experiment.tune.config import TuneConfig
from clusterclip.experiment.tune.proxies import Pair, ProxyStages
from clusterclip.experiment.tune.runners import ProxyRunner

OnEvent = Callable[[str], None]
RESULTS = "results.json"
"""The search's results in the tune directory (:class:`~clusterclip.contract.tune_results.TuneResults`)."""
METRICS = ("heldout_macro_cluster", "heldout_macro_domain", "heldout_micro")
"""The losses a candidate is compared with random on."""


@dataclass
class Search:
    """Successive halving over the grid with finished proxy runs kept as stages and a budget; see
    :func:`~clusterclip.experiment.tune.search_stage.run_tune`."""

    cfg: ExperimentConfig
    tune: TuneConfig
    runner: ProxyRunner
    tune_dir: Path
    on_event: OnEvent | None = None
    results: dict[str, Any] = field(default_factory=dict)
    used: set[tuple[str, Pair]] = field(default_factory=set)
    fresh: int = 0
    reused: int = 0
    stopped: str | None = None
    t0: float = field(default_factory=time.perf_counter)
    pool: ProcessPoolExecutor | None = None
    seconds: list[float] = field(default_factory=list)
    """The run time each run trained in this session recorded (the pace of the budget, :mod:`.pace`)."""

    def __post_init__(self) -> None:
        self.tune.check_unseen(self.cfg)
        self.specs = {s["name"]: s for s in self.tune.grid(self.cfg)}
        self.proxies = ProxyStages(self.tune_dir, self.runner.identity())
        self.cache: dict[tuple[str, Pair], dict[str, Any]] = {}
        self.concrete: Callable[[str, Pair], dict[str, Any]] = lambda name, pair: self.specs[name]
        """The spec a run trains on (a weight candidate's cluster weights differ per split)."""
        self.shared = 0
        self._plan_keys: dict[tuple[str, Pair], str | None] = {}

    # ---------------------------------------------------------------------------- what the search changes

    def begin(self, header: dict[str, Any]) -> None:
        """Start the results of this search (``tune/results.json``) from ``header``."""
        self.results = header

    def record(self, **fields: Any) -> None:
        """Set fields of the results (written by the next :meth:`write`)."""
        self.results.update(fields)

    def write(self) -> None:
        """Write the results with the progress so far (atomically, read back as
        :class:`~clusterclip.contract.tune_results.TuneResults`)."""
        self.record(progress={"trained": self.fresh, "reused": self.reused, "shared": self.shared,
                              "search_runs": len(self.used), "seconds": round(time.perf_counter() - self.t0, 1)},
                    updated_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        TuneResults.write(self.tune_dir / RESULTS, self.results)

    def shrink(self, tune: TuneConfig) -> None:
        """Search with the smaller settings ``tune`` from now on (what the budget can reach)."""
        self.tune = tune

    def stop(self, why: str) -> None:
        """Start no further run: the first reason is kept."""
        self.stopped = self.stopped or why

    def add_spec(self, spec: dict[str, Any]) -> str:
        """Make ``spec`` a candidate (once: a name already there keeps its spec); its name."""
        return self.specs.setdefault(spec["name"], spec)["name"]

    def weigh_with(self, concrete: Callable[[dict[str, Any], int], dict[str, Any]]) -> None:
        """Train a candidate with group weights on ``concrete(spec, split)`` (its cluster weights on that split);
        the others as before."""
        base = self.concrete
        self.concrete = lambda name, pair: concrete(self.specs[name], pair[0]) if "group_weights" in \
            self.specs[name] else base(name, pair)

    def submit(self, job: Callable[..., dict[str, Any]], name: str, pair: Pair) -> Future[dict[str, Any]]:
        """Train the run ``(name, pair)`` with ``job`` in a worker process (the pool starts on the first call)."""
        if self.pool is None:
            self.pool = ProcessPoolExecutor(self.tune.jobs, mp_context=multiprocessing.get_context("spawn"))
        return self.pool.submit(job, self.concrete(name, pair), *pair)

    # ---------------------------------------------------------------------------- one plan, one run

    def plan_key(self, name: str, pair: Pair) -> str | None:
        """The identity of the plan a run trains on (with its diagnostic shuffle), when the runner tells it."""
        ident = getattr(self.runner, "plan_identity", None)
        if ident is None:
            return None
        if (name, pair) not in self._plan_keys:
            spec = self.concrete(name, pair)
            plan = ident(spec, *pair)
            self._plan_keys[(name, pair)] = None if plan is None else f"{plan}/shuffle={bool(spec.get('shuffle'))}"
        return self._plan_keys[(name, pair)]

    def share(self, name: str, pair: Pair) -> bool:
        """Take the metrics of a finished run of another candidate whose plan on this pair is the same
        (``plan.json``'s identity): one plan is trained once. Shared runs cost nothing and count nowhere."""
        others = [n for (n, p) in self.cache if p == pair and n != name]
        key = self.plan_key(name, pair) if others else None
        twin = next((n for n in others if key is not None and self.plan_key(n, pair) == key), None)
        if twin is None:
            return False
        self.shared += 1
        self.cache[(name, pair)] = self.cache[(twin, pair)]
        self._event(f"{name} split {pair[0]} seed {pair[1]}: same plan as {twin}, its run is shared")
        return True

    # ---------------------------------------------------------------------------- proxy runs

    def over_budget(self, counted: bool, pending: int = 0) -> str | None:
        """Why no further (``counted``) run may start, with ``pending`` runs in flight; None while it may."""
        if not counted:
            return None
        if self.tune.max_runs is not None and len(self.used) + pending >= self.tune.max_runs:
            return f"max-runs {self.tune.max_runs} reached"
        if self.tune.max_minutes is not None and time.perf_counter() - self.t0 > 60 * self.tune.max_minutes:
            return f"max-minutes {self.tune.max_minutes:g} reached"
        return None

    def get(self, name: str, pair: Pair, counted: bool = True) -> dict[str, Any] | None:
        """The run's metrics: from its record when finished before, else trained now (None once the budget is
        spent). Only ``counted`` runs (the search's) count towards and stop at the budget."""
        if (name, pair) in self.cache:
            return self.cache[(name, pair)]
        if self.reuse(name, pair, counted) or self.share(name, pair):
            return self.cache[(name, pair)]
        why = self.over_budget(counted)
        if why:
            self.stop(why)
            return None
        return self.finished(name, pair, lambda: self.runner(self.concrete(name, pair), *pair), counted)

    def reuse(self, name: str, pair: Pair, counted: bool) -> bool:
        """Take a run finished before (by an earlier session) from its record, if it has a fresh one."""
        metrics = self.proxies.finished(self.concrete(name, pair), pair)
        if metrics is None:
            return False
        self.reused += 1
        self._keep(name, pair, metrics, counted)
        return True

    def finished(self, name: str, pair: Pair, train: Callable[[], dict[str, Any]], counted: bool) -> dict[str, Any]:
        """Train a run (``train`` returns its metrics) and write its record (atomically: a kill never leaves
        half a record)."""
        metrics = self.proxies.train(self.concrete(name, pair), pair, train)
        self.fresh += 1
        if metrics.get("seconds"):
            self.seconds.append(float(metrics["seconds"]))
        return self._keep(name, pair, metrics, counted)

    def _keep(self, name: str, pair: Pair, metrics: dict[str, Any], counted: bool) -> dict[str, Any]:
        if counted:
            self.used.add((name, pair))
        self.cache[(name, pair)] = metrics
        self._event(f"{name} split {pair[0]} seed {pair[1]}: macro {metrics['heldout_macro_cluster']:.4f} "
                    f"micro {metrics['heldout_micro']:.4f}")
        return metrics

    def close(self) -> None:
        """Stop the workers: runs not started are cancelled; a run in flight is lost and retrained on a restart."""
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None

    def _event(self, text: str) -> None:
        if self.on_event is not None:
            self.on_event(f"tune: {text} ({self.fresh} trained, {self.reused} reused, "
                          f"{time.perf_counter() - self.t0:.0f}s)")

    # ---------------------------------------------------------------------------- judging

    def objective(self) -> str:
        """Macro held-out loss over the ground-truth field when the runs have one, else over clusters."""
        first = next(iter(self.cache.values()), {})
        return "heldout_macro_domain" if first.get("heldout_macro_domain") is not None else "heldout_macro_cluster"

    def assess(self, name: str, pairs: Sequence[Pair]) -> dict[str, Any] | None:
        """Paired differences to random over ``pairs`` (bootstrap intervals), or None if a run is missing."""
        mine = [self.cache.get((name, p)) for p in pairs]
        base = [self.cache.get(("random", p)) for p in pairs]
        if not pairs or any(r is None for r in (*mine, *base)):
            return None
        out: dict[str, Any] = {"pairs": len(pairs)}
        for m in METRICS:
            if all(r.get(m) is not None for r in (*mine, *base)):  # type: ignore[union-attr]
                vals = [a[m] for a in mine]  # type: ignore[index]
                out[m] = {"value": round(sum(vals) / len(vals), 5),
                          "minus_random": paired_interval([a[m] - b[m] for a, b in zip(mine, base, strict=True)])}
        out["objective"] = out[self.objective()]["minus_random"]
        out["micro"] = out["heldout_micro"]["minus_random"]
        out["feasible"] = out["micro"]["mean"] <= self.tune.max_micro_regression
        return out
