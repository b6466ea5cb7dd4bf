"""``clusterclip tune --search weights``, one run per plan, ``--from-csv`` and the blend outputs.

Fake runners with known losses and real plans on synthetic splits (milliseconds per run).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")

from clusterclip.cli.main import build_parser, main
from clusterclip.cli.tune import tune_configs
from clusterclip.embed.config import EmbedConfig
from clusterclip.experiment.config import ExperimentConfig
from clusterclip.experiment.specs import plan_config
from clusterclip.experiment.tune.config import TuneConfig
from clusterclip.experiment.tune.groups import ClusterView, assign, cluster_weights, reference_groups
from clusterclip.experiment.tune.search_stage import run_tune
from clusterclip.mixture.blend import megatron_data_path, olmo_source_mixture, write_blend
from clusterclip.mixture.swarm import MixtureError, from_arrays, write_swarm
from clusterclip.plan import build_plan
from clusterclip.plan.quotas import feasible_weights
from clusterclip.settings import SettingsError

SIZES = np.array([300, 200, 100, 50, 30, 20])
TARGET = np.array([0.30, 0.25, 0.18, 0.12, 0.09, 0.06])


class PlanRunner:
    """Real plans on a synthetic split (6 clusters, 700 docs, budget 2 passes); losses known: a weight
    candidate's macro loss falls as its mixture nears ``TARGET``. Records every spec it trains."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, Any], int, int]] = []

    def identity(self) -> dict[str, Any]:
        return {"fake": "plan-runner"}

    def _split(self, split: int) -> tuple[np.ndarray, np.ndarray]:
        labels = np.repeat(np.arange(6), SIZES)
        tokens = np.random.default_rng(split).integers(5, 15, size=len(labels))
        return labels, tokens

    def cluster_view(self, split: int, space: int | None = None) -> ClusterView:
        labels, tokens = self._split(split)
        cent = np.eye(6) + np.random.default_rng([split, 7]).normal(0, 0.01, (6, 6))
        return ClusterView(cent, np.bincount(labels, weights=tokens, minlength=6), int(2 * tokens.sum()))

    def plan_identity(self, spec: dict[str, Any], split: int, seed: int) -> str:
        labels, tokens = self._split(split)
        cfg = plan_config(spec, int(2 * tokens.sum()), seed)
        return str(build_plan(labels, cfg, tokens=tokens, n_clusters=6).identity)

    def __call__(self, spec: dict[str, Any], split: int, seed: int) -> dict[str, Any]:
        self.calls.append((spec, split, seed))
        pair = np.random.default_rng([split, seed]).normal(0, 0.1)
        own = np.random.default_rng([split, seed, zlib.crc32(spec["name"].encode())]).normal(0, 0.002)
        macro = 0.0
        if spec["strategy"] == "weights":
            w = np.array([x for _, x in spec["weights"]])
            macro = 2.0 * float(((w / w.sum() - TARGET) ** 2).sum()) - 0.05
        return {"heldout_macro_cluster": 4.0 + pair + macro + own, "heldout_macro_domain": None,
                "heldout_micro": 3.8 + pair + own, "seconds": 0.0}


CFG = ExperimentConfig(split_seeds=(0, 1, 2), seeds=(0, 1), passes=2)
WEIGHTS = TuneConfig(search=("weights",), weights_cap=3, weight_rounds=3, weight_runs=4, weight_pairs=2,
                     weight_candidates=400, max_groups=6, predictor="loglinear")
"""A fitted predictor (not the default): the rounds it predicts are what most tests here check."""


def _tune(out: Path, runner: PlanRunner, tune: TuneConfig = WEIGHTS) -> dict[str, Any]:
    return run_tune([], out, CFG, tune, runner=runner, write_plan=False)


def test_feasible_weights_is_the_planners_exact_check() -> None:
    sizes, budget = np.array([100.0, 50.0, 10.0]), 240.0
    rows = np.array([sizes / sizes.sum(), [1, 1, 1], [0.55, 0.4, 0.05], [1, 0, 0], [0, 0, 0]])
    assert feasible_weights(rows, sizes, 2, budget).tolist() == [True, False, True, False, False]
    assert feasible_weights(rows[:2], sizes, None, budget).tolist() == [True, True]


