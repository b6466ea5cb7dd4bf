"""A continuation keeps every constraint of its root (docs/sampling.md#chains): the cap, the duplicate policy with
its group caps, the strata with their tier weights and caps, over the whole chain, unless overridden explicitly."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from clusterclip.cli.main import main
from clusterclip.contract.dedup import load_groups
from clusterclip.dedup.config import DedupConfig
from clusterclip.dedup.stage import dedup_stage
from clusterclip.online.controller import Controller, continuation_config
from clusterclip.plan import PlanConfig
from clusterclip.plan.chain import INHERITED, inherit, overrides
from clusterclip.plan.duplicates import GroupSide, grouped_plan
from clusterclip.plan.stage import continuation, plan_stage
from clusterclip.plan.strata_spec import FINEWEB2_CURVE
from clusterclip.store import RunDir, StaleArtifactError
from tests.test_dedup import corpus_with_copies

MODES = ("none", "drop", "group-cap", "rehydrate")


def curve(m: np.ndarray) -> np.ndarray:
    bounds = np.array([s for s, _ in FINEWEB2_CURVE])
    times = np.array([t for _, t in FINEWEB2_CURVE])
    return times[np.searchsorted(bounds, m, side="right") - 1]


@st.composite
def chain_case(draw):
    n = draw(st.integers(30, 200))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    k = draw(st.integers(1, 5))
    labels = rng.integers(0, k, n)
    # duplicate groups inside clusters: each document joins an earlier one of its cluster with some probability
    group = np.arange(n)
    for i in range(1, n):
        same = np.flatnonzero(labels[:i] == labels[i])
        if same.size and rng.random() < draw(st.sampled_from([0.0, 0.3, 0.7])):
            group[i] = group[rng.choice(same)]
    _, group = np.unique(group, return_inverse=True)
    kept = np.array([np.flatnonzero(group == g)[0] for g in range(group.max() + 1)])
    mode = draw(st.sampled_from(MODES))
    stratified = draw(st.booleans())
    cap = draw(st.integers(1, 4))
    return labels, group, kept, mode, stratified, cap, rng.random(n), seed


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(chain_case(), st.floats(0.0, 1.0), st.floats(0.05, 1.0), st.sampled_from(["uniform", "random", "weights"]))
def test_prefix_and_continuation_never_exceed_what_the_root_promised(case, cut, share, strategy):
    """For random roots in every duplicate mode (with and without strata) and random switch positions, the
    parent's prefix plus the continuation (settings inherited) never exceed any cap the root promised."""
    labels, group, kept, mode, stratified, cap, quality, seed = case
    strata = {"strata": "cluster,quality:2", "tier_weights": "0,1", "tier_caps": f"0,{cap}"} if stratified else {}
    root_cfg = PlanConfig(strategy="clusterclip", max_repeat=None if mode == "rehydrate" else cap, duplicates=mode,
                          seed=seed % 5, **strata)
    fields = {"quality": quality} if stratified else None
    sizes = np.bincount(group)
    unit_cap = curve(sizes) if mode == "rehydrate" else np.full(sizes.size, cap)
    if mode == "rehydrate" and stratified:
        unit_cap = np.minimum(unit_cap, cap)  # the tier's cap holds too
    grouped = mode != "none"
    unit_quality = quality[kept] if grouped else quality
    tier_ok = unit_quality >= np.quantile(unit_quality, 0.5) if stratified else np.ones(unit_quality.size, bool)
    room_units = (unit_cap if grouped else unit_cap[group]) * tier_ok
    assume(room_units.sum() >= 2)
    root_budget = max(1, int(room_units.sum() * 0.6))
    root = grouped_plan(labels, _with_budget(root_cfg, root_budget), (group, kept), side=GroupSide(fields=fields))
    consumed = int(cut * root.order.size)
    prefix = np.asarray(root.order[:consumed])
    prior = np.bincount(prefix, minlength=labels.size)
    weights = {"weights": tuple((c, 1.0 + c) for c in range(int(labels.max()) + 1))} if strategy == "weights" else {}
    child, changed = inherit(root.config, PlanConfig(strategy=strategy, **weights), None)
    assert not changed
    assert all(getattr(child, f) == getattr(root.config, f) for f in INHERITED if f != "max_repeat")
    used = np.bincount(group, weights=prior, minlength=sizes.size) if grouped else prior
    left = np.maximum(room_units - used, 0).sum()
    assume(left >= 1)
    budget = max(1, int(left * share))
    cont = grouped_plan(labels, _with_budget(child, budget), (group, kept), side=GroupSide(prior, fields))
    chain = np.concatenate([prefix, np.asarray(cont.order)])
    assert cont.order.size == budget
    counts = np.bincount(chain, minlength=labels.size)
    if mode == "none":
        assert (counts <= cap).all() and (counts[~tier_ok] == 0).all()
    else:
        per_group = np.bincount(group[chain], minlength=sizes.size)
        assert (per_group <= unit_cap).all() and (per_group[~tier_ok] == 0).all()
        if mode == "drop":
            assert np.isin(chain, kept).all()


