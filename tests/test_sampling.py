"""Invariants of the planner (clusterclip.plan), checked on random cluster-size distributions."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as hs

from clusterclip.contract.plan import list_plans
from clusterclip.errors import ClusterClipError, InfeasiblePlanError
from clusterclip.plan import PlanConfig, PlanConfigError, build_plan, load_weights, water_fill
from clusterclip.plan.stage import plan_stage
from clusterclip.store import RunDir, artifact_checksums, load_json, load_npy, save_npy
from tests.records import write_record

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@hs.composite
def corpora(draw, max_clusters: int = 8, max_size: int = 25):
    """Labels (shuffled) for random cluster sizes, sometimes with empty clusters, plus token counts."""
    sizes = draw(hs.lists(hs.integers(0, max_size), min_size=1, max_size=max_clusters))
    if sum(sizes) == 0:
        sizes[0] = 1
    seed = draw(hs.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)
    rng.shuffle(labels)
    tokens = rng.integers(1, 50, labels.size).astype(np.int64)
    return labels, tokens


def _counts(plan, n):
    return np.bincount(np.asarray(plan.order), minlength=n)


def _cluster_counts(plan, labels, k):
    return np.bincount(labels[np.asarray(plan.order)], minlength=k)


def _oracle_quotas(weights, caps, budget):
    """Real water-filling quotas by bisection on lambda (independent of the planner's method)."""
    w = np.asarray(weights, float)
    lo, hi = 0.0, 1.0
    while np.minimum(hi * w, caps).sum() < budget:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if np.minimum(mid * w, caps).sum() < budget:
            lo = mid
        else:
            hi = mid
    return np.minimum(hi * w, caps)


def _check_common(plan, labels, cap):
    n, k = labels.size, int(labels.max()) + 1
    order = np.asarray(plan.order)
    assert order.dtype == np.int64
    counts = _counts(plan, n)
    if cap is not None:
        assert counts.max(initial=0) <= cap
    per = plan.per_cluster
    assert np.array_equal(per["draws"], _cluster_counts(plan, labels, k))
    hist = np.bincount(counts)
    nz = np.flatnonzero(hist)
    assert np.array_equal(plan.repeat_hist, hist[: nz[-1] + 1])
    for c in range(k):
        cc = counts[labels == c]
        if cc.size:
            assert per["unique"][c] == (cc > 0).sum()
            assert per["max_repeat"][c] == cc.max()
    assert plan.mixture.sum(axis=0).tolist() == per["draws"].tolist()
    w = plan.stats["window"]
    for i in range(plan.mixture.shape[0]):
        seg = labels[order[i * w:(i + 1) * w]]
        assert np.array_equal(plan.mixture[i], np.bincount(seg, minlength=k))


# ------------------------------------------------------------------ docs-mode invariants


@SETTINGS
@given(corpora(), hs.integers(1, 5), hs.floats(0, 1), hs.integers(0, 3))
def test_clusterclip_invariants(corpus, cap, frac, seed):
    labels, _ = corpus
    n, k = labels.size, int(labels.max()) + 1
    budget = round(frac * cap * n)
    plan = build_plan(labels, PlanConfig(strategy="clusterclip", budget=budget, max_repeat=cap, seed=seed),
                      chunk_size=7)
    order = np.asarray(plan.order)
    assert order.size == budget
    _check_common(plan, labels, cap)
    counts = _counts(plan, n)
    for c in range(k):  # passes: repeats inside a cluster differ by at most one
        cc = counts[labels == c]
        if cc.size:
            assert cc.max() - cc.min() <= 1
    sizes = np.bincount(labels, minlength=k)
    q_real = _oracle_quotas((sizes > 0).astype(float), cap * sizes.astype(float), budget)
    draws = plan.per_cluster["draws"]
    assert draws.sum() == budget
    assert np.all(np.abs(draws - q_real) < 1 + 1e-9)
    assert np.all(draws <= cap * sizes)
    ex = plan.per_cluster["exhausted_at"]
    for c in range(k):
        if sizes[c] and draws[c] == cap * sizes[c]:
            assert ex[c] == np.flatnonzero(labels[order] == c).max()
        else:
            assert ex[c] == -1
    _check_prefix_balance_equal(order, labels, draws)


def _check_prefix_balance_equal(order, labels, draws):
    """Equal weights: at every prefix, clusters that still have draws to come differ by at most 1."""
    k = draws.size
    if order.size == 0:
        return
    onehot = np.zeros((order.size, k), np.int64)
    onehot[np.arange(order.size), labels[order]] = 1
    cum = np.cumsum(onehot, axis=0)
    active = cum < draws[None, :]
    big = np.where(active, cum, -1).max(axis=1)
    small = np.where(active, cum, np.iinfo(np.int64).max).min(axis=1)
    has = active.any(axis=1)
    assert np.all(big[has] - small[has] <= 1)


@SETTINGS
@given(corpora(), hs.integers(0, 120), hs.integers(0, 3))
def test_uniform_equal_counts_where_capacity_allows(corpus, budget, seed):
    labels, _ = corpus
    k = int(labels.max()) + 1
    sizes = np.bincount(labels, minlength=k)
    plan = build_plan(labels, PlanConfig(strategy="uniform", budget=budget, seed=seed), chunk_size=5)
    draws = plan.per_cluster["draws"]
    present = draws[sizes > 0]
    assert present.sum() == budget and np.all(draws[sizes == 0] == 0)
    assert present.max() - present.min() <= 1
    _check_common(plan, labels, None)
    _check_prefix_balance_equal(np.asarray(plan.order), labels, draws)


def test_cap_exhausts_small_clusters_and_mixture_drifts():
    labels = np.repeat(np.arange(3, dtype=np.int32), [2, 10, 40])
    plan = build_plan(labels, PlanConfig(budget=100, max_repeat=2))
    draws = plan.per_cluster["draws"]
    assert draws.tolist() == [4, 20, 76]
    ex = plan.per_cluster["exhausted_at"]
    assert 0 <= ex[0] < ex[1] and ex[2] == -1
    order_labels = labels[plan.order]
    assert set(order_labels[:12].tolist()) == {0, 1, 2}
    assert np.all(order_labels[ex[1] + 1:] == 2)


@SETTINGS
@given(corpora(), hs.integers(1, 3), hs.integers(0, 150), hs.integers(0, 3))
def test_random_is_epochs_of_permutations(corpus, cap, budget, seed):
    labels, _ = corpus
    n = labels.size
    assume(budget <= cap * n)
    plan = build_plan(labels, PlanConfig(strategy="random", budget=budget, max_repeat=cap, seed=seed),
                      chunk_size=6)
    order = np.asarray(plan.order)
    assert order.size == budget
    for e in range(budget // n):
        assert np.array_equal(np.sort(order[e * n:(e + 1) * n]), np.arange(n))
    tail = order[(budget // n) * n:]
    assert np.unique(tail).size == tail.size
    _check_common(plan, labels, cap)


@SETTINGS
@given(corpora(), hs.floats(-1, 2), hs.integers(0, 150))
def test_temperature_quotas_and_prefix_balance(corpus, tau, budget):
    labels, _ = corpus
    k = int(labels.max()) + 1
    sizes = np.bincount(labels, minlength=k)
    plan = build_plan(labels, PlanConfig(strategy="temperature", tau=tau, budget=budget, max_repeat=3),
                      chunk_size=4) if budget <= 3 * labels.size else None
    if plan is None:
        with pytest.raises(InfeasiblePlanError):
            build_plan(labels, PlanConfig(strategy="temperature", tau=tau, budget=budget, max_repeat=3))
        return
    w = np.where(sizes > 0, np.maximum(sizes, 1).astype(float) ** tau, 0.0)
    q_real = _oracle_quotas(w, 3.0 * sizes, budget)
    draws = plan.per_cluster["draws"]
    assert draws.sum() == budget and np.all(np.abs(draws - q_real) < 1 + 1e-6)
    _check_common(plan, labels, 3)
    _check_prefix_balance_weighted(np.asarray(plan.order), labels, draws, w)


def _check_prefix_balance_weighted(order, labels, draws, w):
    """Every prefix: for clusters with draws to come, |count_c / w_c - count_d / w_d| < 1/w_c + 1/w_d."""
    if order.size == 0:
        return
    k = draws.size
    onehot = np.zeros((order.size, k), np.int64)
    onehot[np.arange(order.size), labels[order]] = 1
    cum = np.cumsum(onehot, axis=0)
    active = (cum < draws[None, :]) & (w[None, :] > 0)
    with np.errstate(divide="ignore"):
        x, e = cum / np.where(w > 0, w, 1), np.where(w > 0, 1 / np.where(w > 0, w, 1), 0)
    hi = np.where(active, x - e, -np.inf).max(axis=1)
    lo = np.where(active, x + e, np.inf).min(axis=1)
    assert np.all(hi <= lo + 1e-9)


@SETTINGS
@given(corpora(), hs.sampled_from(["clusterclip", "uniform", "temperature"]), hs.integers(1, 4),
       hs.floats(0, 1), hs.integers(0, 3), hs.sampled_from(["docs", "tokens"]))
def test_spread_order_same_draws_each_cluster_even_over_the_run(corpus, strategy, cap, frac, seed, unit):
    labels, tokens = corpus
    n = labels.size
    budget = round(frac * cap * (n if unit == "docs" else int(tokens.sum())))
    kw = {"strategy": strategy, "budget": budget, "max_repeat": cap, "seed": seed, "budget_unit": unit}
    paper = build_plan(labels, PlanConfig(**kw), tokens=tokens)
    spread = build_plan(labels, PlanConfig(**kw, order="spread"), tokens=tokens, chunk_size=5)
    assert np.array_equal(_counts(spread, n), _counts(paper, n)), "the same documents, as often"
    _check_common(spread, labels, cap)
    draws = spread.per_cluster["draws"]
    # every cluster advances at its own constant rate: progress fractions stay within one draw of each other
    _check_prefix_balance_weighted(np.asarray(spread.order), labels, draws, draws.astype(float))


def test_spread_order_keeps_small_clusters_until_the_end():
    labels = np.repeat(np.arange(4, dtype=np.int32), [4000, 800, 40, 8])
    kw = {"budget": 6000, "max_repeat": 4}
    paper = build_plan(labels, PlanConfig(**kw))
    spread = build_plan(labels, PlanConfig(**kw, order="spread"))
    last_tenth = slice(5400, 6000)
    assert np.bincount(labels[paper.order[last_tenth]], minlength=4)[2:].tolist() == [0, 0]
    late = np.bincount(labels[spread.order[last_tenth]], minlength=4)
    assert late[2] == pytest.approx(160 / 10, abs=1) and late[3] == pytest.approx(32 / 10, abs=1)
    assert (spread.mixture[0] - spread.mixture[-1]).max() <= 2, "the mixture is flat over training"
    assert spread.per_cluster["exhausted_at"][3] > 5400
    assert (paper.stats["order"], spread.stats["order"]) == ("equal-rate", "spread")


def test_time_order_is_the_stable_order_with_or_without_ties():
    from clusterclip.plan.order import argsort_by_time as _argsort_by_time

    rng = np.random.default_rng(0)
    for times in (np.array([1.0, 0.5, 1.0, 0.5, 0.25]), rng.random(1000), rng.integers(0, 50, 1000) / 7):
        assert np.array_equal(_argsort_by_time(times), np.argsort(times, kind="stable"))


def test_temperature_one_matches_natural_shares():
    labels = np.repeat(np.arange(3, dtype=np.int32), [10, 30, 60])
    plan = build_plan(labels, PlanConfig(strategy="temperature", tau=1.0, budget=200))
    assert plan.per_cluster["draws"].tolist() == [20, 60, 120]
    plan0 = build_plan(labels, PlanConfig(strategy="temperature", tau=0.0, budget=300, max_repeat=None))
    assert np.ptp(plan0.per_cluster["draws"]) == 0


def test_weights_strategy_drops_and_upweights():
    labels = np.repeat(np.arange(4, dtype=np.int32), [10, 10, 10, 10])
    cfg = PlanConfig(strategy="weights", weights=((0, 2.0), (3, 0.0)), budget=80)
    plan = build_plan(labels, cfg)
    assert plan.per_cluster["draws"].tolist() == [40, 20, 20, 0]
    assert 3 not in set(labels[plan.order].tolist())


# ------------------------------------------------------------------ token budgets


@SETTINGS
@given(corpora(), hs.sampled_from(["clusterclip", "uniform", "random", "temperature"]), hs.floats(0.05, 1),
       hs.integers(0, 2))
def test_token_budget_reached_without_big_overshoot(corpus, strategy, frac, seed):
    labels, tokens = corpus
    k = int(labels.max()) + 1
    cap = 2
    budget = int(frac * cap * tokens.sum())
    plan = build_plan(labels, PlanConfig(strategy=strategy, budget=budget, budget_unit="tokens", max_repeat=cap,
                                         seed=seed), tokens=tokens, chunk_size=5)
    order = np.asarray(plan.order)
    got = int(tokens[order].sum())
    assert got >= budget
    slack = tokens.max() if strategy == "random" else sum(
        int(tokens[labels == c].max()) for c in range(k) if (labels == c).any())
    assert got - budget < max(slack, 1)
    assert _counts(plan, labels.size).max(initial=0) <= cap
    assert plan.per_cluster["tokens"].sum() == got
    assert np.array_equal(plan.per_cluster["tokens"], np.bincount(labels[order], weights=tokens[order],
                                                                  minlength=k).astype(np.int64))
    _check_common(plan, labels, cap)
    if strategy != "random":
        counts = _counts(plan, labels.size)
        for c in range(k):
            cc = counts[labels == c]
            if cc.size:
                assert cc.max() - cc.min() <= 1


def test_token_quotas_equal_token_shares():
    labels = np.repeat(np.arange(2, dtype=np.int32), [10, 100])
    tokens = np.concatenate([np.full(10, 100), np.full(100, 1)]).astype(np.int64)
    plan = build_plan(labels, PlanConfig(strategy="uniform", budget=200, budget_unit="tokens"), tokens=tokens)
    assert plan.per_cluster["quota"].tolist() == [100, 100]
    assert plan.per_cluster["tokens"].tolist() == [100, 100]
    assert plan.per_cluster["draws"].tolist() == [1, 100]


# ------------------------------------------------------------------ determinism


@settings(max_examples=25, deadline=None)
@given(corpora(), hs.sampled_from(["clusterclip", "uniform", "random", "temperature", "weights"]),
       hs.integers(1, 9), hs.booleans())
def test_same_seed_same_bytes_any_chunk_size(corpus, strategy, chunk, spread):
    labels, tokens = corpus
    n = labels.size
    kw: dict = {"weights": ((0, 3.0),)} if strategy == "weights" else {}
    if spread and strategy != "random":
        kw["order"] = "spread"
    cfg = PlanConfig(strategy=strategy, budget=2 * n, max_repeat=3, seed=5, **kw)
    a = build_plan(labels, cfg, tokens=tokens, chunk_size=chunk)
    b = build_plan(labels, cfg, tokens=tokens)
    assert np.asarray(a.order).tobytes() == np.asarray(b.order).tobytes()
    assert np.array_equal(a.mixture, b.mixture) and a.per_cluster.keys() == b.per_cluster.keys()


def test_different_seed_different_order_same_counts():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 6, 300).astype(np.int32)
    for strategy in ("clusterclip", "uniform", "random", "temperature"):
        a = build_plan(labels, PlanConfig(strategy=strategy, budget=600, seed=1))
        b = build_plan(labels, PlanConfig(strategy=strategy, budget=600, seed=2))
        assert not np.array_equal(a.order, b.order)
        if strategy != "random":
            assert np.array_equal(a.per_cluster["draws"], b.per_cluster["draws"])
        ca, cb = np.bincount(a.order, minlength=300), np.bincount(b.order, minlength=300)
        for c in range(6):  # same repeat profile per cluster; which documents get the extra repeat varies
            assert np.array_equal(np.sort(ca[labels == c]), np.sort(cb[labels == c])) or strategy == "random"


def test_order_is_a_function_of_inputs_only():
    labels = np.random.default_rng(3).integers(0, 50, 5000).astype(np.int32)
    cfg = PlanConfig(budget=15000, seed=9)
    h = [build_plan(labels, cfg, chunk_size=c).order.tobytes() for c in (1000, 4096, 1 << 20)]
    assert h[0] == h[1] == h[2]


# ------------------------------------------------------------------ memmap output and chunking


def test_memmap_output_atomic_and_read_only(tmp_path):
    labels = np.random.default_rng(0).integers(0, 20, 2000).astype(np.int32)
    cfg = PlanConfig(budget=7000, seed=1)
    mem = build_plan(labels, cfg)
    out = tmp_path / "p" / "plan.npy"
    disk = build_plan(labels, cfg, out=out, chunk_size=333)
    assert isinstance(disk.order, np.memmap) and not disk.order.flags.writeable
    assert np.array_equal(np.load(out), mem.order)
    assert [p.name for p in out.parent.iterdir()] == ["plan.npy"]


def test_failed_build_leaves_no_file(tmp_path):
    labels = np.zeros(10, np.int32)
    with pytest.raises(InfeasiblePlanError):
        build_plan(labels, PlanConfig(budget=100, max_repeat=2), out=tmp_path / "plan.npy")
    assert list(tmp_path.iterdir()) == []


def test_peak_memory_is_not_proportional_to_budget(tmp_path):
    import tracemalloc

    labels = np.random.default_rng(0).integers(0, 100, 20000).astype(np.int32)
    tracemalloc.start()
    build_plan(labels, PlanConfig(budget=1_000_000, max_repeat=60), out=tmp_path / "plan.npy", chunk_size=1 << 14)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 8 * 1_000_000 / 2


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"strategy": "zipf"}, "^strategy must be one of clusterclip, "),
        ({"budget": -1}, r"in 1\.\.9007199254740992 "),
        ({"budget": 10**20}, r"in 1\.\.9007199254740992 "),
        ({"budget": 7.0}, "must be an integer"),
        ({"max_repeat": 0}, ">= 1"),
        ({"budget_unit": "bytes"}, "^budget_unit must be one of docs, tokens, got 'bytes'"),
        ({"tau": float("nan"), "strategy": "temperature"}, r"tau must be in \[-1e\+06, 1e\+06\], got nan"),
        ({"strategy": "weights"}, "needs per-cluster weights"),
        ({"weights": ((0, 1.0),)}, "only used by strategy 'weights'"),
        ({"strategy": "weights", "weights": ((0, -1.0),)}, ">= 0"),
        ({"strategy": "weights", "weights": ((0, 1.0), (0, 2.0))}, "twice"),
        ({"seed": -3}, "seed"),
        ({"window": 0}, "window"),
        ({"order": "zigzag"}, "^order must be one of"),
        ({"strategy": "random", "order": "spread"}, "applies to the cluster strategies"),
    ],
)
def test_config_validation(kwargs, match):
    with pytest.raises(PlanConfigError, match=match):
        PlanConfig(**kwargs)


