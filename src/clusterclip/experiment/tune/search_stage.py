"""``clusterclip tune`` as a stage of the tune directory: the search (its record ``RUN/tune/search.json`` lists
``results.json``), then the chosen plan for the whole corpus. The search is re-decided on every call; the
proxy runs it uses are stages of their own, reused while fresh."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from clusterclip.contract.experiment import TUNE_DIR, TUNE_SEARCH_STAGE, SearchRecord
from clusterclip.contract.tune_results import TUNE_VERSION
from clusterclip.experiment.commands import config_flags, settings_flags
from clusterclip.experiment.config import PROXY_FIELDS, TUNE_DATA_FIELDS, ExperimentConfig
from clusterclip.experiment.tune.budget import plan_budget
from clusterclip.experiment.tune.chosen_plan import check_command, write_chosen_plan
from clusterclip.experiment.tune.config import TuneConfig
from clusterclip.experiment.tune.halving import candidates, choose, halving, search_pairs, unseen_check
from clusterclip.experiment.tune.runners import ProxyRunner, TrainingRunner
from clusterclip.experiment.tune.search import RESULTS, OnEvent, Search
from clusterclip.experiment.tune.weights import versus, weight_candidates, weight_search
from clusterclip.stages import Built, Job, Stage, run_stage
from clusterclip.store import RunDir

SEARCH_STAGE = TUNE_SEARCH_STAGE
"""The stage of the tune directory that is the search (record ``RUN/tune/search.json``)."""


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

    Every proxy run is a stage ``runs/<key>`` of ``out/tune`` (record ``out/tune/runs/<key>.json``) written as
    it finishes, so a killed search resumes with the finished runs reused; ``out/tune/results.json`` is
    rewritten (atomically) after every rung. The proxy runs' data keeps the fields that the stratified candidates
    read (:meth:`TuneConfig.proxy_config`), and so does the whole corpus. ``runner`` replaces the training runs
    (tests); ``write_plan`` False skips the whole-corpus plan. Returns the results dictionary.
    """
    tune = tune or TuneConfig()
    cfg = tune.proxy_config(cfg or ExperimentConfig())
    tune_dir = Path(out) / TUNE_DIR
    s = Search(cfg, tune, runner or TrainingRunner(inputs, tune_dir, cfg, progress), tune_dir, on_event)

    def build(job: Job) -> Built:
        _search(s, inputs)
        if write_plan:
            s.record(plan=write_chosen_plan(inputs, Path(out), cfg, s.specs[s.results["winner"]], tune.plan_seed,
                                            progress, s.results.get("weight_search")))
        s.record(check_command=check_command(inputs, out, cfg, tune.check_split_seeds, s.results))
        s.write()
        return Built([RESULTS])

    settings = {"config": asdict(cfg), "tune": asdict(tune), "write_plan": write_plan}
    run_stage(RunDir(tune_dir), Stage(SEARCH_STAGE, settings, s.proxies.inputs, build,
                                      command=tune_argv(inputs, out, cfg, tune, write_plan), record=SearchRecord),
              force=True)
    return s.results


def _search(s: Search, inputs: Sequence[str | os.PathLike[str]]) -> None:
    """The search, its decision and the unseen check into ``s.results`` (written after every step)."""
    s.begin({"version": TUNE_VERSION, "status": "running", "inputs": [str(p) for p in inputs],
             "config": asdict(s.cfg), "tune": asdict(s.tune), "grid": list(s.specs),
             "pairs": [list(p) for p in search_pairs(s.cfg)], "trajectory": []})
    try:
        s.record(budget=plan_budget(s))
        if s.on_event is not None:
            s.on_event(f"tune: {s.results['budget']['message']}")
        grid = list(s.specs)
        trajectory, final = halving(s, s.write) if "grid" in s.tune.search else ([], {})
        seen = {n: a for t in trajectory for n, a in t["scores"].items()}
        ws = weight_search(s, s.write) if "weights" in s.tune.search else None
        if ws is not None:
            final, seen = {**final, **ws["final"]}, {**seen, **ws["final"]}
        winner, why = choose(final, s.tune.max_micro_regression, seen)
        cands = candidates(s, trajectory, winner) if trajectory else {}
        if ws is not None:
            cands = {**{n: c for n, c in cands.items() if n in grid}, **weight_candidates(s, ws, winner)}
            _versus_grid(s, ws, final, grid)
        s.record(objective=s.objective() if s.cache else None, winner=winner, reason=why,
                 status=f"stopped: {s.stopped}" if s.stopped else "complete", candidates=cands)
        s.write()
        if s.tune.check_split_seeds:
            s.record(unseen=unseen_check(s, winner, [*grid, *(ws["final"] if ws else ())]))
            s.write()
    finally:
        s.close()


def _versus_grid(s: Search, ws: dict[str, Any], final: dict[str, Any], grid: list[str]) -> None:
    """The best weight finalist against the best grid candidate of the last rung (when the grid ran)."""
    def best(names: list[str]) -> str | None:
        ok = [n for n in names if n in final and final[n]["feasible"]]
        return min(ok, key=lambda n: final[n]["objective"]["mean"], default=None)

    w, g = best(list(ws["final"])), best([n for n in grid if n != "random"])
    ws["versus_grid"] = versus(s, w, g) if w and g else None


def tune_argv(inputs: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], cfg: ExperimentConfig,
              tune: TuneConfig, write_plan: bool = True) -> list[str]:
    """The ``clusterclip tune`` command line that runs this search into ``out``."""
    return ["clusterclip", "tune", *map(str, inputs), "--out", str(out), *settings_flags(tune),
            *config_flags(cfg, (*TUNE_DATA_FIELDS, *PROXY_FIELDS)), *([] if write_plan else ["--no-plan"])]
