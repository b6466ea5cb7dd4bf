"""``clusterclip tune --strata ... --tier-weight-grid ...``: stratified ClusterClip candidates, the fields their proxy
data keeps or scores, the stratified chosen plan and the experiment that checks it."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("tokenizers")

from clusterclip.cli import main as cli
from clusterclip.cli.main import build_parser
from clusterclip.cli.options import experiment_config
from clusterclip.cli.tune import tune_configs
from clusterclip.contract.corpus import CorpusRecord, load_fields
from clusterclip.contract.plan import PLAN_ORDER, plan_path
from clusterclip.experiment.config import quick_config
from clusterclip.experiment.tune.config import TuneConfig
from clusterclip.experiment.tune.search_stage import run_tune, tune_argv
from clusterclip.store import RunDir, load_npy
from tests.test_tune import FakeRunner

TIERS = ["--strata", "cluster,quality:4", "--tier-weight-grid", "1,1,1,1;0,1,1,2"]
NAMES = ("clusterclip-tiers-1-1-1-1-R5", "clusterclip-tiers-0-1-1-2-R5")


def _toy(tmp_path: Path) -> Path:
    from tests.test_experiment import _toy_corpus

    return _toy_corpus(tmp_path / "toy.jsonl")


def test_tune_trains_one_candidate_per_tier_weight_vector_on_scored_proxy_data(tmp_path: Path) -> None:
    corpus, out = _toy(tmp_path), tmp_path / "t"
    argv = ["tune", str(corpus), "--out", str(out), "--quick", "--seeds", "0", "--taus", "", "--orders", "", *TIERS,
            "--quality-scorer", "heuristic", "--no-plan", "-q"]
    assert cli.main(argv) == 0
    res = json.loads((out / "tune" / "results.json").read_text())
    assert set(res["candidates"]) == {"random", "uniform", *NAMES}
    for name in NAMES:
        spec = res["candidates"][name]["spec"]
        assert (spec["strata"], spec["max_repeat"], spec["quality_scorer"]) == ("cluster,quality:4", 5, "heuristic")
    assert res["progress"]["trained"] == 4 and res["progress"]["shared"] == 0  # two tier plans, neither random's
    source = RunDir(out / "tune" / "experiment" / "source")
    assert CorpusRecord.require(source).fields["quality"]["kind"] == "numeric"
    assert np.isfinite(np.asarray(load_fields(source, ["quality"])["quality"].values)).all()


def test_a_stratified_winner_is_planned_for_the_whole_corpus_and_checked_by_its_own_item(tmp_path: Path) -> None:
    corpus, out = _toy(tmp_path), tmp_path / "t"
    cfg = quick_config(split_seeds=(0, 1, 2), seeds=(0, 1, 2), quality_scorer="heuristic")
    tune = TuneConfig(taus=(), orders=(), caps=(5,), strata="cluster,quality:4", tier_weight_grid="1,1,1,1;0,1,1,2")
    res = run_tune([corpus], out, cfg, tune, runner=FakeRunner({NAMES[1]: (-0.2, 0.0)}))
    assert res["winner"] == NAMES[1]
    plan = res["plan"]
    assert plan["config"]["strata"] == "cluster,quality:4" and plan["config"]["tier_weights"].startswith("quality=")
    assert "--strata cluster,quality:4" in plan["command"] and "--tier-weights" in plan["command"]
    quality = np.asarray(load_fields(RunDir(out), ["quality"])["quality"].values)
    order = np.asarray(load_npy(out / plan_path(plan["name"], PLAN_ORDER)))
    lowest = quality < np.quantile(quality, 0.2)  # in tier 0 (of 4), at weight 0: never drawn
    assert order.size and not np.isin(np.flatnonzero(lowest), order).any()
    check = experiment_config(build_parser().parse_args(shlex.split(res["check_command"])[1:]))
    assert check.quality_scorer == "heuristic" and check.strategy_specs()[1] == res["candidates"][NAMES[1]]["spec"]
    again_cfg, again_tune = tune_configs(build_parser().parse_args(tune_argv([corpus], out, cfg, tune)[1:]))
    assert again_tune == tune and again_cfg.quality_scorer == "heuristic"


def test_a_field_the_input_lacks_is_refused_before_any_proxy_run(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    corpus, out = _toy(tmp_path), tmp_path / "t"
    argv = ["tune", str(corpus), "--out", str(out), "--quick", "--seeds", "0", "--taus", "", "--orders", "", *TIERS,
            "--no-plan", "-q"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "no training document has the field 'quality'" in err and "--quality-scorer heuristic" in err
    assert len(err.splitlines()) == 1 and not list((out / "tune" / "runs").glob("*.json"))