def test_input_validation():
    with pytest.raises(PlanConfigError, match="empty"):
        build_plan(np.array([], np.int32), PlanConfig())
    with pytest.raises(PlanConfigError, match=">= 0"):
        build_plan(np.array([0, -1]), PlanConfig())
    with pytest.raises(PlanConfigError, match="1-D"):
        build_plan(np.zeros((2, 2), np.int32), PlanConfig())
    with pytest.raises(PlanConfigError, match="needs per-document token counts"):
        build_plan(np.zeros(3, np.int32), PlanConfig(budget_unit="tokens"))
    with pytest.raises(PlanConfigError, match=r"valid cluster ids are 0\.\.2"):
        build_plan(np.array([0, 1, 2]), PlanConfig(strategy="weights", weights=((7, 1.0),)))
    with pytest.raises(PlanConfigError, match="weight 0"):
        build_plan(np.array([0, 1]), PlanConfig(strategy="weights", weights=((0, 0.0), (1, 0.0))))
    with pytest.raises(PlanConfigError, match="chunk_size"):
        build_plan(np.array([0, 1]), PlanConfig(), chunk_size=0)
    assert issubclass(PlanConfigError, ClusterClipError) and issubclass(PlanConfigError, ValueError)


def test_infeasible_budget_names_the_fix():
    labels = np.repeat(np.arange(2, dtype=np.int32), [3, 7])
    with pytest.raises(InfeasiblePlanError, match=r"largest feasible budget is 40.*smallest max_repeat that fits is 5"):
        build_plan(labels, PlanConfig(budget=41, max_repeat=4))
    assert build_plan(labels, PlanConfig(budget=40, max_repeat=4)).order.size == 40
    tokens = np.arange(1, 11, dtype=np.int64)
    with pytest.raises(InfeasiblePlanError, match="largest feasible budget is 110"):
        build_plan(labels, PlanConfig(budget=111, budget_unit="tokens", max_repeat=2), tokens=tokens)


