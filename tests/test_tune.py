"""Bootstrap intervals, multi-split experiments and ``clusterclip tune``: search, constraint, resume, CLI.

The search logic runs on fake proxy runners (known losses, milliseconds per run); one test runs the
whole command with real training on a generated corpus (``--quick``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip.contract.plan import PLAN_ORDER, plan_path
from clusterclip.experiment.stats import (
    MIN_PAIRS,
    bootstrap_means,
    expanded_tail,
    format_interval,
    paired_interval,
    verdict,
)

torch = pytest.importorskip("torch")
pytest.importorskip("tokenizers")

from clusterclip.errors import ClusterClipError
from clusterclip.experiment.config import (
    ExperimentConfig,
    quick_config,
)
from clusterclip.experiment.proxy_runs import run_experiment
from clusterclip.experiment.tune.config import TuneConfig
from clusterclip.experiment.tune.halving import (
    rung_sizes,
    search_pairs,
)
from clusterclip.experiment.tune.search_stage import run_tune
from clusterclip.settings import SettingsError

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------- bootstrap


@pytest.mark.parametrize("value", [-0.25, 0.0, 0.125])
def test_constant_differences_give_a_zero_width_interval_at_the_value(value: float) -> None:
    e = paired_interval([value] * 6)
    assert e["low"] == e["high"] == e["mean"] == pytest.approx(value)
    assert e["verdict"] == {-0.25: "better", 0.0: "inconclusive", 0.125: "worse"}[value]


def test_interval_covers_the_true_mean_at_the_nominal_rate() -> None:
    rng = np.random.default_rng(1)
    trials, n, hits = 400, 30, 0
    for t in range(trials):
        d = rng.normal(0.3, 1.0, size=n)
        e = paired_interval(d, resamples=2000, seed=t)
        hits += e["low"] <= 0.3 <= e["high"]
    # the percentile bootstrap of a mean of 30 normal draws covers at ~0.93-0.95; 400 trials: sd ~0.012
    assert 0.89 <= hits / trials <= 0.98


def test_bootstrap_is_seeded_and_bounded_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    from clusterclip.experiment import stats

    d = np.arange(7, dtype=float)
    a = bootstrap_means(d, 5000, seed=3)
    assert np.array_equal(a, bootstrap_means(d, 5000, seed=3))
    assert not np.array_equal(a, bootstrap_means(d, 5000, seed=4))
    assert abs(a.mean() - d.mean()) < 0.1 and a.min() >= d.min() and a.max() <= d.max()
    monkeypatch.setattr(stats, "CHUNK", 50)  # 7 resamples per block: same distribution, many blocks
    small = bootstrap_means(d, 5000, seed=3)
    assert small.shape == a.shape and abs(small.std() - a.std()) < 0.1 and abs(small.mean() - a.mean()) < 0.1


def test_verdict_logic() -> None:
    assert verdict(-0.3, -0.01, 6) == "better"
    assert verdict(0.01, 0.3, 6) == "worse"
    assert verdict(-0.1, 0.1, 6) == "inconclusive"
    assert verdict(-0.3, -0.1, 5) == "inconclusive"  # fewer than MIN_PAIRS: no verdict whatever the interval
    assert verdict(-0.3, -0.1, 1) == "inconclusive"
    assert format_interval(paired_interval([-1.0, -2.0])).startswith("-1.500 [")
    assert format_interval(None) == "–"


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_too_few_pairs_never_give_better_or_worse_and_say_the_minimum(n: int) -> None:
    """A huge, perfectly consistent effect on fewer than MIN_PAIRS pairs is still no verdict: the record and the
    printed interval say that there were too few pairs, and how many a verdict needs."""
    for sign in (-1.0, 1.0):
        e = paired_interval(sign * (0.5 + 0.01 * np.arange(n)))
        assert e["verdict"] == "inconclusive" and e["min_pairs"] == MIN_PAIRS == 6
        assert e["note"] == f"too few pairs: {n} < 6"
        assert f"inconclusive, too few pairs: {n} < 6 ({(sign < 0) * n}/{n})" in format_interval(e)


def test_a_strong_effect_on_enough_pairs_gets_its_verdict() -> None:
    rng = np.random.default_rng(0)
    better = paired_interval(-0.2 + rng.normal(0, 0.02, 6))
    worse = paired_interval(0.2 + rng.normal(0, 0.02, 9))
    assert (better["verdict"], worse["verdict"]) == ("better", "worse") and "note" not in better
    assert "too few" not in format_interval(better)


def test_the_expanded_interval_widens_with_few_pairs_and_covers_near_the_nominal_rate() -> None:
    """The plain percentile bootstrap covers a mean of 6 normal pairs about 86 % of the time (measured: 1,000 trials);
    the expanded one is as wide as the Student-t interval and covers at about 93-95 %."""
    rng = np.random.default_rng(5)
    d = rng.normal(0.0, 1.0, 6)
    e = paired_interval(d)
    plain = np.quantile(bootstrap_means(d), [0.025, 0.975])
    assert e["low"] < plain[0] and e["high"] > plain[1]
    assert expanded_tail(0.95, 6) < expanded_tail(0.95, 30) < expanded_tail(0.95, 1000) < 0.05
    hits = 0
    for t in range(300):
        x = rng.normal(0.3, 1.0, 6)
        x_e = paired_interval(x, resamples=2000, seed=t)
        hits += x_e["low"] <= 0.3 <= x_e["high"]
    assert hits / 300 >= 0.89


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-5, 5, allow_nan=False), min_size=1, max_size=40))
def test_interval_lies_within_the_data_and_holds_the_mean(diffs: list[float]) -> None:
    e = paired_interval(diffs, resamples=500)
    assert min(diffs) - 1e-4 <= e["low"] <= e["high"] <= max(diffs) + 1e-4
    assert e["n"] == len(diffs) and e["wins"] == sum(x < 0 for x in diffs)


# ------------------------------------------------------------------------------------- fake proxies


class FakeRunner:
    """Known losses: per candidate (macro, micro) effects over random, a noise shared by every candidate
    of a (split, seed) pair, and a small seeded noise per run. ``sleep`` slows each run down."""

    def __init__(self, effects: dict[str, tuple[float, float]] | None = None, noise: float = 0.01,
                 sleep: float = 0.0) -> None:
        self.effects, self.noise, self.sleep, self.calls = effects or {}, noise, sleep, []

    def identity(self) -> dict[str, Any]:
        return {"fake": sorted(self.effects.items()), "noise": self.noise}

    def __call__(self, spec: dict[str, Any], split: int, seed: int) -> dict[str, Any]:
        self.calls.append((spec["name"], split, seed))
        time.sleep(self.sleep)
        pair = np.random.default_rng([split, seed]).normal(0, 0.1)
        own = np.random.default_rng([split, seed, zlib.crc32(spec["name"].encode())]).normal(0, self.noise, 2)
        macro, micro = self.effects.get(spec["name"], (0.0, 0.0))
        return {"heldout_macro_cluster": 4.0 + pair + macro + own[0], "heldout_macro_domain": None,
                "heldout_micro": 3.8 + pair + micro + own[1], "seconds": 0.0}


CFG = ExperimentConfig(split_seeds=(0, 1, 2), seeds=(0, 1, 2))
SMALL = TuneConfig(taus=(0.5,), caps=(9, 12))


def _tune(out: Path, runner: FakeRunner, tune: TuneConfig = SMALL, cfg: ExperimentConfig = CFG) -> dict[str, Any]:
    return run_tune([], out, cfg, tune, runner=runner, write_plan=False)


def test_rungs_and_pairs_span_the_splits_first() -> None:
    assert rung_sizes(9, 3) == [1, 3, 9] and rung_sizes(6, 2) == [1, 2, 4, 6] and rung_sizes(1, 3) == [1]
    assert search_pairs(CFG)[:3] == [(0, 0), (1, 0), (2, 0)]


def test_halving_gives_survivors_more_pairs_and_picks_the_clear_winner(tmp_path: Path) -> None:
    runner = FakeRunner({"clusterclip-spread-R12": (-0.2, 0.0), "uniform": (0.1, 0.05)})
    res = _tune(tmp_path, runner)
    assert res["winner"] == "clusterclip-spread-R12" and res["status"] == "complete"
    assert "lowers the objective" in res["reason"]
    win = res["candidates"]["clusterclip-spread-R12"]["assessment"]
    assert win["pairs"] == 9 and win["objective"]["verdict"] == "better" and win["objective"]["high"] < 0
    assert res["objective"] == "heldout_macro_cluster"
    assert [len(t["pairs"]) for t in res["trajectory"]] == [1, 3, 9]
    assert res["candidates"]["uniform"]["status"] == "eliminated after rung 0"
    # 7 candidates on pair 1, ceil(6/3)=2 (+random) on pairs 2-3, 1 (+random) on pairs 4-9
    assert len(runner.calls) == 7 + 3 * 2 + 2 * 6
    assert json.loads((tmp_path / "tune" / "results.json").read_text())["winner"] == res["winner"]


def test_tune_prints_the_experiment_that_checks_its_choice_on_unseen_splits(tmp_path: Path) -> None:
    """The printed command is an ``experiment`` of random and the chosen candidate as a strategy item, on split
    seeds after every seed the search (and its unseen check) used, enough for 6 pairs: it parses back into the
    same spec. A weight winner is checked as ``plan:`` of its plan for the whole corpus."""
    import shlex

    from clusterclip.cli.main import build_parser
    from clusterclip.cli.options import experiment_config
    from clusterclip.experiment.tune.chosen_plan import check_command
    from clusterclip.experiment.tune.format import format_summary

    res = _tune(tmp_path / "t", FakeRunner({"clusterclip-spread-R12": (-0.2, 0.0)}),
                TuneConfig(taus=(0.5,), caps=(9, 12), check_split_seeds=(5,)))
    argv = shlex.split(res["check_command"])
    assert argv[:2] == ["clusterclip", "experiment"] and f"{tmp_path / 't'}-check" in argv
    cfg = experiment_config(build_parser().parse_args(argv[1:]))
    assert cfg.split_seeds == (6, 7) and len(cfg.split_seeds) * len(cfg.seeds) >= MIN_PAIRS
    assert cfg.strategies == ("random", "clusterclip:max_repeat=12,order=spread")
    assert cfg.strategy_specs()[1] == res["candidates"]["clusterclip-spread-R12"]["spec"]
    assert res["check_command"] in format_summary(res)
    weights = {**res, "winner": "weights-ab", "plan": {"name": "weights-wx-R12"},
               "candidates": {"weights-ab": {"spec": {"name": "weights-ab", "strategy": "weights",
                                                      "group_weights": [0.5, 0.5], "max_repeat": 12}}}}
    line = check_command(["c.jsonl"], "runs/w", CFG, (), weights) or ""
    assert f"random,plan:{Path('runs/w') / 'plans' / 'weights-wx-R12'}" in line and "--split-seeds 3,4" in line


def test_micro_constraint_refuses_a_macro_gain_bought_with_micro_loss(tmp_path: Path) -> None:
    runner = FakeRunner({"clusterclip-R9": (-0.3, 0.08), "temperature-0.5": (-0.1, 0.0)})
    res = _tune(tmp_path, runner, TuneConfig(taus=(0.5,), caps=(9,), orders=("equal-rate",), eta=2))
    assert res["winner"] == "temperature-0.5"
    r9 = next(t["scores"]["clusterclip-R9"] for t in res["trajectory"] if "clusterclip-R9" in t["scores"])
    assert not r9["feasible"] and r9["objective"]["mean"] < -0.2
    loose = _tune(tmp_path / "loose", runner, TuneConfig(taus=(0.5,), caps=(9,), orders=("equal-rate",), eta=2,
                                                         max_micro_regression=0.2))
    assert loose["winner"] == "clusterclip-R9"


def test_nothing_beats_random_chooses_random_and_says_so(tmp_path: Path) -> None:
    runner = FakeRunner({"uniform": (0.05, 0.0), "clusterclip-R9": (-0.3, 0.5)})
    res = _tune(tmp_path, runner)
    assert res["winner"] == "random"
    assert res["reason"].startswith("no candidate beat random")
    assert "clusterclip-R9 lowered the objective" in res["reason"]
    assert res["candidates"]["random"]["status"] == "chosen (baseline)"


def test_budget_stops_the_search_and_decides_on_what_finished(tmp_path: Path) -> None:
    runner = FakeRunner({"clusterclip-R12": (-0.2, 0.0)})
    res = _tune(tmp_path, runner, TuneConfig(taus=(0.5,), caps=(9, 12), max_runs=10))
    assert len(runner.calls) == 10 and res["status"] == "stopped: max-runs 10 reached"
    assert res["progress"]["search_runs"] == 10
    assert res["winner"] == "random"  # one pair per candidate cannot give a verdict
    unconfirmed = res["reason"].split("(")[1].split(" lowered the objective on only 1 pair, fewer than the 6")[0]
    assert "clusterclip-R12" in unconfirmed.split(", ") and "raise --max-runs" in res["reason"]


def test_time_budget_stops_starting_runs(tmp_path: Path) -> None:
    runner = FakeRunner(sleep=0.05)
    res = _tune(tmp_path, runner, TuneConfig(taus=(0.5,), caps=(9,), max_minutes=0.0005))
    assert res["status"] == "stopped: max-minutes 0.0005 reached" and 1 <= len(runner.calls) < 4
    assert res["winner"] == "random"


def test_unseen_splits_compare_the_choice_with_every_fixed_candidate(tmp_path: Path) -> None:
    runner = FakeRunner({"clusterclip-R9": (-0.2, 0.0), "clusterclip-R12": (-0.05, 0.0)})
    res = _tune(tmp_path, runner, TuneConfig(taus=(0.5,), caps=(9, 12), check_split_seeds=(7, 8)))
    u = res["unseen"]
    assert u["chosen"] == "clusterclip-R9" == u["best_fixed"] and u["holds"] and u["check"] == "holds"
    assert set(u["candidates"]) == set(res["grid"]) - {"random"} and len(u["pairs"]) == 6
    assert {s for _, s, _ in runner.calls} >= {7, 8}


def test_a_search_with_fewer_pairs_than_a_verdict_needs_chooses_random_and_says_so(tmp_path: Path) -> None:
    """One split x two seeds (the ``--quick`` shape): even a candidate 0.3 nats better on both pairs is no
    verdict, so random is chosen, and the reason, the summary and the unseen check (two pairs) say why."""
    from clusterclip.experiment.tune.format import format_summary

    runner = FakeRunner({"clusterclip-R9": (-0.3, 0.0)})
    cfg = ExperimentConfig(split_seeds=(0,), seeds=(0, 1))
    res = _tune(tmp_path, runner, TuneConfig(taus=(0.5,), caps=(9,), check_split_seeds=(7,)), cfg)
    r9 = res["candidates"]["clusterclip-R9"]["assessment"]["objective"]
    assert r9["mean"] < -0.25 and r9["high"] < 0 and r9["verdict"] == "inconclusive" and r9["n"] == 2
    assert res["winner"] == "random" and "lowered the objective on only 2 pairs, fewer than the 6" in res["reason"]
    printed = format_summary(res)
    assert "Only 2 search pair(s), fewer than the 6 a verdict needs" in printed
    assert "inconclusive, too few pairs: 2 < 6" in printed
    u = res["unseen"]
    assert u["check"].startswith("cannot tell (too few pairs: 2 < 6;") and f"; {u['check']}." in printed


def test_grid_default_caps_follow_the_passes_and_must_exceed_them() -> None:
    names = [s["name"] for s in TuneConfig().grid(ExperimentConfig())]
    assert names[:5] == ["random", "uniform", "temperature-0.3", "temperature-0.5", "temperature-0.7"]
    assert "clusterclip-R9" in names and "clusterclip-spread-R18" in names
    with pytest.raises(SettingsError, match="must exceed"):
        TuneConfig(caps=(4,)).grid(ExperimentConfig())


# ------------------------------------------------------------------------------------- resume after a kill

KILLED = """
import sys
from pathlib import Path
from clusterclip.experiment.tune.search_stage import run_tune
from tests.test_tune import CFG, SMALL, FakeRunner, EFFECTS
run_tune([], Path(sys.argv[1]), CFG, SMALL, runner=FakeRunner(EFFECTS, sleep=0.15), write_plan=False)
"""
EFFECTS = {"clusterclip-R9": (-0.15, 0.0), "temperature-0.5": (-0.05, 0.01)}


def _comparable(res: dict[str, Any]) -> dict[str, Any]:
    return {k: res[k] for k in ("winner", "reason", "candidates", "trajectory", "objective", "status")}


def test_resume_after_sigkill_reuses_finished_runs_and_matches_an_uninterrupted_search(tmp_path: Path) -> None:
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(out)], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    runs = out / "tune" / "runs"
    deadline = time.time() + 60
    while time.time() < deadline and len(list(runs.glob("*.json"))) < 5:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished = len(list(runs.glob("*.json")))
    assert finished >= 5 and not list(runs.glob("*.tmp*"))
    resumed_runner = FakeRunner(EFFECTS)
    resumed = _tune(out, resumed_runner)
    whole_runner = FakeRunner(EFFECTS)
    whole = _tune(tmp_path / "whole", whole_runner)
    assert len(resumed_runner.calls) == len(whole_runner.calls) - finished
    assert resumed["progress"]["reused"] == finished
    assert _comparable(resumed) == _comparable(whole)


def test_proxy_runs_are_stage_records_and_a_damaged_or_foreign_one_is_retrained(tmp_path: Path) -> None:
    from clusterclip.store import RunDir

    first = _tune(tmp_path, FakeRunner(EFFECTS))
    runs = sorted((tmp_path / "tune" / "runs").glob("*.json"))
    rec = json.loads(runs[0].read_text())
    assert rec["stage"] == f"runs/{runs[0].stem}" and rec["config"]["spec"]["name"] in first["grid"]
    assert {"heldout_macro_cluster", "heldout_micro"} <= set(rec["metrics"])
    runs[0].write_text("{ damaged")  # retrained with a warning, not fatal
    foreign = json.loads(runs[1].read_text())
    runs[1].write_text(json.dumps({**foreign, "inputs_hash": "another corpus"}))  # copied in: not reused
    runner = FakeRunner(EFFECTS)
    again = _tune(tmp_path, runner)
    assert len(runner.calls) == 2 and again["progress"]["reused"] == len(runs) - 2
    assert _comparable(again) == _comparable(first)
    assert RunDir(tmp_path / "tune").problems("search") == []


# ------------------------------------------------------------------------------------- parallel runs


@pytest.mark.parametrize("tune", [SMALL, TuneConfig(taus=(0.5,), caps=(9, 12), max_runs=10),
                                  TuneConfig(taus=(0.5,), caps=(9,), check_split_seeds=(7,))],
                         ids=["complete", "max-runs", "unseen"])
def test_parallel_jobs_make_the_same_search_as_one_job(tmp_path: Path, tune: TuneConfig) -> None:
    one = _tune(tmp_path / "one", FakeRunner(EFFECTS), tune)
    two = _tune(tmp_path / "two", FakeRunner(EFFECTS), TuneConfig(**{**tune.__dict__, "jobs": 2}))
    assert _comparable(two) == _comparable(one) and two.get("unseen") == one.get("unseen")
    assert {k: two["progress"][k] for k in ("trained", "reused", "search_runs")} == \
        {k: one["progress"][k] for k in ("trained", "reused", "search_runs")}
    assert sorted(p.name for p in (tmp_path / "two" / "tune" / "runs").iterdir()) == \
        sorted(p.name for p in (tmp_path / "one" / "tune" / "runs").iterdir())


def test_parallel_jobs_reuse_finished_runs_and_respect_the_run_budget_across_restarts(tmp_path: Path) -> None:
    first = _tune(tmp_path, FakeRunner(EFFECTS), TuneConfig(taus=(0.5,), caps=(9, 12), max_runs=4, jobs=2))
    assert first["status"] == "stopped: max-runs 4 reached" and first["progress"]["trained"] == 4
    again = _tune(tmp_path, FakeRunner(EFFECTS), TuneConfig(taus=(0.5,), caps=(9, 12), max_runs=6, jobs=2))
    assert again["progress"] == {**again["progress"], "trained": 2, "reused": 4, "search_runs": 6}
    whole = _tune(tmp_path / "whole", FakeRunner(EFFECTS), TuneConfig(taus=(0.5,), caps=(9, 12), max_runs=6))
    assert _comparable(again) == _comparable(whole)


# ------------------------------------------------------------------------------------- devices

def test_device_is_validated_and_passed_to_torch(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="cpu, cuda or cuda:N"):
        ExperimentConfig(device="tpu")
    assert ExperimentConfig(device="cuda:1").device == "cuda:1"
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the unavailable-device error cannot be shown")
    corpus = _toy(tmp_path)
    with pytest.raises(ClusterClipError, match="torch sees no CUDA device"):
        run_experiment([corpus], tmp_path / "exp", quick_config(device="cuda"))
    with pytest.raises(ClusterClipError, match="torch sees no CUDA device"):
        run_tune([corpus], tmp_path / "tune", quick_config(device="cuda"), SMALL, write_plan=False)


# ------------------------------------------------------------------------------------- real runs


def _toy(tmp_path: Path) -> Path:
    from tests.test_experiment import _toy_corpus

    return _toy_corpus(tmp_path / "toy.jsonl")


def test_experiment_over_two_splits_pairs_by_split_and_seed(tmp_path: Path) -> None:
    corpus, out = _toy(tmp_path), tmp_path / "run"
    res = run_experiment([corpus], out, quick_config(strategies=("random", "uniform"), split_seeds=(0, 1)))
    assert set(res["runs"]) == {"random/0", "uniform/0", "random/0/split-1", "uniform/0/split-1"}
    assert res["runs"]["random/0/split-1"]["split"] == 1 and set(res["splits"]) == {"0", "1"}
    assert (out / "experiment" / "splits" / "1" / "labels.npy").exists()
    diff = res["stats"]["uniform"]["heldout_macro_cluster_minus_random"]
    m = "heldout_macro_cluster"
    expect = [res["runs"][f"uniform/0{s}"][m] - res["runs"][f"random/0{s}"][m] for s in ("", "/split-1")]
    assert diff["n"] == 2 and diff["mean"] == pytest.approx(np.mean(expect), abs=1e-4)
    assert diff["low"] == pytest.approx(min(expect), abs=1e-4) and diff["high"] == pytest.approx(max(expect), abs=1e-4)
    assert diff["verdict"] == "inconclusive" and diff["note"] == "too few pairs: 2 < 6"
    assert res["summary"]["uniform"]["heldout_micro_verdict"] in ("better", "worse", "inconclusive")
    assert "Δ macro domains vs random" in (out / "experiment" / "results.md").read_text()
    assert (out / "experiment" / "differences.png").stat().st_size > 1000
    again = run_experiment([corpus], out, quick_config(strategies=("random", "uniform"), split_seeds=(0, 1)))
    assert again["runs"] == res["runs"]


def test_quick_tune_command_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from clusterclip.cli import main as cli

    corpus, out = _toy(tmp_path), tmp_path / "tuned"
    assert cli.main(["tune", str(corpus), "--out", str(out), "--quick", "--quiet", "--jobs", "2"]) == 0
    printed = capsys.readouterr().out
    res = json.loads((out / "tune" / "results.json").read_text())
    assert cli.main(["tune", str(corpus), "--out", str(tmp_path / "one-job"), "--quick", "--quiet", "--no-plan"]) == 0
    assert _comparable(json.loads((tmp_path / "one-job" / "tune" / "results.json").read_text())) == _comparable(res)
    assert res["status"] == "complete" and res["objective"] == "heldout_macro_domain"
    assert set(res["candidates"]) == {"random", "uniform", "temperature-0.5", "clusterclip-R5",
                                      "clusterclip-spread-R5"}
    plan = res["plan"]
    assert (out / plan_path(plan["name"], PLAN_ORDER)).exists()
    assert plan["command"] in printed and f"Chosen: {res['winner']}" in printed
    assert len(list((out / "tune" / "runs").glob("*.json"))) == res["progress"]["trained"]
    assert cli.main(["report", str(out), "--quiet"]) == 0
    page = (out / "report" / "report.html").read_text()
    assert 'id="tune"' in page and "Search trajectory" in page and res["winner"] in page


# ------------------------------------------------------------------------------------- command line


def test_presets_and_split_seed_on_the_command_line() -> None:
    from clusterclip.cli.main import build_parser
    from clusterclip.cli.options import experiment_config
    from clusterclip.cli.tune import tune_configs

    parser = build_parser()
    assert experiment_config(parser.parse_args(["experiment", "--out", "o"])).splits() == (0, 1, 2)
    assert experiment_config(parser.parse_args(["experiment", "--out", "o", "--split-seed", "4"])).splits() == (4,)
    both = parser.parse_args(["experiment", "--out", "o", "--split-seed", "4", "--split-seeds", "5,6"])
    assert experiment_config(both).splits() == (5, 6)
    skewed = experiment_config(parser.parse_args(["experiment", "--out", "o", "--preset", "skewed", "--k", "100"]))
    assert (skewed.k, skewed.docs, skewed.max_repeats) == (100, 3000, (4, 6))
    cfg, tune = tune_configs(parser.parse_args(["tune", "--out", "o", "--quick", "--eta", "2"]))
    assert cfg.seeds == (0, 1) and cfg.embedder == "hashing" and tune.caps == (5,) and tune.eta == 2
    cfg, tune = tune_configs(parser.parse_args(["tune", "--out", "o", "--max-runs", "0", "--device", "cuda"]))
    assert tune.max_runs is None and cfg.device == "cuda"
    assert "no limit (default: 0)" in " ".join(parser._subparsers._group_actions[0].choices["tune"].format_help()
                                               .split())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--quick", "--caps", "2,6"], "--caps [2] must exceed --passes 3"),
        (["--orders", "backwards"], "--orders"),
        (["--device", "tpu"], "--device must be cpu, cuda or cuda:N"),
        (["--eta", "1"], "--eta must be an integer >= 2"),
        (["--max-runs", "-1"], "--max-runs must be an integer >= 1 (or 0 for no limit)"),
        (["--jobs", "0"], "--jobs must be an integer >= 1"),
        (["--seeds", "1,1"], "--seeds lists 1 more than once"),
        (["--split-seeds", "0,1", "--check-split-seeds", "1,5"], "--check-split-seeds [1] are split seeds the search "
                                                                  "trains on"),
        (["--tier-weight-grid", "0,1,1,2"], "--tier-weight-grid needs --strata"),
        (["--strata", "cluster,quality:4"], "--strata applies with --tier-weight-grid"),
        (["--strata", "cluster,quality:4", "--tier-weight-grid", "0,1,1,2;0,1"],
         "--tier-weight-grid '0,1': lists 2 values for quality:4; give one per tier (4)"),
        (["--strata", "cluster,quality:4", "--tier-weight-grid", "0,1,1,2;0, 1,1,2"],
         "--tier-weight-grid '0,1,1,2' and '0, 1,1,2' are the same weights"),
    ],
)
def test_tune_cli_errors_name_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                       message: str) -> None:
    from clusterclip.cli import main as cli

    corpus = _toy(tmp_path)
    assert cli.main(["tune", str(corpus), "--out", str(tmp_path / "o"), "--no-plan", "-q", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"clusterclip: error: {message}"), err
