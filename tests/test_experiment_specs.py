"""``--strategies`` as a grammar: planner strategies with plan options, ``weights:FILE`` and ``plan:PATH`` trained
by the experiment, and the command ``tune`` prints to check its choice on unseen splits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("tokenizers")

from clusterclip.cli.main import build_parser
from clusterclip.cli.options import experiment_config
from clusterclip.contract.cluster import CENTROIDS, LABELS
from clusterclip.contract.corpus import read_column
from clusterclip.errors import ClusterClipError
from clusterclip.experiment.config import ExperimentConfig, quick_config
from clusterclip.experiment.data import encode_docs, load_tokenizer
from clusterclip.experiment.proxy_runs import run_experiment
from clusterclip.experiment.spec_grammar import item_of, join_items
from clusterclip.experiment.specs import plan_config
from clusterclip.plan import strategies as registry
from clusterclip.plan.build import build_plan
from clusterclip.plan.config import PlanConfig
from clusterclip.plan.weights_file import load_weights
from clusterclip.settings import SettingsError
from clusterclip.store import RunDir, load_npy
from tests.test_experiment import _toy_corpus


def _specs(text: str, **kw: Any) -> list[dict[str, Any]]:
    return ExperimentConfig(strategies=join_items(text), **kw).strategy_specs()


def test_the_experiments_names_keep_their_specs_and_options_make_one_spec() -> None:
    old = ExperimentConfig(strategies=("random", "uniform", "temperature", "clusterclip", "clusterclip-spread"))
    assert [s["name"] for s in old.strategy_specs()] == ["random", "uniform", "temperature-0.5", "clusterclip-R9",
                                                         "clusterclip-R12", "clusterclip-spread-R9",
                                                         "clusterclip-spread-R12"]
    assert old.strategy_specs()[3] == {"name": "clusterclip-R9", "strategy": "clusterclip", "max_repeat": 9,
                                       "order": "equal-rate", "shuffle": False}
    one = _specs("random,clusterclip:max_repeat=15,order=spread,temperature:tau=0.3")
    assert [s["name"] for s in one] == ["random", "clusterclip-spread-R15", "temperature-0.3"]
    assert one[1] == old.strategy_specs()[5] | {"name": "clusterclip-spread-R15", "max_repeat": 15}
    sweep = _specs("clusterclip:order=spread")  # no max_repeat: the caps of --max-repeats, as the bare name
    assert [s["name"] for s in sweep] == ["clusterclip-spread-R9", "clusterclip-spread-R12"]


@pytest.mark.parametrize(("text", "message"), [
    ("clusterclip:max_repeat=5", "max_repeat 5 must exceed passes 6"),
    ("weights", "weights must be given"),
    ("clusterclip:bogus=1", "unknown option 'bogus'"),
    ("clusterclip:max_repeat=x", "max_repeat='x' is not an integer"),
    ("order=spread", "an option before any strategy"),
    ("random:tau=3", "tau does not apply to strategy 'random'"),
    ("random:order=spread", "order 'spread' applies to the cluster strategies"),
    ("temperature:0.3", "'0.3' is not KEY=VALUE (temperature takes no positional option)"),
    ("online:gradient,max_repeat=9", "online strategies are"),
    ("plan", "plan needs the plan"),
    ("nonsense", "unknown strategy 'nonsense'; choose from clusterclip, uniform, random, temperature, weights"),
    ("weights:w.json,name=a/b", "must be non-empty, without '/'"),
])
def test_a_bad_item_is_one_line_naming_it(text: str, message: str) -> None:
    with pytest.raises(SettingsError, match="strategies") as err:
        ExperimentConfig(strategies=join_items(text))
    assert message in str(err.value) and repr(text.split(",")[0])[:-1] in str(err.value)


def test_a_strategy_registered_later_is_a_strategy_of_the_experiment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The grammar reads the planner's registry and PlanConfig's settings, not a list of its own: a strategy
    added to the planner is trained with its plan options at once (the lead's stratified plans will be)."""

    class Inverse(registry.Temperature):
        name = "inverse"
        SUMMARY = "cluster weights n_c**-tau"

        @classmethod
        def weights(cls, sizes: np.ndarray, options: Any) -> np.ndarray:
            return super().weights(sizes, type("O", (), {"tau": -float(options.tau)})())

    monkeypatch.setitem(registry.STRATEGIES, Inverse.name, Inverse)
    [spec] = _specs("inverse:tau=2")
    assert spec["strategy"] == "inverse" and spec["tau"] == 2.0 and spec["name"].startswith("inverse-")
    assert plan_config(spec, 100, 0) == PlanConfig(strategy="inverse", tau=2.0, budget=100, budget_unit="tokens")
    assert _specs("inverse")[0]["tau"] == 0.5  # an option not given is the experiment's (--tau)