def test_zero_budget_and_default_budget():
    labels = np.array([0, 0, 1, 2, 2, 2], np.int32)
    empty = build_plan(labels, PlanConfig(budget=0))
    assert empty.order.size == 0 and empty.mixture.shape == (0, 3) and empty.repeat_hist.tolist() == [6]
    assert build_plan(labels, PlanConfig()).order.size == 6
    tokens = np.array([1, 2, 3, 4, 5, 6])
    assert tokens[build_plan(labels, PlanConfig(budget_unit="tokens"), tokens=tokens).order].sum() >= 21


def test_water_fill_matches_oracle():
    rng = np.random.default_rng(1)
    for _ in range(50):
        w = rng.random(7) * (rng.random(7) > 0.2)
        caps = np.where(rng.random(7) > 0.3, rng.integers(0, 50, 7).astype(float), np.inf)
        feasible = caps[w > 0].sum()
        if not (w > 0).any():
            continue
        budget = float(min(feasible, rng.integers(0, 200)))
        q, _ = water_fill(w, caps, budget)
        assert q.sum() == pytest.approx(budget) and np.all(q <= caps + 1e-9)
        assert np.allclose(q, _oracle_quotas(w, caps, budget), atol=1e-6)


# ------------------------------------------------------------------ config names and weight files


