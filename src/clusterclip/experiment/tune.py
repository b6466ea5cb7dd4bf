"""``clusterclip tune``: choose a plan for a corpus by proxy training runs, on evidence that holds across splits.

The candidates are random, uniform, temperature (a tau grid) and ClusterClip (a cap grid x order
equal-rate / spread). Each proxy run is one small model trained on one (held-out split, seed) pair by the
experiment's own steps (:func:`~clusterclip.experiment.run.prepare_split`,
:func:`~clusterclip.experiment.run.proxy_run`). Successive halving gives every candidate a few pairs, keeps
the best ``1/eta`` and gives the survivors more pairs, until the pairs or the budget run out. A candidate
is judged by its paired difference to random (bootstrap interval); it may win only if it is better on
the objective (macro held-out loss over the ground-truth field, else over clusters) with an interval
below zero, and its micro loss is no worse than random's by more than ``max_micro_regression``.
Otherwise random is the chosen plan, and the results say so.

Layout::

    RUN/                     the whole corpus: corpus, embeddings, clusters and the chosen plan
    RUN/tune/splits/<seed>/  a run directory per held-out split (its training documents)
    RUN/tune/runs/<hash>.json  one finished proxy run, keyed by a hash of its full configuration
    RUN/tune/results.json    candidates, intervals, trajectory, winner (rewritten after every run)
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from clusterclip.experiment.config import ExperimentConfig, _ints, _strs
from clusterclip.experiment.stats import format_interval, paired_interval
from clusterclip.settings import Settings, SettingsError, at_least, each, finite, one_of, optional, setting
from clusterclip.store import config_hash, load_json, save_json
from clusterclip.store import layout as A

log = logging.getLogger(__name__)

TUNE_VERSION = 1
ORDERS = ("equal-rate", "spread")
KEPT = ("heldout_macro_cluster", "heldout_macro_domain", "heldout_micro", "small_heldout", "small_train",
        "small_gap", "effective_clusters", "seconds")
"""What a proxy run's cache file keeps of the experiment's run record."""
Pair = tuple[int, int]


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in _strs(text))


@dataclass(frozen=True)
class TuneConfig(Settings):
    """The search: the grid, the constraint, the halving schedule and the budget."""

    taus: tuple[float, ...] = setting((0.3, 0.5, 0.7), check=each(finite(), nonempty=False), parse=_floats,
                                      help="temperature grid, comma-separated (cluster weight n_c**tau)")
    caps: tuple[int, ...] = setting((), check=each(at_least(1), nonempty=False), parse=_ints,
                                    help="ClusterClip max-repeat grid, comma-separated; empty: 1.5, 2 and 3 x passes")
    orders: tuple[str, ...] = setting(ORDERS, check=each(one_of(ORDERS), nonempty=False), parse=_strs,
                                      help="ClusterClip orders to try, comma-separated")
    max_micro_regression: float = setting(
        0.02, check=at_least(0, integer=False),
        help="a candidate may not raise the micro held-out loss above random's by more than this (nats/token): "
             "macro gains bought with the natural distribution's loss are refused")
    eta: int = setting(3, check=at_least(2), help="successive halving keeps the best 1/eta and gives them eta x pairs")
    max_runs: int | None = setting(None, check=optional(at_least(1)), parse=lambda t: int(t) or None,
                                   cli_none="0 for no limit",
                                   help="stop after this many proxy runs (finished ones reused count too); 0: no limit")
    max_minutes: float | None = setting(90.0, check=optional(at_least(0, integer=False)),
                                        parse=lambda t: float(t) or None,
                                        help="stop starting search runs after this many minutes (the decision "
                                             "uses the last complete rung); 0: no limit")
    check_split_seeds: tuple[int, ...] = setting(
        (), check=each(at_least(0), nonempty=False), parse=_ints,
        help="split seeds never seen by the search: every candidate is rerun there and the choice compared "
             "with the best fixed candidate, comma-separated")
    plan_seed: int = setting(0, check=at_least(0), help="seed of the chosen plan for the whole corpus")
    jobs: int = setting(1, check=at_least(1),
                        help="proxy runs trained at once, each in its own process with --threads torch threads "
                             "(on a GPU they share it); the choice does not depend on it")

    def grid(self, cfg: ExperimentConfig) -> list[dict[str, Any]]:
        """Every candidate's plan options (``random`` first), named as the experiment names strategies."""
        caps = self.caps or tuple(sorted({max(math.floor(cfg.passes * f), math.floor(cfg.passes) + 1)
                                          for f in (1.5, 2, 3)}))
        low = [c for c in caps if c <= cfg.passes]
        if low:
            raise SettingsError("caps", f"{low} must exceed {{passes}} {cfg.passes:g}", type(self))
        specs: list[dict[str, Any]] = [{"name": "random", "strategy": "random"},
                                       {"name": "uniform", "strategy": "uniform"}]
        specs += [{"name": f"temperature-{t:g}", "strategy": "temperature", "tau": float(t)} for t in self.taus]
        for order in self.orders:
            suffix = "-spread" if order == "spread" else ""
            specs += [{"name": f"clusterclip{suffix}-R{c}", "strategy": "clusterclip", "max_repeat": int(c),
                       "order": order, "shuffle": False} for c in caps]
        return specs