def _with_budget(config: PlanConfig, budget: int) -> PlanConfig:
    import dataclasses

    return dataclasses.replace(config, budget=budget, epochs=None)


def test_inherit_keeps_constraints_unless_explicit_and_reports_overrides():
    root = PlanConfig(strategy="clusterclip", max_repeat=3, duplicates="group-cap", strata="cluster,quality:3",
                      tier_weights="0,1,2")
    child, changed = inherit(root, PlanConfig(strategy="uniform"))
    assert (child.max_repeat, child.duplicates, child.strata, child.tier_weights) == (3, "group-cap",
                                                                                      root.strata, root.tier_weights)
    assert not changed
    lower, changed = inherit(root, PlanConfig(strategy="uniform", max_repeat=2, duplicates="none"),
                             explicit=["max_repeat", "duplicates"])
    assert lower.duplicates == "none" and changed == {"max_repeat": [3, 2], "duplicates": ["group-cap", "none"]}
    assert overrides(root, lower) == changed
    rehydrated = PlanConfig(duplicates="rehydrate", rehydrate_curve="1:1,2:3")
    off, changed = inherit(rehydrated, PlanConfig(), explicit=["duplicates"])
    assert off.duplicates == "none" and off.rehydrate_curve is None
    with pytest.raises(ValueError, match="does not inherit: seed"):
        inherit(root, PlanConfig(), explicit=["seed"])