def test_names_are_stable_and_unique():
    assert PlanConfig(budget=16453).name() == "clusterclip-R4-docs-B16453-s0"
    assert PlanConfig(max_repeat=4).name() == PlanConfig().name()
    assert PlanConfig(max_repeat=4).to_json() == PlanConfig().to_json()
    names = {
        PlanConfig().name(), PlanConfig(seed=1).name(), PlanConfig(strategy="uniform").name(),
        PlanConfig(strategy="temperature", tau=0.3).name(), PlanConfig(strategy="temperature", tau=0.7).name(),
        PlanConfig(strategy="weights", weights=((0, 2.0),)).name(),
        PlanConfig(strategy="weights", weights=((0, 3.0),)).name(), PlanConfig(budget_unit="tokens").name(),
        PlanConfig(window=10).name(), PlanConfig(budget=5).name(), PlanConfig(order="spread").name(),
    }
    assert len(names) == 11
    assert PlanConfig(order="spread").name() == "clusterclip-R4-docs-Bepoch-s0-spread"
    assert all("/" not in n and " " not in n for n in names)
    for cfg in (PlanConfig(strategy="weights", weights=((2, 1.5), (0, 0.0)), budget=9, seed=3),
                PlanConfig(strategy="uniform", order="spread")):
        assert PlanConfig.from_json(json.loads(json.dumps(cfg.to_json()))) == cfg