class ProxyRunner(Protocol):
    """Trains and scores one candidate on one (split, seed) pair.

    With ``jobs`` > 1 the runner is sent to worker processes, so it must pickle; a runner with a
    ``portable(split)`` method sends what that returns instead (a smaller callable for one split).
    """

    def identity(self) -> dict[str, Any]:
        """Everything a run's numbers depend on besides (candidate, split, seed): the cache key's base."""
        ...

    def __call__(self, spec: dict[str, Any], split: int, seed: int) -> dict[str, Any]:
        """The run's metrics (at least ``KEPT``'s losses)."""
        ...


class TrainingRunner:
    """Real proxy runs: every split is prepared once, on first use, under ``tune_dir/splits/<seed>/``."""

    def __init__(self, inputs: Sequence[str | os.PathLike[str]], tune_dir: Path, cfg: ExperimentConfig,
                 progress: bool = False) -> None:
        self.inputs, self.tune_dir, self.cfg, self.progress = list(inputs), tune_dir, cfg, progress
        self._splits: dict[int, Any] = {}

    def identity(self) -> dict[str, Any]:
        return {"experiment": self.cfg.results_hash(), "inputs": _fingerprint(self.inputs)}

    def portable(self, split: int) -> SplitRunner:
        """A picklable runner for one split, prepared here (once) so that workers never write to it."""
        from clusterclip.experiment.run import prepare_split, use_torch

        if split not in self._splits:
            use_torch(self.cfg)
            cfg = replace(self.cfg, split_seeds=(split,))
            data, _ = prepare_split(self.inputs, self.tune_dir, cfg, split, self.progress,
                                    root=self.tune_dir / "splits" / str(split))
            self._splits[split] = SplitRunner(data, self.cfg)
        return self._splits[split]

    def __call__(self, spec: dict[str, Any], split: int, seed: int) -> dict[str, Any]:
        return self.portable(split)(spec, split, seed)


@dataclass
class SplitRunner:
    """Proxy runs on one prepared split: what a worker process receives."""

    data: Any
    cfg: ExperimentConfig

    def __call__(self, spec: dict[str, Any], split: int, seed: int) -> dict[str, Any]:
        from clusterclip.experiment.run import proxy_run, use_torch

        use_torch(self.cfg)
        rec = proxy_run(self.data, spec, seed, self.cfg.device)
        return {k: rec.get(k) for k in KEPT}


def _fingerprint(inputs: Sequence[str | os.PathLike[str]]) -> list[Any]:
    """Each input's path, size and modification time (a changed corpus invalidates cached runs)."""
    out: list[Any] = []
    for p in inputs:
        path = Path(p)
        st = path.stat() if path.exists() else None
        out.append([str(path.resolve()), st.st_size if st else None, st.st_mtime_ns if st else None])
    return out


OnEvent = Callable[[str], None]