def test_weight_search_rounds_are_feasible_predicted_and_find_a_better_mixture(tmp_path: Path) -> None:
    runner = PlanRunner()
    res = _tune(tmp_path / "a", runner)
    ws = res["weight_search"]
    assert [r["round"] for r in ws["rounds"]] == [0, 1, 2]
    assert all(c["predicted"] is None for c in ws["rounds"][0]["candidates"])
    assert all(c["predicted"] is not None for r in ws["rounds"][1:] for c in r["candidates"])
    for spec, split, _ in runner.calls:  # no infeasible mixture ever reached the runner
        if spec["strategy"] == "weights":
            view = runner.cluster_view(split)
            w = np.array([[x for _, x in spec["weights"]]])
            assert feasible_weights(w, view.tokens, 3, view.budget)[0]
    assert res["winner"].startswith("weights-") and res["candidates"][res["winner"]]["status"] == "chosen"
    measured = [np.array(c["group_weights"]) for c in ws["rounds"][0]["candidates"]]
    for r in ws["rounds"][1:]:  # every predicted mixture lies in the trust region around the mixtures measured before
        for c in r["candidates"]:
            near = min(0.5 * np.abs(np.array(c["group_weights"]) - m).sum() for m in measured)
            assert near <= c["trust_radius"] + 1e-4 and c["pulled"] == (c["distance"] > c["trust_radius"])
            assert isinstance(c["flags"], list)
        measured += [np.array(c["group_weights"]) for c in r["candidates"]]
    chosen = np.array(res["candidates"][res["winner"]]["spec"]["group_weights"])
    natural = np.array(ws["space"]["natural"])
    assert np.abs(chosen - TARGET).sum() < np.abs(natural - TARGET).sum()


def test_weight_search_is_deterministic_and_resumes_from_its_records(tmp_path: Path) -> None:
    a, b = _tune(tmp_path / "a", PlanRunner()), _tune(tmp_path / "b", PlanRunner())
    assert a["weight_search"]["rounds"] == b["weight_search"]["rounds"] and a["winner"] == b["winner"]
    again = PlanRunner()
    c = _tune(tmp_path / "a", again)
    assert again.calls == [] and c["winner"] == a["winner"]


def test_weights_and_grid_together_compare_the_finalists(tmp_path: Path) -> None:
    tune = TuneConfig(search=("grid", "weights"), taus=(0.5,), caps=(3,), orders=("equal-rate",), weights_cap=3,
                      weight_rounds=2, weight_runs=3, weight_pairs=1, weight_candidates=200, max_groups=6,
                      check_split_seeds=(9,))
    res = _tune(tmp_path, PlanRunner(), tune)
    assert "uniform" in res["candidates"] and any(n.startswith("weights-") for n in res["candidates"])
    assert res["weight_search"]["versus_grid"]["pairs"] == 6
    assert res["unseen"]["split_seeds"] == [9]


def test_identical_plans_are_trained_once_and_share_their_run(tmp_path: Path) -> None:
    runner = PlanRunner()
    tune = TuneConfig(taus=(0.0,), caps=(100000,), orders=("equal-rate",), eta=2)
    res = _tune(tmp_path, runner, tune)
    pairs = {(split, seed) for _, split, seed in runner.calls}
    trained = [(s["name"], split, seed) for s, split, seed in runner.calls]
    same = {"uniform", "clusterclip-R100000"}
    for pair in pairs:
        assert len([n for n, *p in trained if n in same and tuple(p) == pair]) <= 1
    assert res["progress"]["shared"] > 0