def test_the_command_line_reads_an_item_with_its_options_and_writes_it_back() -> None:
    from clusterclip.experiment.commands import experiment_argv

    args = build_parser().parse_args(["experiment", "--out", "o", "--strategies",
                                      "random,clusterclip:max_repeat=15,order=spread,weights:w.json,max_repeat=9"])
    cfg = experiment_config(args)
    assert cfg.strategies == ("random", "clusterclip:max_repeat=15,order=spread", "weights:w.json,max_repeat=9")
    argv = experiment_argv([], "o", cfg)
    again = experiment_config(build_parser().parse_args(argv[1:]))
    assert again.strategies == cfg.strategies


# ------------------------------------------------------------------------- trained by the experiment


def _split_plan(out: Path, labels: np.ndarray, k: int, pc: dict[str, Any], res: dict[str, Any]) -> str:
    """The identity of the plan of ``pc`` built here, over ``labels`` of the first split's training documents with
    its BPE token counts and budget: what the experiment must have trained on."""
    texts = read_column(RunDir(out), "text")
    lengths = encode_docs(load_tokenizer(out / "experiment" / "tokenizer.json"), texts).lengths
    cfg = PlanConfig(**pc, budget=res["data"]["budget_tokens"], budget_unit="tokens", seed=0)
    return str(build_plan(labels, cfg, tokens=lengths, n_clusters=k).identity)


def test_a_chosen_mixture_trained_by_the_experiment_is_its_plan(tmp_path: Path) -> None:
    """``tune``'s chosen weights plan of the whole corpus, given to the experiment as ``plan:PATH``: every training
    document keeps its cluster of the whole corpus (by id), and the split's plan is the chosen plan's weights and
    cap over those clusters for the split's budget, so its batches are that plan's (same order, same identity)."""
    import shutil

    from clusterclip.contract.experiment import TUNE_DIR
    from clusterclip.experiment.tune.chosen_plan import write_chosen_plan
    from clusterclip.experiment.tune.weights import weight_spec

    corpus, run = _toy_corpus(tmp_path / "toy.jsonl"), tmp_path / "tuned"
    cfg = quick_config()
    write_chosen_plan([corpus], run, cfg, {"name": "random", "strategy": "random"}, 0)
    shutil.copytree(run, run / TUNE_DIR / "splits" / "0", ignore=shutil.ignore_patterns("tune"))
    space = {"group_centroids": np.asarray(load_npy(run / CENTROIDS))[:3].tolist(), "reference_split": 0}
    chosen = write_chosen_plan([corpus], run, cfg, weight_spec(np.array([0.6, 0.3, 0.1]), 6, 3), 0,
                               weight_search={"space": space})
    out = tmp_path / "check"
    res = run_experiment([corpus], out, quick_config(strategies=("random", f"plan:{run / 'plans' / chosen['name']}")))
    [key] = [k for k in res["runs"] if k.startswith("plan-weights-")]
    trained = res["runs"][key]
    weights = load_weights(chosen["weights_file"])
    assert trained["plan"]["weights"] == [[c, w] for c, w in weights] and trained["plan"]["max_repeat"] == 6
    ids = read_column(RunDir(out), "id")
    whole = dict(zip(read_column(RunDir(run), "id"), np.asarray(load_npy(run / LABELS)).tolist(), strict=True))
    labels = np.array([whole[i] for i in ids])
    k = len(load_npy(run / CENTROIDS))
    pc = {"strategy": "weights", "weights": weights, "max_repeat": 6}
    assert trained["plan_identity"] == _split_plan(out, labels, k, pc, res)
    own = np.asarray(load_npy(out / LABELS))  # the split's own clusters would give another plan
    assert trained["plan_identity"] != _split_plan(out, own, int(own.max()) + 1, pc, res)
    again = run_experiment([corpus], out, quick_config(strategies=("random", f"plan:{run / 'plans' / chosen['name']}")))
    assert again["runs"] == res["runs"]


def test_a_weights_file_is_planned_over_the_splits_clusters_and_a_changed_file_is_retrained(tmp_path: Path) -> None:
    corpus, out, wfile = _toy_corpus(tmp_path / "toy.jsonl"), tmp_path / "run", tmp_path / "w.json"
    wfile.write_text(json.dumps({"0": 4.0, "1": 1.0, "2": 1.0}))
    cfg = quick_config(strategies=("random", f"weights:{wfile},max_repeat=6,name=mine"))
    res = run_experiment([corpus], out, cfg)
    labels = np.asarray(load_npy(out / LABELS))
    pc = {"strategy": "weights", "weights": load_weights(wfile), "max_repeat": 6}
    assert res["runs"]["mine/0"]["plan_identity"] == _split_plan(out, labels, res["data"]["k"], pc, res)
    wfile.write_text(json.dumps({"0": 1.0, "1": 4.0, "2": 1.0}))  # same name, other weights: not the finished run
    changed = run_experiment([corpus], out, cfg)
    assert changed["runs"]["mine/0"]["plan_identity"] != res["runs"]["mine/0"]["plan_identity"]
    assert changed["runs"]["random/0"] == res["runs"]["random/0"]