def test_load_weights_json_and_csv(tmp_path):
    j = tmp_path / "w.json"
    j.write_text('{"3": 0, "1": 2.5}')
    assert load_weights(j) == ((1, 2.5), (3, 0.0))
    c = tmp_path / "w.csv"
    c.write_text("cluster,weight\n0,1.5\n4,0\n")
    assert load_weights(c) == ((0, 1.5), (4, 0.0))
    bad = tmp_path / "bad.csv"
    bad.write_text("0,1\n1,abc\n")
    with pytest.raises(PlanConfigError, match=r"bad\.csv:2"):
        load_weights(bad)
    neg = tmp_path / "neg.json"
    neg.write_text('{"0": -1}')
    with pytest.raises(PlanConfigError, match=">= 0"):
        load_weights(neg)
    with pytest.raises(PlanConfigError, match="cannot read"):
        load_weights(tmp_path / "missing.csv")


# ------------------------------------------------------------------ run-directory stage


def _fake_run(tmp_path, n=500, k=8, with_tokens=True):
    run = RunDir(tmp_path / "run")
    rng = np.random.default_rng(0)
    labels = rng.integers(0, k, n).astype(np.int32)
    save_npy(run.path("labels.npy"), labels)
    save_npy(run.path("sizes.npy"), np.bincount(labels, minlength=k).astype(np.int64))
    write_record(run, "cluster", {"k": k}, "x", ["labels.npy", "sizes.npy"], 0.0)
    if with_tokens:
        save_npy(run.path("tokens.npy"), rng.integers(1, 100, n).astype(np.int64))
        write_record(run, "corpus", {}, "y", ["tokens.npy"], 0.0)
    return run, labels


