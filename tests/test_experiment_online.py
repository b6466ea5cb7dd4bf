"""Online proxy runs (``clusterclip experiment --strategies online[:rule]``): the batches switch to each
continuation at the next document, the run trains the chain's plans in order under the cap, the same seed
gives the same chain, and the experiment records the weights over the run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tokenizers")

import clusterclip.experiment.online as online_mod
from clusterclip.cli.experiment import add_experiment_parser
from clusterclip.cli.options import experiment_config
from clusterclip.experiment.batches import PlanBatches
from clusterclip.experiment.config import quick_config
from clusterclip.experiment.model import ModelConfig
from clusterclip.experiment.online import Steering, update_steps
from clusterclip.experiment.proxy_runs import run_experiment
from clusterclip.experiment.train import TrainConfig, train_model
from clusterclip.online.controller import Controller, continuation_config, token_to_draw_weights
from clusterclip.plan.build import build_plan
from clusterclip.plan.config import PlanConfig
from clusterclip.settings import SettingsError
from tests.test_experiment import _docs, _toy_corpus

CAP = 3


def test_switch_reads_the_continuation_from_the_next_document() -> None:
    d = _docs([3, 5, 2, 4, 6])
    labels = np.array([0, 1, 0, 2, 1])
    batches = PlanBatches(d, np.array([0, 1, 2, 3, 4]), batch_size=1, context=4, labels=labels)
    it = iter(batches)
    next(it)
    assert batches.consumed == [0, 1]  # 5 tokens were needed for inputs and targets
    stream = np.concatenate([np.full(3, 0), np.full(5, 1)])
    assert batches.last_clusters.tolist() == [stream[1:5].tolist()], "the cluster of every target token"
    assert batches.switch(np.array([4, 4, 3])) == 2, "the position reached in the root plan"
    for _ in range(4):
        next(it)
    assert batches.consumed == [0, 1, 4, 4, 3], "the continuation from the next document on"
    assert batches.used().tolist() == batches.consumed and batches.wrapped_tokens == 0
    state = batches.state()
    assert (state["epoch"], state["consumed"], state["plan_length"]) == (0, 3, 3), "the continuation's own state"
    assert batches.switch(np.array([2])) == 3
    next(it)
    next(it)
    assert batches.consumed[5:] == [2] * 3 and batches.switch(np.array([0])) is None, "no switch after a wrap"
    assert batches.used().tolist() == [0, 1, 4, 4, 3, 2] and batches.wrapped_tokens > 0


def _setup(n: int = 60, k: int = 4, seed: int = 0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(4, 20, size=n).tolist()
    docs = _docs(lengths, seed=seed)
    labels = np.sort(rng.choice(k, size=n, p=[0.55, 0.25, 0.15, 0.05]))
    return docs, labels, np.asarray(lengths), k


def _online_run(rule: str, seed: int = 0, spy: list | None = None, monkeypatch: pytest.MonkeyPatch | None = None):
    docs, labels, lengths, k = _setup()
    budget = int(2 * lengths.sum())
    root_cfg = PlanConfig(strategy="clusterclip", budget=budget, budget_unit="tokens", max_repeat=CAP, seed=seed)
    root = build_plan(labels, root_cfg, tokens=lengths, n_clusters=k)
    if spy is not None and monkeypatch is not None:
        def spying(*args, **kwargs):
            plan = build_plan(*args, **kwargs)
            spy.append((np.asarray(plan.order).copy(), np.asarray(kwargs["prior"]).copy()))
            return plan
        monkeypatch.setattr(online_mod, "build_plan", spying)
    model = ModelConfig(vocab_size=64, context=8, n_layer=1, n_head=1, d_model=16)
    train = TrainConfig(batch_size=2, warmup_steps=1, curve_points=1)
    steps = budget // (train.batch_size * model.context)
    batches = PlanBatches(docs, root, train.batch_size, model.context, labels=labels)
    steering = Steering(batches, lengths, root_cfg, budget, k, rule, steps, updates=4)
    train_model(model, train, batches, steps, seed)
    return np.asarray(root.order), batches, steering.record()


@pytest.mark.parametrize("rule", ["bandit", "gradient"])
def test_an_online_run_trains_the_chain_in_order_under_the_cap(rule: str, monkeypatch: pytest.MonkeyPatch) -> None:
    spy: list = []
    root, batches, record = _online_run(rule, spy=spy, monkeypatch=monkeypatch)
    updates = record["updates"]
    assert len(updates) == len(spy) >= 3, "a continuation per update"
    switches = [u["position"] for u in updates]
    plans = [root] + [order for order, _ in spy]
    starts = [0, *switches]
    expected = np.concatenate([plans[i][: (starts[i + 1] - starts[i]) if i + 1 < len(starts) else None]
                               for i in range(len(plans))])
    used = batches.used()
    assert used.tolist() == expected[: used.size].tolist(), "each plan of the chain up to its switch, in order"
    for (_, prior), start in zip(spy, switches, strict=True):
        assert prior.tolist() == np.bincount(used[:start], minlength=prior.size).tolist(), "every draw before counts"
    assert int(np.bincount(used).max()) <= CAP, "the cap holds over the whole chain"
    for u in updates:
        w = np.asarray(u["weights"])
        assert abs(w.sum() - 1) < 1e-5 and (w >= 0.1 / w.size - 1e-6).all(), "the floor keeps every cluster"
        assert u["budget_docs"] >= 1 and u["tokens"] + u["budget_tokens"] == 2 * int(_setup()[2].sum())
    assert [u["step"] for u in updates] == update_steps(record["every_steps"] * 5, 4)[: len(updates)]


@pytest.mark.parametrize("rule", ["bandit", "gradient"])
def test_the_same_seed_gives_the_same_chain(rule: str) -> None:
    a, b = _online_run(rule), _online_run(rule)
    assert json.dumps(a[2]) == json.dumps(b[2]) and a[1].consumed == b[1].consumed
    other = _online_run(rule, seed=1)
    assert other[1].consumed != a[1].consumed


def test_online_strategies_expand_over_the_caps_and_name_their_cadence() -> None:
    cfg = quick_config(strategies=("random", "online", "online:bandit", "online:gradient"), max_repeats=(5, 7))
    names = [s["name"] for s in cfg.strategy_specs()]
    assert names == ["random", "online-bandit-R5", "online-bandit-R7", "online-gradient-R5", "online-gradient-R7"]
    spec = cfg.strategy_specs()[1]
    assert (spec["strategy"], spec["online"], spec["max_repeat"], spec["updates"]) == ("clusterclip", "bandit", 5, 8)
    assert quick_config(strategies=("online",), online_updates=3).strategy_specs()[0]["name"] == "online-bandit-R5-u3"
    odm = quick_config(strategies=("online:odm",)).strategy_specs()[0]
    assert (odm["name"], odm["online"]) == ("online-odm-R5", "odm")
    with pytest.raises(SettingsError, match="online"):
        quick_config(strategies=("online",), max_repeats=())
    with pytest.raises(SettingsError, match="strategies"):
        quick_config(strategies=("online:exp3",))
    parser = add_experiment_parser(__import__("argparse").ArgumentParser().add_subparsers())
    args = parser.parse_args(["data.jsonl", "--out", "x", "--quick", "--strategies", "random,online:gradient",
                              "--online-updates", "5"])
    assert experiment_config(args).strategy_specs()[1]["name"] == "online-gradient-R5-u5"


def test_quick_experiment_records_the_weights_over_an_online_run(tmp_path: Path) -> None:
    corpus = _toy_corpus(tmp_path / "toy.jsonl")
    res = run_experiment([corpus], tmp_path / "run", quick_config(strategies=("clusterclip", "online:gradient")))
    run = res["runs"]["online-gradient-R5/0"]
    k = res["data"]["k"]
    updates = run["online"]["updates"]
    assert run["online"]["rule"] == "gradient" and len(updates) == 8
    assert all(len(u["weights"]) == k and len(u["losses"]) == k for u in updates)
    assert updates[0]["losses"] != updates[-1]["losses"], "each update saw its own window"
    assert run["repeats"]["max"] <= 5 and "online" not in res["runs"]["clusterclip-R5/0"]
    assert run["sampler"]["consumed"] >= 1
    table = (tmp_path / "run" / "experiment" / "results.md").read_text()
    assert "online-gradient-R5" in table


def test_the_controllers_weights_are_token_shares_in_a_token_budget_run() -> None:
    """A continuation's budget is documents: each weight becomes a share of draws over its cluster's mean
    length, so the tokens follow the weights (uniform weights keep ClusterClip's token balance)."""
    mean = np.array([100.0, 300.0, 0.0, 50.0])
    w = np.array([0.4, 0.3, 0.1, 0.2])
    draws = token_to_draw_weights(w, mean)
    assert draws.sum() == pytest.approx(1.0)
    held = mean > 0
    tokens = draws[held] * mean[held]
    assert tokens / tokens.sum() == pytest.approx(w[held] / w[held].sum())
    rng = np.random.default_rng(0)
    k = 4
    labels = np.repeat(np.arange(k), 1000)
    lengths = rng.integers(10, 30, size=labels.size) * (1 + labels)  # cluster c's documents are (c + 1) x longer
    means = np.bincount(labels, lengths, k) / np.bincount(labels, minlength=k)

    def token_shares(draw_weights):
        cfg = continuation_config(Controller.start(k), PlanConfig(strategy="clusterclip", max_repeat=CAP),
                                  draw_weights, budget=2000)  # the cap does not bind
        order = np.asarray(build_plan(labels, cfg, tokens=lengths, n_clusters=k, prior=np.zeros(labels.size,
                                                                                                np.int64)).order)
        return np.bincount(labels[order], lengths[order], k) / lengths[order].sum()

    assert np.abs(token_shares(token_to_draw_weights([1 / k] * k, means)) - 1 / k).max() < 0.01
    assert np.abs(token_shares(None) - 1 / k).max() > 0.1, "uniform draws would favour the long documents"