@pytest.fixture(scope="module")
def deduped(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("chain")
    corpus_with_copies(tmp / "c.jsonl")
    assert main(["embed", str(tmp / "c.jsonl"), "--out", str(tmp / "run"), "--embedder", "hashing", "--id-field", "id",
                 "-q"]) == 0
    assert main(["cluster", str(tmp / "run"), "--k", "3", "-q"]) == 0
    dedup_stage(RunDir(tmp / "run"), DedupConfig())
    return tmp / "run"


def _plan_named(path, part):
    (folder,) = [p for p in (path / "plans").iterdir() if part(p.name)]
    return folder


def test_plan_continue_of_a_group_cap_plan_keeps_the_group_cap(deduped, tmp_path, capsys):
    """The issue's case: `plan --continue <group-cap plan> --consumed 100 --max-repeat 2` drew one group 23 times
    under a group cap of 2; the continuation now inherits group-cap, and the chain holds it."""
    path = tmp_path / "run"
    shutil.copytree(deduped, path)
    group, kept = load_groups(RunDir(path))
    assert main(["plan", str(path), "--max-repeat", "2", "--duplicates", "group-cap", "--budget", "150", "-q"]) == 0
    root = _plan_named(path, lambda n: n.endswith("group-cap"))
    assert main(["plan", str(path), "--continue", root.name, "--consumed", "100", "--max-repeat", "2", "--budget",
                 "80"]) == 0
    assert "overrides" not in capsys.readouterr().out
    cont = _plan_named(path, lambda n: "-cont-" in n)
    record = json.loads((cont / "plan.json").read_text())
    assert record["config"]["duplicates"] == "group-cap" and "overrides" not in record["stats"]
    chain = np.concatenate([np.load(root / "plan.npy")[:100], np.load(cont / "plan.npy")])
    assert np.bincount(group[chain], minlength=kept.size).max() <= 2


def test_an_explicit_override_is_named_in_the_output_and_the_record(deduped, tmp_path, capsys):
    path = tmp_path / "run"
    shutil.copytree(deduped, path)
    assert main(["plan", str(path), "--max-repeat", "2", "--duplicates", "drop", "--budget", "100", "-q"]) == 0
    root = _plan_named(path, lambda n: n.endswith("drop"))
    capsys.readouterr()
    assert main(["plan", str(path), "--continue", root.name, "--consumed", "50", "--duplicates", "none", "--budget",
                 "40"]) == 0
    assert "overrides what its parent promised: duplicates 'drop' -> 'none'" in capsys.readouterr().out
    cont = _plan_named(path, lambda n: "-cont-" in n)
    assert json.loads((cont / "plan.json").read_text())["stats"]["overrides"] == {"duplicates": ["drop", "none"]}


def test_an_online_continuation_of_a_drop_root_draws_no_dropped_copy(deduped, tmp_path):
    """The online mixer plans through `continuation` with the controller's weights: the chain of a `drop` root
    never draws a dropped copy (every continuation used to be written with duplicates none)."""
    path = tmp_path / "run"
    shutil.copytree(deduped, path)
    run = RunDir(path)
    group, kept = load_groups(run)
    root = plan_stage(run, PlanConfig(max_repeat=2, duplicates="drop", budget=120))
    controller = Controller.start(3, "bandit", seed=0)
    root_config = PlanConfig.from_recorded(root.config)
    cfg, continues = continuation(run, continuation_config(controller, root_config), root.name, 60)
    cont = plan_stage(run, cfg, continues=continues)
    assert PlanConfig.from_recorded(cont.config).duplicates == "drop"
    chain = np.concatenate([np.load(run.path(root.order_file()))[:60], np.load(run.path(cont.order_file()))])
    assert np.isin(chain, kept).all() and np.bincount(group[chain]).max() <= 2


def test_a_plan_whose_duplicate_groups_were_rebuilt_is_not_continued(deduped, tmp_path, capsys):
    """Issue 42's sweep: after `dedup --force` re-grouped the run, a continuation of a group-cap root was planned
    over the new groups, and the chain drew one of the root's groups 15 times under its cap of 2; such a parent is
    now refused, by `plan --continue` and by the online mixer's path (``continuation``) alike, until the groups are
    back; a plan without groups, or a re-clustering, is no reason."""
    path = tmp_path / "run"
    shutil.copytree(deduped, path)
    run = RunDir(path)
    root = plan_stage(run, PlanConfig(max_repeat=2, duplicates="group-cap", budget=100))
    plain = plan_stage(run, PlanConfig(max_repeat=2, budget=100))
    dedup_stage(run, DedupConfig(eps=0.3), force=True)
    capsys.readouterr()
    assert main(["plan", str(path), "--continue", root.name, "--consumed", "50", "--budget", "30", "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "duplicate groups that `clusterclip dedup` has rebuilt since" in err
    with pytest.raises(StaleArtifactError, match="cannot keep its caps per group"):
        continuation(run, PlanConfig(), root.name, 50)
    assert sorted(p.name for p in (path / "plans").iterdir()) == sorted([root.name, plain.name])
    assert continuation(run, PlanConfig(), plain.name, 50)[0].budget == 50
    dedup_stage(run, DedupConfig(), force=True)  # the groups the root was planned over
    assert continuation(run, PlanConfig(), root.name, 50)[0].duplicates == "group-cap"


@pytest.mark.parametrize("mode", ["group-cap", "drop"])
def test_an_epoch_over_duplicate_groups_is_the_corpus_documents(deduped, tmp_path, mode):
    """Issue 46: `--duplicates group-cap --epochs 2` gave twice the groups, not twice the documents; an epoch is the
    corpus' documents in every plan (each group still counts as one document against the cap)."""
    path = tmp_path / "run"
    shutil.copytree(deduped, path)
    run = RunDir(path)
    group, kept = load_groups(run)
    n = group.size
    assert kept.size < n
    rec = plan_stage(run, PlanConfig(max_repeat=8, duplicates=mode, epochs=2))
    assert rec.length == 2 * n and rec.stats["budget"] == 2 * n