def test_plan_stage_writes_artifacts_and_skips_when_fresh(tmp_path):
    run, labels = _fake_run(tmp_path)
    cfg = PlanConfig(budget=1500, seed=2)
    rec = plan_stage(run, cfg).to_json()
    folder = run.path("plans", cfg.name())
    for f in ("plan.npy", "cluster_draws.npy", "cluster_unique.npy", "cluster_max_repeat.npy",
              "cluster_exhausted_at.npy", "mixture.npy", "repeat_hist.npy", "cluster_tokens.npy"):
        assert (folder / f).is_file()
        assert f"plans/{cfg.name()}/{f}" in rec["artifacts"]
    assert rec["stage"] == f"plans/{cfg.name()}/plan" and rec["stats"]["length"] == 1500
    assert load_json(folder / "plan.json")["config"] == cfg.to_json()
    assert np.array_equal(load_npy(folder / "plan.npy"), build_plan(labels, cfg).order)
    mtime = (folder / "plan.npy").stat().st_mtime_ns
    again = plan_stage(run, cfg).to_json()
    assert again["finished_at"] == rec["finished_at"] and (folder / "plan.npy").stat().st_mtime_ns == mtime
    plan_stage(run, PlanConfig(budget=1500, seed=3))
    assert list_plans(run) == sorted([cfg.name(), PlanConfig(budget=1500, seed=3).name()])
    forced = plan_stage(run, cfg, force=True).to_json()
    assert artifact_checksums(forced) == artifact_checksums(rec)


