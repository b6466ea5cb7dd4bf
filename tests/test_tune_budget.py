"""``tune`` says at the start whether its budget can reach a verdict, from a measured first run, and shrinks the
search to what can (fake runners whose records carry a fake run time: no time passes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from clusterclip.experiment.config import ExperimentConfig
from clusterclip.experiment.tune.budget import schedule, smaller
from clusterclip.experiment.tune.config import TuneConfig
from clusterclip.experiment.tune.format import format_summary
from clusterclip.experiment.tune.search_stage import run_tune
from tests.test_tune import CFG as GRID_CFG
from tests.test_tune import SMALL, FakeRunner
from tests.test_weight_search import PlanRunner

CFG = ExperimentConfig(split_seeds=(0, 1, 2), seeds=(0, 1), passes=2)
DOCS = TuneConfig(search=("weights",), weights_cap=3, weight_rounds=3, weight_runs=3, weight_pairs=1,
                  weight_candidates=300, max_groups=6, max_minutes=40)
"""The shape of docs/tune.md's CPU-sized command (3 rounds of 3 mixtures on 1 pair, 6 pairs, 40 minutes)."""


class Timed(PlanRunner):
    """A :class:`PlanRunner` whose runs say they took ``seconds`` (a run's record carries its own time)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def __call__(self, spec: dict[str, Any], split: int, seed: int) -> dict[str, Any]:
        return {**super().__call__(spec, split, seed), "seconds": self.seconds}


def _tune(out: Path, seconds: float, tune: TuneConfig = DOCS) -> tuple[dict[str, Any], list[str], Timed]:
    events: list[str] = []
    runner = Timed(seconds)
    res = run_tune([], out, CFG, tune, runner=runner, write_plan=False, on_event=events.append)
    return res, events, runner


def test_the_schedule_counts_the_runs_a_complete_search_trains(tmp_path: Path) -> None:
    runner = FakeRunner({"clusterclip-spread-R12": (-0.2, 0.0)})
    run_tune([], tmp_path / "g", GRID_CFG, SMALL, runner=runner, write_plan=False)
    assert schedule(GRID_CFG, SMALL, 6).runs == len(runner.calls) == 7 + 3 * 2 + 2 * 6
    weights = TuneConfig(search=("weights",), weights_cap=3, weight_rounds=2, weight_runs=3, weight_pairs=2,
                         weight_candidates=300, max_groups=6)
    res, _, _ = _tune(tmp_path / "w", 0.0, weights)
    sched = schedule(CFG, weights, 0)
    assert sched.phases == (3 * 2 + 2, 3 * 2, 2 * 4 + 4)  # round 0 with random, round 1, the best 2 of 6 on 4 more
    assert res["progress"]["search_runs"] + res["progress"]["shared"] == sched.runs


def test_a_budget_that_fits_says_so_at_the_start_and_changes_nothing(tmp_path: Path) -> None:
    res, events, _ = _tune(tmp_path, 10.0)
    b = res["budget"]
    assert b["verdict"] == "fits" and b["seconds_per_run"] == 10.0 and b["shrunk_to"] is None
    assert b["asked"] == {"runs": 30, "minutes": 5.0}  # 3 x 3 x 1 + 1, then the best 3 and random on 5 more pairs
    assert events[1] == f"tune: {b['message']}" and "it can reach a verdict on 6 pairs" in b["message"]
    assert len(res["weight_search"]["rounds"]) == 3
    assert b["message"][1:] in format_summary(res)


def test_a_budget_too_small_shrinks_to_fewer_rounds_on_more_pairs_and_still_decides(tmp_path: Path) -> None:
    """At 120 s a run, the CPU-sized settings need 30 runs, 60 minutes: more than 40. Said at once (after the first
    run, before any other), and the search shrinks to one round of 3 mixtures on 2 pairs and its best on all 6
    pairs (16 runs, 32 minutes: within 80 % of the 40) instead of 9 single-pair candidates and finals that never
    run."""
    res, events, runner = _tune(tmp_path, 120.0)
    b = res["budget"]
    assert b["verdict"] == "shrunk" and b["asked"] == {"runs": 30, "minutes": 60.0}
    assert b["shrunk_to"] == {"weight_rounds": 1, "weight_pairs": 2}
    assert events[1] == f"tune: {b['message']}" and len([e for e in events[:2] if "macro" in e]) == 1
    assert "shrunk to --weight-rounds 1 --weight-pairs 2 (about 16 runs, 32 minutes with --jobs 1), which can" \
        in b["message"]
    [round0] = res["weight_search"]["rounds"]
    assert len(round0["pairs"]) == 2 and len(round0["candidates"]) == 3
    [final] = res["weight_search"]["final"].values()
    assert final["pairs"] == 6 and "note" not in final["objective"]  # a verdict on every search pair
    assert res["progress"]["search_runs"] + res["progress"]["shared"] == 16 == len(runner.calls) + res["progress"][
        "shared"]


def test_a_budget_no_search_fits_says_so_at_once_and_what_would(tmp_path: Path) -> None:
    res, events, _ = _tune(tmp_path, 1000.0)
    b = res["budget"]
    assert b["verdict"] == "cannot" and b["shrunk_to"] is None and events[1] == f"tune: {b['message']}"
    assert "it cannot reach a verdict, nor can the smallest search (--weight-rounds 1 --weight-runs 2 " \
           "--weight-pairs 1:" in b["message"]
    need = int(b["message"].rsplit("about ", 1)[1])
    assert need == 271  # 1 x 2 mixtures on 1 pair and random, then the best and random on 5 more: 13 runs of 1000 s,
    # in 80 % of the time
    assert len(res["weight_search"]["rounds"]) == 1 and "no round 1: at 1000 s a run" in res["weight_search"]["cut"]
    assert "the finals on every pair no longer fit the budget left" in res["weight_search"]["late"]
    assert f"tune: budget: {res['weight_search']['late']}" in events


def test_too_few_pairs_for_a_verdict_are_said_whatever_the_budget(tmp_path: Path) -> None:
    one = ExperimentConfig(split_seeds=(0,), seeds=(0, 1), passes=2)
    res = run_tune([], tmp_path, one, DOCS, runner=Timed(1.0), write_plan=False)
    assert res["budget"]["verdict"] == "impossible" and "2 search pair(s), fewer than the 6" in res["budget"]["message"]


def test_the_run_budget_shrinks_the_grid_to_fewer_candidates_a_rung() -> None:
    options = smaller(GRID_CFG, SMALL, 6)
    runs = [schedule(GRID_CFG, t, 6).runs for t in [SMALL, *options]]
    assert runs == sorted(runs, reverse=True) and len(set(runs)) == len(runs) and len(options) >= 1
    assert all(t.eta > SMALL.eta for t in options) and runs[-1] == 7 + 8 * 2  # eta 9: rung 0, then the best on 8 more


def test_max_runs_alone_shrinks_before_any_time_is_measured(tmp_path: Path) -> None:
    res, _, _ = _tune(tmp_path, 0.0, TuneConfig(**{**DOCS.__dict__, "max_minutes": None, "max_runs": 20}))
    assert res["budget"]["verdict"] == "shrunk" and "the 19 runs left of --max-runs 20" in res["budget"]["message"]
    assert res["progress"]["search_runs"] <= 20
    assert all(a["pairs"] == 6 for a in res["weight_search"]["final"].values())


class Slowing(Timed):
    """The first run takes ``first`` s, every later one ``later`` s (the machine got busy after the estimate)."""

    def __init__(self, first: float = 10.0, later: float = 300.0) -> None:
        super().__init__(first)
        self.first, self.later = first, later

    def __call__(self, spec: dict[str, Any], split: int, seed: int) -> dict[str, Any]:
        self.seconds = self.first if not self.calls else self.later
        return super().__call__(spec, split, seed)


def test_runs_that_get_slower_cut_the_rounds_so_the_finals_still_run_on_every_pair(tmp_path: Path) -> None:
    """At 10 s a run the CPU-sized search fits 40 minutes; after round 0 the runs take 300 s: at that pace round 1
    and the finals would not, so there is no round 1 and the best mixture gets every pair (a verdict)."""
    res = run_tune([], tmp_path, CFG, DOCS, runner=Slowing(), write_plan=False)
    ws = res["weight_search"]
    assert res["budget"]["verdict"] == "fits" and len(ws["rounds"]) == 1
    assert ws["cut"].startswith("no round 1: at 228 s a run, its 3 mixtures and the finals would not fit")
    [final] = ws["final"].values()
    assert final["pairs"] == 6 and "note" not in final["objective"]
    assert "Weight search cut to the budget: no round 1" in format_summary(res)
    unlimited = run_tune([], tmp_path / "free", CFG, TuneConfig(**{**DOCS.__dict__, "max_minutes": None}),
                         runner=Slowing(), write_plan=False)
    assert len(unlimited["weight_search"]["rounds"]) == 3 and "cut" not in unlimited["weight_search"]


def test_the_measured_load_8_run_would_now_be_told_at_once_that_it_cannot_decide() -> None:
    """The measurement of docs/tune.md: the former CPU-sized command at 319 s a run, --jobs 2, 33 of its 40 minutes
    left after the first run. No search, however small, fits 80 % of that (the smallest: 7 rounds of 2 runs)."""
    from dataclasses import replace

    from clusterclip.experiment.tune.budget import _fits

    tune = replace(DOCS, jobs=2)
    left = (33 * 60.0, None)
    assert not any(_fits(schedule(CFG, t, 0), 319.0, 2, left) for t in [tune, *smaller(CFG, tune, 0)])
    assert _fits(schedule(CFG, smaller(CFG, tune, 0)[-1], 0), 319.0, 2, (60 * 60.0, None))  # an hour would do


CPU = TuneConfig(search=("weights",), weight_rounds=3, weight_runs=4, weight_pairs=2, jobs=2, max_minutes=40)
"""The shape of docs/tune.md's CPU-sized command now (the ablation's proxies: 3 rounds of 4 mixtures on 2 pairs)."""


def test_the_cpu_sized_command_fits_its_budget_at_the_pace_measured_at_load_10() -> None:
    """At the ablation's measured pace on 2 cores at load 8-12 (a run of 40 s median, 70 s at most, 2 at once)
    the documented search, 46 runs, fits 80 % of the 40 minutes as asked; at 100 s a run it no longer does, and
    `tune` says so after its first run and shrinks (tested above)."""
    from clusterclip.experiment.tune.budget import _fits

    sched = schedule(CFG, CPU, 0)
    assert sched.runs == 46 and sched.phases == (4 * 2 + 2, 4 * 2, 4 * 2, 4 * 4 + 4)
    left = (40 * 60.0 - 40.0, None)
    assert _fits(sched, 40.0, 2, left) and _fits(sched, 70.0, 2, left)
    assert not _fits(sched, 100.0, 2, left)


def test_the_cpu_sized_command_reaches_a_verdict_when_its_runs_slow_down_after_the_first(tmp_path: Path) -> None:
    """A first run of 40 s and later ones of 70 s at --jobs 2 is, in wall time, one job of 20 s and then 35 s: the
    budget fits at the start, and the finals still run on all 6 pairs."""
    from dataclasses import replace

    res = run_tune([], tmp_path, CFG, replace(CPU, jobs=1, weights_cap=3, weight_candidates=300, max_groups=6),
                   runner=Slowing(20.0, 35.0), write_plan=False)
    ws = res["weight_search"]
    assert res["budget"]["verdict"] == "fits" and len(ws["rounds"]) == 3 and "cut" not in ws
    assert all(a["pairs"] == 6 and "note" not in a["objective"] for a in ws["final"].values())