@dataclass
class Search:
    """Successive halving over the grid with cached proxy runs and a budget; see :func:`run_tune`."""

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

    def __post_init__(self) -> None:
        self.specs = {s["name"]: s for s in self.tune.grid(self.cfg)}
        self.base = self.runner.identity()
        self.cache: dict[tuple[str, Pair], dict[str, Any]] = {}

    # ---------------------------------------------------------------------------- proxy runs

    def run_key(self, name: str, pair: Pair) -> str:
        """Hash of the run's full configuration: experiment, inputs, candidate, split and seed."""
        spec = {k: v for k, v in self.specs[name].items() if k != "name"}
        return config_hash({**self.base, "spec": spec, "split": pair[0], "seed": pair[1]})

    def _over_budget(self, counted: bool, pending: int = 0) -> str | None:
        if not counted:
            return None
        if self.tune.max_runs is not None and len(self.used) + pending >= self.tune.max_runs:
            return f"max-runs {self.tune.max_runs} reached"
        if self.tune.max_minutes is not None and time.perf_counter() - self.t0 > 60 * self.tune.max_minutes:
            return f"max-minutes {self.tune.max_minutes:g} reached"
        return None

    def get(self, name: str, pair: Pair, counted: bool = True) -> dict[str, Any] | None:
        """The run's metrics: from ``runs/<hash>.json`` when finished before, else trained now (None once
        the budget is spent). Only ``counted`` runs (the search's) count towards and stop at the budget."""
        if (name, pair) in self.cache:
            return self.cache[(name, pair)]
        if self._reuse(name, pair, counted):
            return self.cache[(name, pair)]
        why = self._over_budget(counted)
        if why:
            self.stopped = self.stopped or why
            return None
        return self._finished(name, pair, self.runner(self.specs[name], *pair), counted)

    def _path(self, name: str, pair: Pair) -> Path:
        return self.tune_dir.parent / A.TUNE_RUNS / f"{self.run_key(name, pair)}.json"

    def _reuse(self, name: str, pair: Pair, counted: bool) -> bool:
        """Take a run finished before (by an earlier session) from its cache file, if there is one."""
        path = self._path(name, pair)
        if not path.exists():
            return False
        self.reused += 1
        self._keep(name, pair, load_json(path), counted)
        return True

    def _finished(self, name: str, pair: Pair, metrics: dict[str, Any], counted: bool) -> dict[str, Any]:
        """Store a freshly trained run (atomically: a kill never leaves half a cache file)."""
        rec = {"candidate": name, "split": pair[0], "seed": pair[1], "spec": self.specs[name], **metrics}
        save_json(self._path(name, pair), rec)
        self.fresh += 1
        return self._keep(name, pair, rec, counted)

    def _keep(self, name: str, pair: Pair, rec: dict[str, Any], counted: bool) -> dict[str, Any]:
        if counted:
            self.used.add((name, pair))
        self.cache[(name, pair)] = rec
        self._event(f"{name} split {pair[0]} seed {pair[1]}: macro {rec['heldout_macro_cluster']:.4f} "
                    f"micro {rec['heldout_micro']:.4f}")
        return rec

    def prefetch(self, wanted: Sequence[tuple[str, Pair]], counted: bool = True) -> None:
        """Train the runs of ``wanted`` that are not stored yet, ``jobs`` at a time in worker processes.

        Runs start in the order given and stop starting where :meth:`get` would stop (the budget), so
        the sequential pass of :meth:`get` that follows finds exactly the runs it would have trained.
        """
        if self.tune.jobs <= 1:
            return
        todo = [(n, p) for n, p in dict.fromkeys(wanted) if (n, p) not in self.cache]
        portable = getattr(self.runner, "portable", None)
        jobs: dict[int, Callable[..., dict[str, Any]]] = {}
        running: dict[Future[dict[str, Any]], tuple[str, Pair]] = {}
        while todo or running:
            while todo and len(running) < self.tune.jobs:
                name, pair = todo.pop(0)
                if self._reuse(name, pair, counted):
                    continue
                why = self._over_budget(counted, pending=len(running))
                if why:
                    self.stopped = self.stopped or why
                    todo = []
                    break
                if pair[0] not in jobs:
                    jobs[pair[0]] = portable(pair[0]) if portable else self.runner
                if self.pool is None:
                    self.pool = ProcessPoolExecutor(self.tune.jobs, mp_context=multiprocessing.get_context("spawn"))
                running[self.pool.submit(jobs[pair[0]], self.specs[name], *pair)] = (name, pair)
            if running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    self._finished(*running.pop(fut), fut.result(), counted)

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
        for m in ("heldout_macro_cluster", "heldout_macro_domain", "heldout_micro"):
            if all(r.get(m) is not None for r in (*mine, *base)):  # type: ignore[union-attr]
                vals = [a[m] for a in mine]  # type: ignore[index]
                out[m] = {"value": round(sum(vals) / len(vals), 5),
                          "minus_random": paired_interval([a[m] - b[m] for a, b in zip(mine, base, strict=True)])}
        out["objective"] = out[self.objective()]["minus_random"]
        out["micro"] = out["heldout_micro"]["minus_random"]
        out["feasible"] = out["micro"]["mean"] <= self.tune.max_micro_regression
        return out