def test_a_grid_candidate_is_an_item_that_trains_the_same_spec() -> None:
    from clusterclip.experiment.tune.config import TuneConfig

    for spec in TuneConfig().grid(ExperimentConfig()):
        [again] = _specs(item_of(spec) or "")
        assert again == spec
    tiers = TuneConfig(strata="cluster,quality:4", tier_weight_grid="1,1,1,1;0,1,1,2")
    stratified = [s for s in tiers.grid(ExperimentConfig(quality_scorer="heuristic")) if "strata" in s]
    assert [s["name"] for s in stratified] == [f"clusterclip-tiers-{w}-R{c}" for w in ("1-1-1-1", "0-1-1-2")
                                               for c in (9, 12, 18)]
    for spec in stratified:
        [again] = _specs(item_of(spec) or "", quality_scorer="heuristic")
        assert again == spec and spec["quality_scorer"] == "heuristic"


# ------------------------------------------------------------------------------- stratified plans


def test_a_value_with_commas_goes_in_brackets_and_is_written_back_in_them() -> None:
    """The planner's strata settings hold commas (``--strata cluster,quality:4``): a bracketed value is one option,
    on the command line and in ``item_of``, and its plan options are PlanConfig's own."""
    text = "random,clusterclip:strata=[cluster,quality:4],tier_weights=[0,1,1,2],max_repeat=9,uniform"
    items = join_items(text)
    assert items == ("random", "clusterclip:strata=[cluster,quality:4],tier_weights=[0,1,1,2],max_repeat=9",
                     "uniform")
    [spec] = ExperimentConfig(strategies=items[1:2]).strategy_specs()
    assert spec["strata"] == "cluster,quality:4" and spec["tier_weights"] == "0,1,1,2" and spec["max_repeat"] == 9
    assert spec["name"].startswith("clusterclip-") and spec["name"] != "clusterclip-R9"
    assert _specs(item_of(spec) or "") == [spec]
    assert ExperimentConfig(strategies=items).input_fields() == ("quality",)


@pytest.mark.parametrize(("text", "message"), [
    ("clusterclip:strata=cluster,quality:4", "'quality:4' is not KEY=VALUE; a value with commas goes in brackets"),
    ("clusterclip:strata=[cluster,quality:4", "a '[' is not closed"),
    ("clusterclip:tier_weights=[0,1]", "tier_weights needs strata"),
    ("clusterclip:strata=[cluster,quality:1]", "the tiers of a numeric field are an integer in 2..1000"),
])
def test_a_bad_strata_item_is_one_line_naming_it(text: str, message: str) -> None:
    with pytest.raises(SettingsError, match="strategies") as err:
        ExperimentConfig(strategies=(text,))
    assert message in str(err.value) and len(str(err.value).splitlines()) == 1


def test_a_stratified_plan_trained_by_the_experiment_is_its_plan_over_the_inputs_scores(tmp_path: Path) -> None:
    """``clusterclip:strata=[cluster,quality:4],tier_weights=[0,1,1,2]`` with ``--quality-scorer heuristic``: the
    input's documents are scored, each training document keeps its score (by id), and the split's plan is the
    stratified plan of those scores over the split's clusters (same order), not the plain ClusterClip's."""
    from clusterclip.contract.corpus import load_fields

    corpus, out = _toy_corpus(tmp_path / "toy.jsonl"), tmp_path / "run"
    item = "clusterclip:strata=[cluster,quality:4],tier_weights=[0,1,1,2],max_repeat=5,name=tiers"
    cfg = quick_config(strategies=("random", item), quality_scorer="heuristic")
    res = run_experiment([corpus], out, cfg)
    source = RunDir(out / "experiment" / "source")
    score = dict(zip(read_column(source, "id"), np.asarray(load_fields(source, ["quality"])["quality"].values)
                     .tolist(), strict=True))
    quality = np.array([score[i] for i in read_column(RunDir(out), "id")])
    labels, k = np.asarray(load_npy(out / LABELS)), res["data"]["k"]
    pc = {"strategy": "clusterclip", "strata": "cluster,quality:4", "tier_weights": "0,1,1,2", "max_repeat": 5}
    texts = read_column(RunDir(out), "text")
    lengths = encode_docs(load_tokenizer(out / "experiment" / "tokenizer.json"), texts).lengths
    plan = build_plan(labels, PlanConfig(**pc, budget=res["data"]["budget_tokens"], budget_unit="tokens", seed=0),
                      tokens=lengths, n_clusters=k, fields={"quality": quality})
    trained = res["runs"]["tiers/0"]
    assert trained["plan_identity"] == str(plan.identity)
    assert trained["plan_identity"] != _split_plan(out, labels, k, {"strategy": "clusterclip", "max_repeat": 5}, res)
    lowest = quality < np.quantile(quality, 0.2)  # in tier 0 (of 4), at weight 0: never drawn
    assert not np.isin(np.flatnonzero(lowest), np.asarray(plan.order)).any()


def test_a_field_the_input_lacks_is_refused_with_what_to_give(tmp_path: Path) -> None:
    corpus = _toy_corpus(tmp_path / "toy.jsonl")
    cfg = quick_config(strategies=("random", "clusterclip:within=quality,max_repeat=5"))
    with pytest.raises(ClusterClipError, match=r"no training document has the field 'quality'.*--quality-scorer"):
        run_experiment([corpus], tmp_path / "run", cfg)