def test_groups_merge_clusters_and_map_other_splits() -> None:
    rng = np.random.default_rng(0)
    cent = np.repeat(np.eye(3), 4, axis=0) + rng.normal(0, 0.01, (12, 3))
    view = ClusterView(cent, np.full(12, 10.0), 240)
    groups = reference_groups(view, 3)
    of = assign(view, groups)
    assert len(groups) == 3 and sorted(np.bincount(of).tolist()) == [4, 4, 4]
    w = cluster_weights(np.array([[0.5, 0.25, 0.25]]), view, of)
    assert w.sum() == pytest.approx(1.0) and len(set(np.round(w[0][of == of[0]], 9))) == 1


def test_by_default_every_round_draws_afresh_from_round_0s_distribution(tmp_path: Path) -> None:
    """The default ``--predictor none``, the baseline the ablation found as good as a fitted predictor: the same
    round 0, then fresh draws (nothing fitted, no trust region), judged by the same finals."""
    fitted = _tune(tmp_path / "fit", PlanRunner())["weight_search"]["rounds"]
    args = build_parser().parse_args(["tune", "--out", str(tmp_path / "x"), "--search", "weights"])
    default = dataclasses.replace(WEIGHTS, predictor=tune_configs(args)[1].predictor)
    drawn = _tune(tmp_path / "none", PlanRunner(), default)
    rounds = drawn["weight_search"]["rounds"]
    assert [c["group_weights"] for c in rounds[0]["candidates"]] == [c["group_weights"] for c in
                                                                      fitted[0]["candidates"]]
    assert all(set(c) == {"name", "group_weights", "measured", "predicted"} and c["predicted"] is None
               for r in rounds for c in r["candidates"])
    names = [c["name"] for r in rounds for c in r["candidates"]]
    assert len(set(names)) == len(names) == 3 * 4 and drawn["weight_search"]["final"]
    commands = {d: " ".join(json.loads((tmp_path / d / "tune" / "search.json").read_text())["command"])
                for d in ("fit", "none")}
    assert "--predictor loglinear" in commands["fit"] and "--predictor" not in commands["none"]


