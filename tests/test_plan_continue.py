"""Plan identity and continuing a plan mid-training: the cap across the switch, the sampler switch,
refusing states of other plans, the CLI, and plan records written before identities existed."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterclip.cli.main import main
from clusterclip.contract.cluster import CLUSTER_STAGE, LABELS
from clusterclip.contract.plan import PLAN_ORDER, plan_path, plan_stage_name
from clusterclip.contract.plan_identity import identity_of
from clusterclip.contract.plan_notes import clip_note
from clusterclip.errors import ClusterClipError, InfeasiblePlanError
from clusterclip.plan import PlanConfig, build_plan, reference_order
from clusterclip.plan.prior import prior_counts
from clusterclip.plan.stage import continuation, plan_stage
from clusterclip.store import RunDir, save_json, save_npy
from tests.test_cli import make_corpus

torch = pytest.importorskip("torch")

from clusterclip.torch import ClusterClipSampler, plan_info
from tests.records import write_record


@st.composite
def continuations(draw):
    n = draw(st.integers(3, 60))
    k = draw(st.integers(1, 6))
    labels = np.asarray(draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n)), np.int64)
    parent_cfg = PlanConfig(strategy=draw(st.sampled_from(["clusterclip", "uniform", "random"])),
                            max_repeat=draw(st.integers(1, 5)), budget=draw(st.integers(1, 3 * n)),
                            seed=draw(st.integers(0, 5)))
    strategy = draw(st.sampled_from(["clusterclip", "uniform", "random", "temperature"]))
    order = "equal-rate" if strategy == "random" else draw(st.sampled_from(["equal-rate", "spread"]))
    cfg = dict(strategy=strategy, max_repeat=draw(st.sampled_from([None, 1, 2, 3, 6])), order=order,
               seed=draw(st.integers(0, 5)))
    return labels, parent_cfg, cfg, draw(st.floats(0, 1)), draw(st.floats(0, 1)), draw(st.integers(1, 50))


def _remaining(labels, prior, cfg):
    cap = PlanConfig(**cfg).effective_max_repeat
    return None if cap is None else int(np.maximum(cap - prior, 0).sum())


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(continuations())
def test_cap_holds_across_the_switch_and_repeats_stay_even(case):
    labels, parent_cfg, cfg, at, share, chunk = case
    try:
        parent = build_plan(labels, parent_cfg)
    except InfeasiblePlanError:
        return
    consumed = int(at * parent.order.size)
    prior = prior_counts(parent.order, consumed, labels.size)
    left = _remaining(labels, prior, cfg)
    budget = int(share * (left if left is not None else 2 * labels.size))
    config = PlanConfig(**cfg, budget=budget)
    cont = build_plan(labels, config, prior=prior, chunk_size=chunk)
    new = np.bincount(cont.order, minlength=labels.size)
    total = prior + new
    assert cont.order.size == budget
    if config.effective_max_repeat is not None:
        assert int((new[prior >= config.effective_max_repeat]).sum()) == 0
        assert int(total[new > 0].max(initial=0)) <= config.effective_max_repeat
    assert np.array_equal(cont.order, reference_order(labels, config, prior=prior))
    assert np.array_equal(cont.repeat_hist, np.bincount(new))
    assert np.array_equal(cont.per_cluster["draws"], np.bincount(labels, weights=new, minlength=cont.per_cluster[
        "draws"].size))
    groups = np.zeros_like(labels) if config.strategy == "random" else labels
    cap = config.effective_max_repeat or np.iinfo(np.int64).max
    for g in np.unique(groups[new > 0]):
        members = groups == g
        room = members & (total < cap)
        if room.any():  # never drawn while a group member with room left is two draws lower
            assert int(total[members & (new > 0)].max()) <= int(total[room].min()) + 1


def test_without_prior_counts_the_plan_is_unchanged_and_identity_is_its_hash():
    labels = np.random.default_rng(3).integers(0, 7, 300)
    cfg = PlanConfig(budget=700, seed=4)
    plan = build_plan(labels, cfg, chunk_size=64)
    zero = build_plan(labels, cfg, prior=np.zeros(300, np.int64))
    assert plan.identity == identity_of(plan.order) == identity_of(np.asarray(plan.order, np.int32))
    assert build_plan(labels, cfg).identity == plan.identity
    assert build_plan(labels, PlanConfig(budget=700, seed=5)).identity != plan.identity
    assert np.array_equal(zero.order, plan.order)  # nothing drawn yet: the same plan, byte for byte


def test_continuation_refuses_token_budgets_and_infeasible_budgets():
    labels = np.arange(10) % 2
    prior = np.full(10, 3)
    with pytest.raises(InfeasiblePlanError, match="10 draws left"):
        build_plan(labels, PlanConfig(max_repeat=4, budget=11), prior=prior)
    with pytest.raises(ClusterClipError, match="budget_unit"):
        build_plan(labels, PlanConfig(max_repeat=4, budget=5, budget_unit="tokens"), prior=prior,
                   tokens=np.ones(10, np.int64))


def _run(tmp_path, n=240, k=6):
    run = RunDir(tmp_path / "run")
    labels = np.random.default_rng(0).integers(0, k, n).astype(np.int32)
    save_npy(run.path(LABELS), labels)
    write_record(run, CLUSTER_STAGE, {"k": k}, "x", [LABELS], 0.0)
    return run


def _continue(run, parent_cfg, consumed, **options):
    parent = plan_stage(run, parent_cfg).to_json()
    cfg, continues = continuation(run, PlanConfig(**options), parent["name"], consumed)
    return parent, plan_stage(run, cfg, continues=continues).to_json()


def _take(sampler, count):
    it = iter(sampler)
    return [next(it) for _ in range(count)]


def _interleave(per_rank):
    return [v for i in range(max(map(len, per_rank))) for r in per_rank if i < len(r) for v in [r[i]]]


@pytest.mark.parametrize("ws", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("steps", [0, 7, 20])
def test_sampler_switches_to_the_continuation_without_losing_or_repeating(tmp_path, ws, drop_last, steps):
    run = _run(tmp_path)
    consumed = steps * 3 * ws  # step x global batch (3 per rank)
    parent, cont = _continue(run, PlanConfig(budget=500, seed=1), consumed, max_repeat=3, seed=7)
    old = np.load(run.path(plan_path(parent["name"], PLAN_ORDER)))
    new = np.load(run.path(plan_path(cont["name"], PLAN_ORDER)))
    assert cont["continues"] == {"name": parent["name"], "identity": parent["identity"], "consumed": consumed}
    assert new.size == old.size - consumed
    before, after = [], []
    for r in range(ws):
        s = ClusterClipSampler(run.path(plan_path(parent["name"])), rank=r, world_size=ws, drop_last=drop_last)
        before.append(_take(s, steps * 3))
        state = s.state_dict()
        assert state["consumed"] == consumed and state["plan_identity"] == parent["identity"]
        c = ClusterClipSampler(run.root, rank=r, world_size=ws, drop_last=drop_last, plan_name=cont["name"])
        c.load_state_dict(state)
        assert c.consumed == 0
        after.append(list(c))
    stream = _interleave(before) + _interleave(after)
    full = new.size // ws * ws if drop_last else new.size
    assert stream[:consumed + full] == old[:consumed].tolist() + new[:full].tolist()
    assert len(stream) == consumed + (full if drop_last else -(-new.size // ws) * ws)
    assert (np.bincount(old[:consumed], minlength=240) + np.bincount(new, minlength=240)).max() <= 3


def test_sampler_refuses_other_plans_and_other_switch_positions(tmp_path):
    run = _run(tmp_path)
    parent, cont = _continue(run, PlanConfig(budget=500, seed=1), 120, max_repeat=3)
    other = plan_stage(run, PlanConfig(budget=500, seed=2)).to_json()  # same length, re-planned with another seed
    folder = {name: run.path(plan_path(name)) for name in (parent["name"], cont["name"], other["name"])}
    state = ClusterClipSampler(folder[other["name"]], start=120).state_dict()
    for target in (parent["name"], cont["name"]):
        with pytest.raises(ClusterClipError) as err:
            ClusterClipSampler(folder[target]).load_state_dict(state)
        assert other["name"] in str(err.value) and target in str(err.value)
        assert other["identity"][:12] in str(err.value)
    early = ClusterClipSampler(folder[parent["name"]], start=60).state_dict()
    with pytest.raises(ClusterClipError, match=r"at position 60.*continues it at position 120"):
        ClusterClipSampler(folder[cont["name"]]).load_state_dict(early)
    ClusterClipSampler(folder[parent["name"]]).load_state_dict(early)  # its own plan: fine
    array = np.load(run.path(plan_path(other["name"], PLAN_ORDER)))
    assert ClusterClipSampler(array).state_dict()["plan_identity"] == other["identity"]


def test_plan_records_before_identities_still_load(tmp_path):
    run = _run(tmp_path)
    rec = plan_stage(run, PlanConfig(budget=300)).to_json()
    path = run.record_path(plan_stage_name(rec["name"]))
    legacy = {key: value for key, value in json.loads(path.read_text()).items() if key != "identity"}
    save_json(path, legacy)
    info = plan_info(run.root)
    sha = legacy["artifacts"][plan_path(rec["name"], PLAN_ORDER)]["sha256"]
    assert info.identity == f"npy-sha256:{sha}" and info.name == rec["name"]
    s = ClusterClipSampler(run.root, start=50)
    ClusterClipSampler(run.root).load_state_dict(s.state_dict())
    cfg, continues = continuation(run, PlanConfig(max_repeat=2), rec["name"], 100)
    cont = plan_stage(run, cfg, continues=continues).to_json()
    c = ClusterClipSampler(run.path(plan_path(cont["name"])))
    c.load_state_dict(ClusterClipSampler(run.root, plan_name=rec["name"], start=100).state_dict())
    assert c.consumed == 0 and cont["continues"]["identity"] == info.identity


def test_cli_continue_end_to_end(tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.jsonl", {"cooking": 90, "astronomy": 30, "finance": 20, "sailing": 10})
    out = str(tmp_path / "run")
    assert main(["embed", str(corpus), "--out", out, "--embedder", "hashing", "-q"]) == 0
    assert main(["cluster", out, "--k", "4", "-q"]) == 0
    capsys.readouterr()
    assert main(["plan", out, "--max-repeat", "4", "--budget", "400", "--json"]) == 0
    parent = json.loads(capsys.readouterr().out)["plan"]
    name = parent.split("/")[-2]
    assert main(["plan", out, "--continue", name, "--consumed", "120", "--max-repeat", "3", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    cont_path, stats = printed["plan"], printed["stats"]
    old, new = np.load(parent), np.load(cont_path)
    assert new.size == 280 and stats["max_total_repeat"] <= 3
    assert (np.bincount(old[:120], minlength=150) + np.bincount(new, minlength=150)).max() <= 3
    assert main(["plan", out, "--continue", name, "--consumed", "120", "--max-repeat", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["plan"] == cont_path  # fresh: reused
    assert main(["plan", out, "--continue", name, "-q"]) == 2
    assert "--consumed" in capsys.readouterr().err
    assert main(["plan", out, "--continue", name, "--consumed", "401", "-q"]) == 2
    assert "0..400" in capsys.readouterr().err
    assert main(["plan", out, "--continue", name, "--consumed", "400", "-q"]) == 2  # the whole parent consumed
    err = capsys.readouterr().err
    assert "--consumed is the whole of plan" in err and "give --budget N" in err and "must be an integer" not in err
    assert main(["plan", out, "--continue", name, "--consumed", "400", "--max-repeat", "1", "--budget", "10",
                 "-q"]) == 2  # the parent used every cap of 1 already
    err = capsys.readouterr().err
    assert "0 draws left" in err and "raise max_repeat" in err and "lower the budget to 0" not in err


def test_report_shows_the_mixture_across_the_switch(tmp_path):
    from clusterclip.report import charts, model
    from clusterclip.report.continued import across_switch
    from clusterclip.report.load import load_run

    run = _run(tmp_path)
    parent, cont = _continue(run, PlanConfig(budget=800, seed=1, window=40), 310, max_repeat=4, seed=3, window=25)
    report_run = load_run(run.root)
    views = {p.name: p for p in report_run.plans}
    switch = across_switch(views[cont["name"]], report_run.plans)
    assert switch is not None and switch.parent == parent["name"] and switch.at == 310
    assert across_switch(views[parent["name"]], report_run.plans) is None
    rows = 310 // 40  # parent windows that end by the switch
    old = np.load(run.path(plan_path(parent["name"], PLAN_ORDER)))
    labels = np.load(run.path(LABELS))
    np.testing.assert_array_equal(switch.mixture[:rows].sum(axis=0), np.bincount(labels[old[:rows * 40]], minlength=6))
    np.testing.assert_array_equal(switch.mixture[rows:], views[cont["name"]].mixture)
    assert switch.positions[rows] == 310 and np.all(np.diff(switch.positions) > 0)
    mixture_spec, _ = model._plan_charts(views[cont["name"]], report_run)
    assert mixture_spec is not None
    chart = mixture_spec.draw(tmp_path / mixture_spec.file)
    assert parent["name"] in chart.title and "310" in chart.title and chart.path.stat().st_size > 0
    plain = charts.plot_mixture(views[parent["name"]].mixture, np.bincount(labels), 40, tmp_path / "p.png", "p")
    assert "then from position" not in plain.title


@pytest.mark.parametrize(("ws_before", "ws_after"), [(2, 1), (3, 4), (1, 8), (8, 3)])
def test_switch_with_another_world_size_after(tmp_path, ws_before, ws_after):
    run = _run(tmp_path)
    consumed = 24 * ws_before
    parent, cont = _continue(run, PlanConfig(budget=500, seed=1), consumed, strategy="uniform", seed=2)
    new = np.load(run.path(plan_path(cont["name"], PLAN_ORDER)))
    state = ClusterClipSampler(run.root, plan_name=parent["name"], world_size=ws_before, rank=ws_before - 1,
                               start=consumed).state_dict()
    after = []
    for r in range(ws_after):
        c = ClusterClipSampler(run.root, plan_name=cont["name"], rank=r, world_size=ws_after, drop_last=True)
        c.load_state_dict(state)
        after.append(list(c))
    assert _interleave(after) == new[: new.size // ws_after * ws_after].tolist()


def test_documents_added_since_the_parent_are_drawn_first():
    rng = np.random.default_rng(5)
    old_labels = rng.integers(0, 4, 200)
    parent = build_plan(old_labels, PlanConfig(strategy="random", budget=200))
    labels = np.concatenate([old_labels, rng.integers(0, 4, 40)])  # a month of data; old labels unchanged
    prior = prior_counts(parent.order, 200, labels.size)
    cont = build_plan(labels, PlanConfig(strategy="random", budget=40, max_repeat=2), prior=prior)
    assert sorted(cont.order.tolist()) == list(range(200, 240))
    with pytest.raises(ClusterClipError, match="holds document 239"):
        prior_counts(cont.order, 40, 200)


def test_a_continuation_under_a_lower_cap_says_what_the_parent_already_drew_above_it(tmp_path):
    """The cap cannot undo draws already made: documents the parent's prefix drew more often than a lowered cap
    are never drawn again, and the record and the plan command say how many there are."""
    run = RunDir(tmp_path / "run")
    save_npy(run.path(LABELS), np.r_[np.zeros(10), np.repeat(np.arange(1, 6), 46)].astype(np.int32))  # one small
    write_record(run, CLUSTER_STAGE, {"k": 6}, "x", [LABELS], 0.0)
    parent, cont = _continue(run, PlanConfig(strategy="uniform", max_repeat=4, budget=700), 300,
                             strategy="clusterclip", max_repeat=2, budget=50)
    prior = np.bincount(np.load(run.path(plan_path(parent["name"], PLAN_ORDER)))[:300], minlength=240)
    order = np.load(run.path(plan_path(cont["name"], PLAN_ORDER)))
    assert not np.isin(order, np.flatnonzero(prior >= 2)).any()
    stats = cont["stats"]
    assert stats["over_cap_before"] == int((prior > 2).sum()) > 0 and stats["max_total_repeat"] == prior.max() > 2
    note = clip_note(stats)
    assert f"{stats['over_cap_before']:,} documents were drawn more than 2 times before the switch" in note
    assert "draws none of them again" in note
    _, same_cap = _continue(run, PlanConfig(strategy="uniform", max_repeat=4, budget=700), 300, strategy="clusterclip",
                            max_repeat=4, budget=50)
    assert same_cap["stats"]["over_cap_before"] == 0 and "before the switch" not in (clip_note(same_cap["stats"]) or "")