def test_plan_stage_reruns_when_labels_change(tmp_path):
    run, labels = _fake_run(tmp_path)
    cfg = PlanConfig(budget=800)
    first = plan_stage(run, cfg).to_json()
    save_npy(run.path("labels.npy"), (labels + 1) % 8)
    write_record(run, "cluster", {"k": 8}, "x2", ["labels.npy", "sizes.npy"], 0.0)
    second = plan_stage(run, cfg).to_json()
    assert second["inputs_hash"] != first["inputs_hash"]


def test_plan_stage_token_budget_needs_corpus(tmp_path):
    run, _ = _fake_run(tmp_path, with_tokens=False)
    assert "cluster_tokens.npy" not in str(plan_stage(run, PlanConfig(budget=10)).to_json()["artifacts"])
    with pytest.raises(ClusterClipError, match="corpus"):
        plan_stage(run, PlanConfig(budget=100, budget_unit="tokens"))


def test_list_plans_empty(tmp_path):
    assert list_plans(RunDir(tmp_path)) == []


@pytest.mark.parametrize("strategy", ["uniform", "temperature"])
def test_tiny_cluster_with_thousands_of_passes(strategy):
    """A 2-document cluster drawn thousands of times spans many pass blocks within one chunk."""
    labels = np.concatenate([np.zeros(2, np.int32), np.ones(3000, np.int32)])
    cfg = PlanConfig(strategy=strategy, tau=-0.5, budget=12000, seed=1)
    plans = [build_plan(labels, cfg, chunk_size=c) for c in (1 << 20, 999)]
    assert plans[0].order.tobytes() == plans[1].order.tobytes()
    order = plans[0].order
    counts = np.bincount(order, minlength=labels.size)
    draws = plans[0].per_cluster["draws"]
    assert abs(int(counts[0]) - int(counts[1])) <= 1 and counts[0] + counts[1] == draws[0]
    assert np.ptp(counts[2:]) <= 1
    first = order[labels[order] == 0]
    for p in range(0, 200, 2):  # every pass of the tiny cluster is a permutation of its two documents
        assert sorted(first[p:p + 2].tolist()) == [0, 1]