def test_from_csv_fits_its_own_predictor_and_refuses_the_weight_searchs(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """``--from-csv`` fits ``--swarm-predictor`` (loglinear unless given, never none); ``--predictor`` is the
    weight search's and is refused there with one line naming the option to use."""
    swarm = from_arrays(np.eye(3)[[0, 1, 2, 0]] * 0.5 + 0.5 / 3, np.arange(4.0), ["a", "b", "c"])
    write_swarm(tmp_path / "swarm.csv", swarm)
    base = ["tune", "--out", str(tmp_path / "o"), "--from-csv", str(tmp_path / "swarm.csv")]
    for given in ("none", "linear"):
        assert main([*base, "--predictor", given]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--from-csv fits --swarm-predictor (loglinear, linear, lightgbm)" in err
    with pytest.raises(SystemExit):
        main([*base, "--swarm-predictor", "none"])
    assert "--swarm-predictor: invalid choice: 'none'" in capsys.readouterr().err
    assert main(base) == 0 and "(loglinear fitted on 4 " in capsys.readouterr().out
    assert main([*base, "--swarm-predictor", "linear"]) == 0 and "(linear fitted on 4 " in capsys.readouterr().out


def test_from_csv_proposes_and_writes_a_weights_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(0)
    w = rng.dirichlet(np.ones(4), size=40)
    y = 3.0 + np.exp(1.5 * w[:, 0] - 2.0 * w[:, 2]) + rng.normal(0, 0.01, 40)
    swarm = from_arrays(w, y, ["0", "1", "2", "3"], objective_name="loss")
    write_swarm(tmp_path / "swarm.csv", swarm)
    assert main(["tune", "--out", str(tmp_path / "o"), "--from-csv", str(tmp_path / "swarm.csv")]) == 0
    out = capsys.readouterr().out
    assert "Predicted loss" in out and "Trust region: within" in out
    saved = json.loads((tmp_path / "o" / "tune" / "proposed_weights.json").read_text())
    assert list(saved) == ["0", "1", "2", "3"] and sum(saved.values()) == pytest.approx(1.0)
    assert saved["2"] > saved["0"]


def test_from_csv_says_when_it_extrapolates_and_refuses_a_swarm_that_never_varies(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The printed proposal names the trust region and warns of an extrapolation; a swarm whose weights never vary
    is one line on stderr and exit status 2."""
    rng = np.random.default_rng(3)
    w = rng.dirichlet(np.ones(4), size=60)
    w[:, 3] = rng.uniform(0, 0.05, 60)  # d never above 5 %, and the loss falls with it
    w[:, :3] *= (1 - w[:, 3:4]) / w[:, :3].sum(axis=1, keepdims=True)
    swarm = from_arrays(w, 4.0 - 3.0 * w[:, 3], ["a", "b", "c", "d"], objective_name="loss")
    write_swarm(tmp_path / "swarm.csv", swarm)
    assert main(["tune", "--out", str(tmp_path / "o"), "--from-csv", str(tmp_path / "swarm.csv"),
                 "--swarm-predictor", "linear"]) == 0
    out = capsys.readouterr().out
    assert "Trust region: within 0.050 (total variation) of a measured run; this mixture is pulled back from" in out
    assert "WARNING: extrapolation: outside the hull of the 60 measured mixtures" in out
    assert "WARNING: extrapolation: predicted" in out and "below every measured objective" in out
    saved = json.loads((tmp_path / "o" / "tune" / "proposed_weights.json").read_text())
    assert saved["d"] <= 0.05 + 0.05 + 1e-6
    write_swarm(tmp_path / "const.csv", from_arrays(np.tile([0.5, 0.5], (4, 1)), np.arange(4.0), ["a", "b"]))
    assert main(["tune", "--out", str(tmp_path / "c"), "--from-csv", str(tmp_path / "const.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("clusterclip: error: the swarm's 4 runs all have the same mixture")


REGMIX = Path(__file__).resolve().parents[2] / "shared" / "data" / "regmix"


@pytest.mark.skipif(not (REGMIX / "train_mixture_1m.csv").exists(), reason="no RegMix swarm here")
def test_from_csv_reads_the_regmix_pair(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", "--out", str(tmp_path), "--from-csv", str(REGMIX / "train_mixture_1m.csv"),
                 "--loss-csv", str(REGMIX / "train_pile_loss_1m.csv")]) == 0
    saved = json.loads((tmp_path / "tune" / "proposed_weights.json").read_text())
    assert "train_the_pile_pile_cc" in saved and "pile_cc" in capsys.readouterr().out.lower()


def test_blend_outputs(tmp_path: Path) -> None:
    weights = {"0": 3.0, "1": 1.0, "2": 0.0}
    prefixes = {"0": "/d/c0_text_document", "1": "/d/c1_text_document", "2": "/d/c2_text_document"}
    assert megatron_data_path(weights, prefixes) == "0.75 /d/c0_text_document\n0.25 /d/c1_text_document\n"
    cfg = olmo_source_mixture(weights, {k: [v + ".npy"] for k, v in prefixes.items()}, max_repetition=4,
                              max_tokens=1000, sequence_length=512, seed=3)
    assert [s["source_name"] for s in cfg["source_configs"]] == ["0", "1"]
    assert cfg["source_configs"][0] == {"source_name": "0", "target_ratio": 0.75, "paths": ["/d/c0_text_document.npy"],
                                        "max_source_fraction": 1.0, "max_repetition_ratio": 4.0}
    assert (cfg["max_tokens"], cfg["sequence_length"], cfg["seed"]) == (1000, 512, 3)
    listed = olmo_source_mixture(weights, {k: [v] for k, v in prefixes.items()}, max_repetition={"0": 2, "1": 1.5},
                                 max_tokens=1000, seed=3, layout="source_list")
    assert (listed["requested_tokens"], listed["seed"]) == (1000, 3) and "source_configs" not in listed
    assert [s["max_repetition_ratio"] for s in listed["source_list"]["sources"]] == [2.0, 1.5]
    with pytest.raises(MixtureError, match="sequence_length is no field"):
        olmo_source_mixture(weights, prefixes, sequence_length=8, layout="source_list")
    files = write_blend(tmp_path, weights, prefixes)
    assert json.loads(files["olmo"].read_text())["source_configs"][1]["target_ratio"] == 0.25
    with pytest.raises(MixtureError):
        megatron_data_path({"0": 1.0, "9": 1.0}, prefixes)
    with pytest.raises(MixtureError):
        megatron_data_path({"0": 0.0}, prefixes)


def test_report_shows_the_weight_search(tmp_path: Path) -> None:
    from clusterclip.contract.tune_results import TuneResults
    from clusterclip.experiment.tune.format import format_summary
    from clusterclip.report.tune import tune_section

    tune = TuneConfig(search=("grid", "weights"), taus=(0.5,), caps=(3,), orders=("equal-rate",), weights_cap=3,
                      weight_rounds=2, weight_runs=3, weight_pairs=1, weight_candidates=200, max_groups=6)
    res = _tune(tmp_path, PlanRunner(), tune)
    page = tune_section(TuneResults.from_json(res))
    assert "Weight search" in page and 'id="tune-weight-rounds"' in page and 'id="tune-weights"' in page
    assert "natural" in page and "uniform" in page and 'id="tune-vs-grid"' in page
    assert re.search(r"Weight search: 2 rounds, \d+ mixtures over 6 groups", format_summary(res))


def test_chosen_weights_become_an_ordinary_weights_plan_with_its_file(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from clusterclip.experiment.config import quick_config
    from clusterclip.plan import stage
    from clusterclip.plan.config import PlanConfigError

    original = stage.plan_argv

    def plan_argv(config: Any, continues: Any = None) -> list[str]:
        try:
            return original(config, continues)
        except PlanConfigError:  # plan_argv's default PlanConfig(strategy='weights') has no weights (plan/stage.py)
            return ["clusterclip", "plan", stage.RUN, "--strategy", "weights", "--weights", "WEIGHTS_FILE"]

    monkeypatch.setattr(stage, "plan_argv", plan_argv)
    from clusterclip.contract.cluster import CENTROIDS
    from clusterclip.contract.experiment import TUNE_DIR
    from clusterclip.experiment.tune.chosen_plan import write_chosen_plan
    from clusterclip.experiment.tune.weights import weight_spec
    from clusterclip.store import load_npy
    from tests.test_experiment import _toy_corpus

    corpus, out = _toy_corpus(tmp_path / "toy.jsonl"), tmp_path / "run"
    cfg = quick_config()
    write_chosen_plan([corpus], out, cfg, {"name": "random", "strategy": "random"}, 0)
    cent = np.asarray(load_npy(out / CENTROIDS))
    groups = cent[:3]
    spec = weight_spec(np.array([0.5, 0.3, 0.2]), int(cfg.passes) + 2, 3)
    # the reference split whose embedding space the groups live in: here a copy of the whole run
    shutil.copytree(out, out / TUNE_DIR / "splits" / "0", ignore=shutil.ignore_patterns("tune"))
    space = {"group_centroids": groups.tolist(), "reference_split": 0}
    plan = write_chosen_plan([corpus], out, cfg, spec, 0, weight_search={"space": space})
    saved = json.loads(Path(plan["weights_file"]).read_text())
    assert len(saved) == len(cent) and sum(saved.values()) == pytest.approx(1.0)
    assert plan["config"]["strategy"] == "weights" and f"--weights {plan['weights_file']}" in plan["command"]


def test_parallel_jobs_make_the_same_weight_search(tmp_path: Path) -> None:
    one = _tune(tmp_path / "one", PlanRunner())
    two = _tune(tmp_path / "two", PlanRunner(), dataclasses.replace(WEIGHTS, jobs=2))
    assert one["weight_search"]["rounds"] == two["weight_search"]["rounds"] and one["winner"] == two["winner"]


def test_weight_options_are_checked() -> None:
    with pytest.raises(SettingsError, match=r"weights.cap"):
        TuneConfig(search=("weights",), weights_cap=2).weight_cap(CFG)
    with pytest.raises(SettingsError):
        TuneConfig(search=("weights", "nope"))
    assert TuneConfig(search=("weights",)).grid(CFG) == [{"name": "random", "strategy": "random"}]


def test_run_budget_stops_the_weight_search_and_it_still_decides(tmp_path: Path) -> None:
    runner = PlanRunner()
    res = _tune(tmp_path, runner, dataclasses.replace(WEIGHTS, max_runs=4))
    assert res["status"].startswith("stopped: max-runs 4") and len(runner.calls) == 4
    assert len(res["weight_search"]["rounds"]) == 1 and res["winner"]


def test_finals_stopped_by_the_budget_are_judged_on_the_pairs_all_of_them_finished(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """26 runs make the rounds; 5 more give the 4 finalists and random a third pair, 2 more start a fourth that
    not all finish: every finalist is judged on the same 3 pairs (not on the rounds' 2), and 3 < 6 pairs give
    no verdict. (The budget would shrink this search to fit its 33 runs; here it is kept as asked, as when runs
    take longer than the first one did and the time runs out in the finals.)"""
    from clusterclip.experiment.tune import pace, search_stage, weights

    monkeypatch.setattr(search_stage, "plan_budget", lambda s: {"message": "budget: kept as asked"})
    for module in (pace, weights):  # and no cut while it runs
        monkeypatch.setattr(module, "fits", lambda s, phases: True)
    res = _tune(tmp_path, PlanRunner(), dataclasses.replace(WEIGHTS, max_runs=33))
    final = res["weight_search"]["final"]
    assert res["status"] == "stopped: max-runs 33 reached" and len(final) == 4
    assert {a["pairs"] for a in final.values()} == {3} and res["winner"] == "random"
    assert all(a["objective"]["note"] == "too few pairs: 3 < 6" for a in final.values())


def test_groups_carry_over_splits_whose_embedders_were_fitted_apart(tmp_path: Path) -> None:
    """Each split fits its own ``lsa``, so raw centroids of two splits live in different coordinates; the
    split's documents embedded by the reference split's embedder put its clusters (here: the true topics,
    plus one empty cluster) next to the reference's same topics."""
    pytest.importorskip("sklearn")
    from clusterclip.contract.embed import load_embeddings
    from clusterclip.embed.stage import embed_stage
    from clusterclip.experiment.tune.runners import centroids_in
    from tests.test_embed import _make_run
    from tests.test_lsa import topic_texts

    runs, labels = [], []
    for seed in (0, 1):
        texts, lab = topic_texts(160, seed=seed)
        run = _make_run(tmp_path / f"split{seed}", texts)
        embed_stage(run, EmbedConfig(embedder="lsa", shard_size=50, extra={'dim': 8, 'sample_size': 160,
                                     'min_df': 1, 'max_df': 0.9, 'seed': seed}), progress=False)
        runs.append(run)
        labels.append(lab)
    x = load_embeddings(runs[0])
    ref = np.stack([x[labels[0] == t].mean(axis=0) for t in range(4)])
    moved = centroids_in(runs[0], runs[1], labels[1], k=5)
    assert np.allclose(np.linalg.norm(moved[:4], axis=1), 1.0) and not moved[4].any()
    assert assign(ClusterView(moved[:4], np.ones(4), 1), ref).tolist() == [0, 1, 2, 3]


class Reversed(PlanRunner):
    """Splits whose clusters meet the reference's groups in reverse: the reference's largest group is another
    split's smallest cluster, so the reference's natural mixture needs up to 300/20 x passes repeats there."""

    def cluster_view(self, split: int, space: int | None = None) -> ClusterView:
        view = super().cluster_view(split, space)
        return view if split == 0 else dataclasses.replace(view, centroids=view.centroids[::-1].copy())


def test_groups_that_do_not_fit_every_split_are_merged_until_round_0_trains(tmp_path: Path) -> None:
    """Groups formed on the reference split are infeasible on the others at the asked cap: before, no mixture
    was feasible, round 0 trained nothing and random was chosen. Now the groups are merged until the natural
    mixture fits every split, round 0 trains its candidates, and the results and the summary say what changed."""
    from clusterclip.experiment.tune import groups as G
    from clusterclip.experiment.tune.format import format_summary

    runner = Reversed()
    views = {s: runner.cluster_view(s, 0) for s in (0, 1, 2)}
    of = {s: assign(v, reference_groups(views[0], 6)) for s, v in views.items()}
    natural0 = G.natural(views[0], of[0], 6)
    assert not G.feasibility(views, of, 3)(natural0[None, :])[0]  # the reference's groups do not fit split 1
    res = _tune(tmp_path / "a", runner)
    ws, space = res["weight_search"], res["weight_search"]["space"]
    assert (space["groups_asked"], space["max_repeat_asked"], space["max_repeat"]) == (6, 3, 3)
    assert 2 <= space["groups"] < 6 and "stopped" not in ws
    assert space["changes"][0].startswith("the natural mixture is the mean of the 3 splits' group shares: the "
                                          "reference split 0's own shares need ")
    assert any(c.startswith("merged group") and "repeats there (cap 3)" in c for c in space["changes"])
    assert space["changes"][-1] == f"6 groups became {space['groups']}"
    round0 = ws["rounds"][0]["candidates"]
    assert len(round0) == WEIGHTS.weight_runs and all(c["measured"] is not None for c in round0)
    for spec, split, _ in runner.calls:  # every mixture trained fits its split under the cap
        if spec["strategy"] == "weights":
            view = runner.cluster_view(split)
            assert feasible_weights(np.array([[x for _, x in spec["weights"]]]), view.tokens, 3, view.budget)[0]
    assert "Weight search groups: 6 groups and max_repeat 3 asked; the natural mixture did not fit every split, " \
           "so: the natural mixture is the mean" in format_summary(res)


def test_the_cap_is_raised_when_two_groups_still_do_not_fit() -> None:
    """Two clusters, half the tokens each on the reference, 90/10 on the other split: at two groups nothing is
    left to merge, so the cap rises to the smallest that fits (the mean natural weight 0.3 of a group holding
    10 % of split 1's tokens needs 2 passes x 0.3 / 0.1 = 6 repeats there), and the changes say so, starting with
    the natural mixture itself (the reference's own 50/50 would need 10 repeats on split 1)."""
    from clusterclip.experiment.tune.groups import feasibility, feasible_grouping

    cent = np.eye(2)
    views = {0: ClusterView(cent, np.array([50.0, 50.0]), 200), 1: ClusterView(cent, np.array([90.0, 10.0]), 200)}
    g = feasible_grouping(views, 0, 8, 3)
    assert g.cap == 6 and len(g.groups) == 2 and g.natural.tolist() == pytest.approx([0.7, 0.3])
    assert g.changes == ("the natural mixture is the mean of the 2 splits' group shares: the reference split 0's own "
                         "shares need 10.0 repeats of group 1 on split 1 (cap 3)",
                         "raised max_repeat from 3 to 6: with 2 groups the natural mixture needs 6.0 repeats on "
                         "some split")
    assert feasibility(views, g.of, 6)(g.natural[None, :])[0] and not feasibility(views, g.of, 5)(g.natural[None, :])[0]
    assert feasible_grouping(views, 0, 8, 6).cap == 6 and feasible_grouping(views, 0, 8, 10).changes == ()


def test_the_training_runner_shares_runs_of_one_plan() -> None:
    """``plan_identity`` (two candidates with one plan train once) is a method of the real runner, not only of
    the fakes: the search looks it up with ``getattr`` and silently trains twice without it."""
    from clusterclip.experiment.tune.runners import TrainingRunner

    assert callable(getattr(TrainingRunner, "plan_identity", None))
    assert callable(getattr(TrainingRunner, "cluster_view", None))