def search_pairs(cfg: ExperimentConfig) -> list[Pair]:
    """(split, seed) pairs in the order rungs take them: seed-major, so the first pairs span the splits."""
    return [(split, seed) for seed in cfg.seeds for split in cfg.splits()]


def rung_sizes(n_pairs: int, eta: int) -> list[int]:
    """Pairs per rung: 1, eta, eta**2, ... capped at (and ending with) all pairs."""
    sizes = [1]
    while sizes[-1] < n_pairs:
        sizes.append(min(n_pairs, sizes[-1] * eta))
    return sizes


def _rank_key(a: dict[str, Any]) -> tuple[bool, float]:
    return (not a["feasible"], a["objective"]["mean"])


def _run_rung(s: Search, alive: list[str], pairs: Sequence[Pair]) -> dict[str, Any]:
    """Every alive candidate (and random) on ``pairs``; the assessment of those that finished."""
    s.prefetch([(name, pair) for pair in pairs for name in ("random", *alive)])
    for pair in pairs:
        for name in ("random", *alive):
            if s.get(name, pair) is None:
                break
    scored = {n: s.assess(n, pairs) for n in alive}
    return {n: a for n, a in scored.items() if a is not None}


def halving(s: Search, write: Callable[[], None]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Successive halving: the trajectory (one entry per rung) and the last rung's assessments."""
    pairs = search_pairs(s.cfg)
    alive = [n for n in s.specs if n != "random"]
    trajectory: list[dict[str, Any]] = []
    final: dict[str, Any] = {}
    for r, n in enumerate(rung_sizes(len(pairs), s.tune.eta)):
        scored = _run_rung(s, alive, pairs[:n])
        complete = len(scored) == len(alive)
        if complete or not final:
            final = scored
        ranked = sorted(scored, key=lambda c: _rank_key(scored[c]))
        keep = ranked[: max(1, math.ceil(len(alive) / s.tune.eta))]
        trajectory.append({"rung": r, "pairs": [list(p) for p in pairs[:n]], "alive": alive, "ranked": ranked,
                           "kept": keep, "complete": complete, "scores": scored})
        s.results["trajectory"] = trajectory
        write()
        if s.stopped or n == len(pairs):
            break
        alive = keep
    return trajectory, final


def choose(final: dict[str, Any], tol: float, seen: dict[str, Any] | None = None) -> tuple[str, str]:
    """The winner and why: the feasible candidate of the last rung with the lowest objective whose interval
    is below zero, else random; ``seen`` (every candidate's latest assessment) names those refused for micro."""
    better = [n for n, a in final.items() if a["feasible"] and a["objective"]["verdict"] == "better"]
    if better:
        win = min(better, key=lambda n: final[n]["objective"]["mean"])
        o, m = final[win]["objective"], final[win]["micro"]
        return win, (f"{win} lowers the objective by {-o['mean']:.4f} nats/token vs random, 95 % interval "
                     f"[{o['low']:+.4f}, {o['high']:+.4f}] over {o['n']} pairs, with micro {m['mean']:+.4f} "
                     f"(tolerance {tol:g}); the lowest objective among {len(better)} candidate(s) better than random")
    infeasible = [n for n, a in (seen or final).items() if not a["feasible"] and a["objective"]["mean"] < 0]
    why = "no candidate beat random: none within the micro tolerance has an objective interval below zero"
    if infeasible:
        why += f" ({', '.join(sorted(infeasible))} lowered the objective, but raised micro by more than {tol:g})"
    return "random", why + "; random (the natural mixture) is the chosen plan"


# ------------------------------------------------------------------------------------------ the command


def run_tune(
    inputs: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    cfg: ExperimentConfig | None = None,
    tune: TuneConfig | None = None,
    runner: ProxyRunner | None = None,
    progress: bool = False,
    on_event: OnEvent | None = None,
    write_plan: bool = True,
) -> dict[str, Any]:
    """Search the grid by successive halving, choose a plan, and write it for the whole corpus into ``out``.

    Every proxy run is stored in ``out/tune/runs/<hash>.json`` as it finishes, so a killed search resumes
    with the finished runs reused; ``out/tune/results.json`` is rewritten (atomically) after every rung.
    ``runner`` replaces the training runs (tests); ``write_plan`` False skips the whole-corpus plan.
    Returns the results dictionary.
    """
    from clusterclip.store import RunDir

    cfg, tune = cfg or ExperimentConfig(), tune or TuneConfig()
    tune_dir = Path(out) / A.TUNE_DIR
    tune_dir.mkdir(parents=True, exist_ok=True)
    with RunDir(tune_dir).lock():
        s = Search(cfg, tune, runner or TrainingRunner(inputs, tune_dir, cfg, progress), tune_dir, on_event)
        s.results = {"version": TUNE_VERSION, "status": "running", "inputs": [str(p) for p in inputs],
                     "config": asdict(cfg), "tune": asdict(tune), "grid": list(s.specs),
                     "pairs": [list(p) for p in search_pairs(cfg)], "trajectory": []}
        try:
            trajectory, final = halving(s, lambda: _write(s))
            seen = {n: a for t in trajectory for n, a in t["scores"].items()}
            winner, why = choose(final, tune.max_micro_regression, seen)
            s.results.update(objective=s.objective() if s.cache else None, winner=winner, reason=why,
                             status=f"stopped: {s.stopped}" if s.stopped else "complete",
                             candidates=_candidates(s, trajectory, winner))
            _write(s)
            if tune.check_split_seeds:
                s.results["unseen"] = unseen_check(s, winner)
                _write(s)
        finally:
            s.close()
    if write_plan:
        s.results["plan"] = write_chosen_plan(inputs, Path(out), cfg, s.specs[winner], tune.plan_seed, progress)
        _write(s)
    return s.results


def _write(s: Search) -> None:
    s.results["progress"] = {"trained": s.fresh, "reused": s.reused, "search_runs": len(s.used),
                             "seconds": round(time.perf_counter() - s.t0, 1)}
    s.results["updated_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    save_json(s.tune_dir.parent / A.TUNE_RESULTS, s.results)


def _candidates(s: Search, trajectory: list[dict[str, Any]], winner: str) -> dict[str, Any]:
    """Every candidate: its options, how far it got, and its latest assessment (intervals vs random)."""
    out: dict[str, Any] = {"random": {"spec": s.specs["random"], "status": "baseline" if winner != "random"
                                      else "chosen (baseline)", "rung": len(trajectory) - 1, "assessment": None}}
    last_alive = trajectory[-1]["alive"] if trajectory else []
    for name in s.specs:
        if name == "random":
            continue
        rungs = [t for t in trajectory if name in t["scores"]]
        if not rungs:
            status = "not run (budget)"
        elif name == winner:
            status = "chosen"
        elif name in last_alive:
            status = "finalist"
        else:
            status = f"eliminated after rung {rungs[-1]['rung']}"
        out[name] = {"spec": s.specs[name], "status": status, "rung": rungs[-1]["rung"] if rungs else None,
                     "assessment": rungs[-1]["scores"][name] if rungs else None}
    return out


def unseen_check(s: Search, winner: str) -> dict[str, Any]:
    """Every candidate on split seeds the search never saw; the choice against the best fixed candidate there."""
    pairs = [(split, seed) for seed in s.cfg.seeds for split in s.tune.check_split_seeds]
    wanted = [(name, pair) for pair in pairs for name in s.specs]
    s.prefetch(wanted, counted=False)
    for name, pair in wanted:
        s.get(name, pair, counted=False)
    scored = {n: s.assess(n, pairs) for n in s.specs if n != "random"}
    fixed = {n: a for n, a in scored.items() if a is not None and a["feasible"]}
    best = min(fixed, key=lambda n: fixed[n]["objective"]["mean"], default="random")
    if fixed and fixed[best]["objective"]["mean"] > 0:
        best = "random"
    obj = s.objective()
    diffs = [s.cache[(winner, p)][obj] - s.cache[(best, p)][obj] for p in pairs]
    versus = paired_interval(diffs)
    return {"split_seeds": list(s.tune.check_split_seeds), "pairs": [list(p) for p in pairs], "candidates": scored,
            "chosen": winner, "best_fixed": best, "chosen_minus_best": versus, "holds": versus["low"] <= 0,
            "chosen_minus_random": scored.get(winner)}


def plan_command(run_dir: Path, pc: Any) -> str:
    """The ``clusterclip plan`` command that builds the same plan (rendered by
    :meth:`RunDir.rebuild_command <clusterclip.store.RunDir.rebuild_command>`, like every other)."""
    from clusterclip.store import RunDir

    return RunDir(run_dir).rebuild_command(A.plan_stage_name(pc.name()), {"config": pc.to_json()})


def write_chosen_plan(inputs: Sequence[str | os.PathLike[str]], run_dir: Path, cfg: ExperimentConfig,
                      spec: dict[str, Any], seed: int, progress: bool = False) -> dict[str, Any]:
    """The whole corpus through corpus, embed and cluster stages (K, embedder and fields of ``cfg``), and
    the chosen plan over it: an ordinary plan for a budget of ``cfg.passes`` passes over its tokens."""
    from clusterclip.cluster import ClusterConfig, cluster_stage
    from clusterclip.corpus import CorpusConfig, corpus_stage
    from clusterclip.embed import embed_stage
    from clusterclip.plan import PlanConfig, plan_stage
    from clusterclip.store import RunDir, load_npy

    run = RunDir(run_dir)
    with run.lock():
        run.clean_temp_files()
        corpus_stage(run, inputs, CorpusConfig(text_field=cfg.text_field, group_field=cfg.group_field),
                     progress=progress)
        embed_stage(run, embedder=cfg.embedder, progress=progress)
        cluster_stage(run, ClusterConfig(k=cfg.k, seed=seed), progress=progress)
        tokens = int(load_npy(run.path(A.TOKENS)).sum())
        pc = PlanConfig(strategy=spec["strategy"], budget=round(cfg.passes * tokens), budget_unit="tokens",
                        max_repeat=spec.get("max_repeat"), tau=spec.get("tau", 0.5),
                        order=spec.get("order", "equal-rate"), seed=seed)
        record = plan_stage(run, pc)
    return {"name": pc.name(), "config": pc.to_json(), "command": plan_command(run_dir, pc),
            "stats": {k: v for k, v in record.get("stats", {}).items() if isinstance(v, (int, float, str))}}


def print_event(text: str) -> None:
    """Progress line on stderr."""
    print(text, file=sys.stderr, flush=True)


def format_summary(res: dict[str, Any]) -> str:
    """The candidates as a markdown table (intervals vs random), the choice, why, and its plan command."""
    obj = res.get("objective") or "heldout_macro_cluster"
    lines = [f"Objective: {obj} (lower is better); Δ: paired difference to random over (split, seed) pairs "
             "[95 % bootstrap interval] verdict (wins/pairs).", "",
             "| candidate | status | pairs | Δ objective | Δ micro | feasible |", "|---|---|---|---|---|---|"]
    for name, c in (res.get("candidates") or {}).items():
        a = c.get("assessment") or {}
        lines.append(f"| {name} | {c['status']} | {a.get('pairs', '–')} | {format_interval(a.get('objective'))} | "
                     f"{format_interval(a.get('micro'))} | {a.get('feasible', '–')} |")
    lines += ["", f"Chosen: {res.get('winner')}. {res.get('reason', '')}", f"Status: {res.get('status')}."]
    unseen = res.get("unseen")
    if unseen:
        lines.append(f"Unseen splits {unseen['split_seeds']}: chosen {unseen['chosen']} minus best fixed candidate "
                     f"{unseen['best_fixed']}: {format_interval(unseen['chosen_minus_best'])}; "
                     f"{'holds' if unseen['holds'] else 'does NOT hold'} (at least as good within its interval).")
    if res.get("plan"):
        lines.append(f"Plan for the whole corpus: {res['plan']['name']}; the same plan by hand:\n  "
                     f"{res['plan']['command']}")
    return "\n".join(lines) + "\n"