@pytest.mark.parametrize("chunk", [997, 1 << 20])
def test_passes_are_fresh_permutations_in_rounds(chunk):
    """Equal weights: every pass of a cluster is a permutation of it, consecutive passes differ, and
    chunks that cut through pass blocks (scratch assembly) give the same bytes."""
    labels = np.concatenate([np.zeros(3000, np.int32), np.ones(7, np.int32), np.full(600, 2, np.int32)])
    cfg = PlanConfig(strategy="clusterclip", budget=3 * 3000 + 3 * 7 + 3 * 600, max_repeat=3, seed=4)
    plan = build_plan(labels, cfg, chunk_size=chunk)
    assert plan.order.tobytes() == build_plan(labels, cfg, chunk_size=5).order.tobytes()
    for c, n in ((0, 3000), (1, 7), (2, 600)):
        seq = plan.order[labels[plan.order] == c]
        rows = seq.reshape(3, n)
        members = np.flatnonzero(labels == c)
        for row in rows:
            assert np.array_equal(np.sort(row), members)
        if n > 7:
            assert not np.array_equal(rows[0], rows[1]) and not np.array_equal(rows[1], rows[2])


def test_budget_equal_to_the_capacity_survives_rounding():
    """Water level ``cap / w * w`` can round below ``cap``; a budget of exactly the capacity is feasible."""
    labels, tokens = np.array([0], np.int32), np.array([28])
    plan = build_plan(labels, PlanConfig(strategy="temperature", budget=56, budget_unit="tokens", max_repeat=2),
                      tokens=tokens)
    assert plan.order.tolist() == [0, 0]


@pytest.mark.parametrize("strategy", ["clusterclip", "uniform", "temperature", "random"])
def test_a_token_budget_is_met_within_one_document_whatever_the_number_of_clusters(strategy):
    """Every group overshoots its token quota by less than a document; the plan gives back last draws so that
    its total holds the budget plus less than one document (so plans of several strategies compare at equal
    tokens, issue 43)."""
    rng = np.random.default_rng(11)
    labels = rng.integers(0, 300, 20_000)
    tokens = rng.integers(1, 2_000, 20_000)
    budget = int(tokens.sum() * 1.7)
    plan = build_plan(labels, PlanConfig(strategy=strategy, budget=budget, budget_unit="tokens", max_repeat=50),
                      tokens=tokens)
    got = int(tokens[np.asarray(plan.order)].sum())
    assert got == plan.stats["tokens"] and 0 <= got - budget < tokens.max()
