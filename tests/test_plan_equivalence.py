"""The streaming planner equals its in-memory definition, byte for byte.

``reference_order`` computes every draw's virtual time and sorts once; ``build_plan`` streams the same
merge in chunks (and takes the rounds fast path where all groups share one scale). Both must agree
for every strategy, order and budget unit, at any chunk size.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from clusterclip.plan import PlanConfig, build_plan, reference_order
from clusterclip.plan.build import plan_draws
from clusterclip.plan.order import emit

STRATEGY_KW = {
    "clusterclip": {"max_repeat": 3},
    "uniform": {},
    "random": {"max_repeat": 3},
    "temperature": {"tau": 0.3, "max_repeat": 5},
    "weights": {"weights": ((0, 2.0), (1, 0.0), (2, 0.5))},
}


@hs.composite
def cases(draw):
    k = draw(hs.integers(1, 9))
    sizes = draw(hs.lists(hs.integers(0, 40), min_size=k, max_size=k))
    if sum(sizes) == 0:
        sizes[0] = 3
    rng = np.random.default_rng(draw(hs.integers(0, 2**16)))
    labels = np.repeat(np.arange(k, dtype=np.int32), sizes)
    rng.shuffle(labels)
    tokens = rng.integers(0, 60, labels.size).astype(np.int64)
    strategy = draw(hs.sampled_from(sorted(STRATEGY_KW)))
    order = "equal-rate" if strategy == "random" else draw(hs.sampled_from(["equal-rate", "spread"]))
    unit = draw(hs.sampled_from(["docs", "tokens"]))
    total = labels.size if unit == "docs" else int(tokens.sum())
    frac = draw(hs.floats(0, 1))
    cap = STRATEGY_KW[strategy].get("max_repeat", 2)
    budget = int(frac * cap * total * 0.95)
    kw = dict(STRATEGY_KW[strategy])
    if strategy == "weights":
        # build_plan counts clusters up to the largest label present: trailing empty clusters do not exist
        present = max(c for c, s in enumerate(sizes) if s) + 1
        kw["weights"] = tuple((c, w) for c, w in kw["weights"] if c < present)
        if not any(s for c, s in enumerate(sizes) if c != 1):  # only the cluster weighted 0 has documents
            kw["weights"] = ((1, 1.0),)
    config = PlanConfig(strategy=strategy, order=order, budget_unit=unit, budget=budget,
                        seed=draw(hs.integers(0, 9)), **kw)
    return labels, tokens, config, draw(hs.sampled_from([1, 5, 64, 1 << 20]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_streaming_order_equals_the_reference(case):
    labels, tokens, config, chunk = case
    plan = build_plan(labels, config, tokens=tokens, chunk_size=chunk)
    assert plan.order.tobytes() == reference_order(labels, config, tokens=tokens).tobytes()


def _merged(labels, config, tokens, chunk, rounds):
    with plan_draws(labels, config, tokens, None, chunk) as p:
        out = np.empty(int(p.draws.sum()), np.int64)
        chunks = list(emit(p.scale, p.quotas.u, p.quotas.rank, p.draws, p.passes, out, chunk, rounds=rounds))
    return out, chunks


@pytest.mark.parametrize("strategy", ["clusterclip", "uniform", "random"])
@pytest.mark.parametrize("chunk", [3, 100, 1 << 20])
def test_rounds_fast_path_equals_the_general_merge(strategy, chunk):
    rng = np.random.default_rng(7)
    labels = np.repeat(np.arange(12, dtype=np.int32), rng.zipf(1.6, 12).clip(1, 500))
    rng.shuffle(labels)
    config = PlanConfig(strategy=strategy, budget=3 * labels.size - 5, max_repeat=3, seed=3)
    fast, fast_chunks = _merged(labels, config, None, chunk, rounds=True)
    slow, slow_chunks = _merged(labels, config, None, chunk, rounds=False)
    assert all(c.active is not None for c in fast_chunks)
    assert all(c.groups is not None for c in slow_chunks)
    assert fast.tobytes() == slow.tobytes()
    ends = {int(g): int(p) for c in fast_chunks for g, p in zip(c.last, c.last_pos, strict=True)}
    assert ends == {int(g): int(p) for c in slow_chunks for g, p in zip(c.last, c.last_pos, strict=True)}


def test_random_is_one_pseudo_cluster():
    """``random`` draws passes of one group holding every document: each epoch a permutation."""
    labels = np.random.default_rng(0).integers(0, 5, 1000).astype(np.int32)
    plan = build_plan(labels, PlanConfig(strategy="random", budget=2500, max_repeat=3, seed=1))
    uniform_one = build_plan(np.zeros(1000, np.int32), PlanConfig(strategy="uniform", budget=2500, seed=1))
    assert plan.order.tobytes() == uniform_one.order.tobytes()
    for e in range(2):
        assert np.array_equal(np.sort(plan.order[e * 1000:(e + 1) * 1000]), np.arange(1000))
    assert np.array_equal(plan.per_cluster["draws"], np.bincount(labels[plan.order], minlength=5))
    assert np.array_equal(plan.mixture.sum(axis=0), plan.per_cluster["draws"])


def test_random_exhaustion_is_where_a_cluster_reaches_the_cap():
    labels = np.random.default_rng(2).integers(0, 4, 300).astype(np.int32)
    plan = build_plan(labels, PlanConfig(strategy="random", budget=600, max_repeat=2, seed=0), chunk_size=7)
    order = np.asarray(plan.order)
    for c in range(4):
        where = np.flatnonzero(labels[order] == c)
        assert plan.per_cluster["exhausted_at"][c] == where[-1]
        assert where.size == 2 * (labels == c).sum()
