"""Plans over strata (docs/sampling.md#strata): cluster x tiers of per-document fields, per-tier rates and caps,
quality-weighted draws, rehydration, and their invariants on random inputs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from clusterclip.errors import InfeasiblePlanError
from clusterclip.plan import PlanConfig, PlanConfigError, build_plan
from clusterclip.plan.interleave import cluster_key_order, run_layout, stable_order
from clusterclip.plan.order import Chunk
from clusterclip.plan.reference import reference_strata_order
from clusterclip.plan.strata import WITHIN_BINS, build_strata, field_values


def corpus(n: int = 1000, k: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Cluster labels with one large cluster and a numeric quality field."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    labels[: n // 3] = 0
    return labels, rng.random(n)


def quartiles(quality: np.ndarray) -> np.ndarray:
    edges = np.quantile(quality, [0.25, 0.5, 0.75])
    return np.searchsorted(edges, quality, side="right")


def test_the_issue_example_never_draws_tier_0_keeps_every_tier_cap_and_balances_clusters():
    """The done-when example: 1,000 documents, `--strata cluster,quality:4 --tier-weights 0,1,1,1
    --max-repeats-by-tier 0,2,3,4`: no tier-0 draw, no document over its tier's cap, clusters balanced as
    ClusterClip balances them (equal draws but for the clusters whose strata ran out)."""
    labels, quality = corpus()
    cfg = PlanConfig(strategy="clusterclip", strata="cluster,quality:4", tier_weights="0,1,1,1",
                     tier_caps="0,2,3,4", budget=1800)
    plan = build_plan(labels, cfg, fields={"quality": quality})
    order = np.asarray(plan.order)
    tier = quartiles(quality)
    assert np.array_equal(plan.tiers, tier)
    counts = np.bincount(order, minlength=labels.size)
    assert counts[tier == 0].sum() == 0
    assert (counts <= np.array([0, 2, 3, 4])[tier]).all()
    draws = plan.per_cluster["draws"]
    capacity = np.bincount(labels, weights=np.array([0, 2, 3, 4])[tier], minlength=draws.size)
    open_ = draws < capacity
    assert draws.sum() == 1800 and open_.any()
    assert draws[open_].max() - draws[open_].min() <= 1
    assert (draws[~open_] <= draws[open_].min()).all()  # a cluster out of room drew less than the others
    first = np.flatnonzero(plan.per_cluster["exhausted_at"] >= 0)
    until = int(plan.per_cluster["exhausted_at"][first].min()) if first.size else order.size
    early = np.bincount(labels[order[:until]], minlength=draws.size)
    assert early.max() - early.min() <= 1  # equal-rate: round after round of every cluster until one runs out


def test_stratified_order_equals_its_reference_and_its_bytes_do_not_depend_on_chunks():
    labels, quality = corpus(400, 5, 1)
    for cfg in (PlanConfig(strata="cluster,quality:3", tier_weights="1,2,4", budget=900),
                PlanConfig(strategy="temperature", tau=0.3, strata="cluster,quality:3", tier_caps="1,2,3",
                           budget=700, max_repeat=3),
                PlanConfig(strategy="random", strata="cluster,quality:3", tier_weights="0,1,3", budget=500),
                PlanConfig(strata="cluster,quality:3", order="spread", budget=800)):
        fields = {"quality": quality}
        plan = build_plan(labels, cfg, fields=fields)
        assert np.array_equal(plan.order, reference_strata_order(labels, cfg, fields))
        assert np.array_equal(plan.order, build_plan(labels, cfg, fields=fields, chunk_size=37).order)


def test_tier_weights_are_per_document_rates_inside_a_cluster():
    """Tier 2 at weight 4 is drawn four times as often, document for document, as tier 1 at weight 1 (no cap)."""
    labels, quality = corpus(3000, 3, 2)
    cfg = PlanConfig(strategy="uniform", strata="cluster,quality:3", tier_weights="0,1,4", budget=6000)
    plan = build_plan(labels, cfg, fields={"quality": quality})
    tier = plan.tiers
    counts = np.bincount(np.asarray(plan.order), minlength=labels.size)
    rate = [counts[tier == t].mean() for t in range(3)]
    assert rate[0] == 0 and rate[2] / rate[1] == pytest.approx(4, rel=0.02)


def test_a_categorical_axis_and_missing_values():
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 4, 600)
    source = np.array(rng.choice(["web", "books", "code"], 600), dtype=object)
    source[:30] = None
    cfg = PlanConfig(strategy="uniform", strata="cluster,source", tier_weights="source=web:2,books:1,code:0,missing:0",
                     budget=500)
    plan = build_plan(labels, cfg, fields={"source": source})
    drawn = source[np.asarray(plan.order)]
    assert set(drawn.tolist()) == {"web", "books"}
    assert plan.stats["strata"]["tiers"][-1]["label"] == "missing" and plan.stats["strata"]["tiers"][-1]["docs"] == 30
    with pytest.raises(PlanConfigError, match="'magazines' of field 'source', which has no such tier"):
        build_plan(labels, PlanConfig(strata="cluster,source", tier_weights="source=magazines:1"),
                   fields={"source": source})
    with pytest.raises(PlanConfigError, match=r"for categorical field .source.: name each value"):
        PlanConfig(strata="cluster,source", tier_weights="1,2")
    with pytest.raises(PlanConfigError, match="names field 'lang', which the corpus did not keep"):
        build_plan(labels, PlanConfig(strata="cluster,lang"), fields={"source": source})


def test_two_axes_multiply_rates_and_take_the_least_cap():
    rng = np.random.default_rng(4)
    labels = np.zeros(2000, np.int64)
    quality, lang = rng.random(2000), np.array(rng.choice(["en", "de"], 2000), dtype=object)
    cfg = PlanConfig(strategy="uniform", strata="cluster,quality:2,lang",
                     tier_weights="quality=1,3;lang=en:1,de:2", tier_caps="lang=de:1", budget=3000, max_repeat=9)
    strata = build_strata(labels, cfg, {"quality": quality, "lang": lang})
    by_label = dict(zip(strata.tier_labels, strata.tier_rate.tolist(), strict=True))
    assert by_label == {"0/de": 2.0, "0/en": 1.0, "1/de": 6.0, "1/en": 3.0}
    caps = dict(zip(strata.tier_labels, strata.tier_cap.tolist(), strict=True))
    assert caps == {"0/de": 1.0, "0/en": 9.0, "1/de": 1.0, "1/en": 9.0}
    counts = np.bincount(np.asarray(build_plan(labels, cfg, fields={"quality": quality, "lang": lang}).order),
                         minlength=2000)
    assert counts[lang == "de"].max() <= 1


def test_within_quality_draws_better_documents_more_often_inside_each_cluster():
    labels, quality = corpus(4000, 4, 5)
    plan = build_plan(labels, PlanConfig(strategy="uniform", within="quality", quality_mix=1.0, budget=8000),
                      fields={"quality": quality})
    counts = np.bincount(np.asarray(plan.order), minlength=labels.size)
    bins = plan.tiers
    means = [counts[bins == b].mean() for b in range(WITHIN_BINS)]
    assert all(a < b for a, b in itertools.pairwise(means))
    even = build_plan(labels, PlanConfig(strategy="uniform", within="quality", quality_mix=0.0, budget=8000),
                      fields={"quality": quality})
    flat = np.bincount(np.asarray(even.order), minlength=labels.size)
    assert np.ptp([flat[bins == b].mean() for b in range(WITHIN_BINS)]) < 0.2
    with pytest.raises(PlanConfigError, match="quality_mix applies with within"):
        PlanConfig(quality_mix=0.9)


def test_an_infeasible_stratified_budget_names_the_room_and_the_fixes():
    labels, quality = corpus(200, 2, 6)
    with pytest.raises(InfeasiblePlanError, match=r"drawable strata \(rate > 0\) hold 150 documents; lower the budget "
                                                  "to 150 or raise"):
        build_plan(labels, PlanConfig(strata="cluster,quality:4", tier_weights="0,0,1,1", tier_caps="0,0,1,2",
                                      budget=151), fields={"quality": quality})


def test_token_budgets_over_strata_keep_the_caps_and_reach_the_tokens():
    labels, quality = corpus(600, 4, 7)
    tokens = np.random.default_rng(7).integers(5, 400, 600)
    cfg = PlanConfig(strata="cluster,quality:3", tier_weights="0,1,2", tier_caps="0,2,3", budget_unit="tokens",
                     budget=int(tokens.sum()))
    plan = build_plan(labels, cfg, tokens=tokens, fields={"quality": quality})
    counts = np.bincount(np.asarray(plan.order), minlength=600)
    assert (counts <= np.array([0, 2, 3])[plan.tiers]).all()
    assert 0 <= plan.stats["tokens"] - tokens.sum() < tokens.max()


@st.composite
def strata_case(draw):
    n = draw(st.integers(20, 300))
    k = draw(st.integers(1, 6))
    t = draw(st.integers(2, 4))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    quality = rng.random(n)
    quality[rng.random(n) < 0.1] = np.nan
    weights = [draw(st.sampled_from([0, 0.5, 1, 2, 3])) for _ in range(t)]
    caps = [draw(st.integers(0, 4)) for _ in range(t)]
    strategy = draw(st.sampled_from(["clusterclip", "uniform", "random", "temperature"]))
    order = draw(st.sampled_from(["equal-rate", "spread"])) if strategy != "random" else "equal-rate"
    return labels, quality, t, weights, caps, strategy, order, seed


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strata_case(), st.floats(0.05, 1.0))
def test_invariants_on_random_strata(case, share):
    """Any strata, rates, caps and strategy: rate-0 tiers are never drawn, no document exceeds its tier's cap,
    the budget is met exactly, and the same seed gives the same bytes at any chunk size."""
    labels, quality, t, weights, caps, strategy, order, seed = case
    quality_tiers = np.where(np.isnan(quality), t, 0)
    ok = ~np.isnan(quality)
    if ok.any():
        edges = np.quantile(quality[ok], np.linspace(0, 1, t + 1))
        quality_tiers[ok] = np.searchsorted(edges[1:-1], quality[ok], side="right")
    rate = np.array([*weights, 1.0])[quality_tiers]
    cap = np.minimum(np.array([*caps, 3]), 3)[quality_tiers]
    room = int(cap[rate > 0].sum())
    assume(room > 0)
    budget = max(1, int(room * share))
    cfg = PlanConfig(strategy=strategy, strata=f"cluster,quality:{t}",
                     tier_weights=",".join(map(str, weights)), tier_caps=",".join(map(str, caps)), max_repeat=3,
                     budget=budget, seed=seed % 7, order=order)
    fields = {"quality": quality}
    tokens = np.random.default_rng(seed).integers(1, 50, labels.size) if seed % 2 else None  # counted, else closed form
    plan = build_plan(labels, cfg, fields=fields, tokens=tokens)
    counts = np.bincount(np.asarray(plan.order), minlength=labels.size)
    assert np.asarray(plan.order).size == budget
    assert (counts[rate == 0] == 0).all()
    assert (counts <= cap).all()
    assert np.array_equal(plan.order, build_plan(labels, cfg, fields=fields, chunk_size=11).order)
    assert np.array_equal(plan.tiers, quality_tiers)
    _check_statistics(plan, labels, counts, rate, cap, outer=labels if strategy != "random" else 0 * labels)
    assert np.array_equal(plan.repeat_hist, np.bincount(counts))
    assert plan.stats["docs_at_cap"] == int(((counts >= cap) & (cap > 0)).sum())
    if tokens is not None:
        k = plan.per_cluster["size"].size
        assert np.array_equal(plan.per_cluster["tokens"], np.bincount(labels, weights=counts * tokens, minlength=k))


def _check_statistics(plan, labels, counts, rate, cap, outer):
    """The plan's per-cluster and per-stratum statistics against a count over its order."""
    k = plan.per_cluster["size"].size
    per, stratum = plan.per_cluster, plan.per_stratum
    assert np.array_equal(per["draws"], np.bincount(labels, weights=counts, minlength=k))
    assert np.array_equal(per["unique"], np.bincount(labels, weights=counts > 0, minlength=k))
    top = np.zeros(k, np.int64)
    np.maximum.at(top, labels, counts)
    assert np.array_equal(per["max_repeat"], top)
    last = np.full(k, -1)
    order = np.asarray(plan.order)
    last[labels[order]] = np.arange(order.size)
    live = rate > 0
    closed = np.bincount(labels, weights=live & (counts < cap), minlength=k) == 0
    done = closed & (np.bincount(labels, weights=live, minlength=k) > 0) & (last >= 0)
    assert np.array_equal(per["exhausted_at"], np.where(done, last, -1))
    of = {(c, t): i for i, (c, t) in enumerate(zip(stratum["cluster"].tolist(), stratum["tier"].tolist(), strict=True))}
    doc_stratum = np.array([of[c, t] for c, t in zip(outer.tolist(), plan.tiers.tolist(), strict=True)])
    assert np.array_equal(stratum["draws"], np.bincount(doc_stratum, weights=counts, minlength=len(of)))
    assert np.array_equal(stratum["unique"], np.bincount(doc_stratum, weights=counts > 0, minlength=len(of)))
    assert np.array_equal(stratum["size"], np.bincount(doc_stratum, minlength=len(of)))


def test_field_values_of_arrays_and_categories():
    assert field_values(np.array([1, 2])).numeric
    cat = field_values(np.array(["b", None, "a"], dtype=object))
    assert cat.categories == ("a", "b") and cat.values.tolist() == [1, -1, 0]


def test_the_summary_says_when_plans_differ_in_tokens():
    from clusterclip.contract.plan_notes import tokens_note

    plans = {"clusterclip-R4-docs": {"tokens": 135_680}, "random-Rinf-docs": {"tokens": 585_002}}
    note = tokens_note(plans)
    assert note is not None and "4.3x" in note and "--budget-unit tokens" in note
    assert tokens_note({"a": {"tokens": 100}, "b": {"tokens": 109}}) is None
    assert tokens_note({**plans, "x-cont-ab-at5": {"tokens": 1}}) == note  # continuations are not compared


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([0, 20_000, 2**20]))
def test_the_run_order_is_the_exact_cluster_key_stratum_order_even_where_the_sum_rounds(seed, offset):
    """Keys 1e-13 apart (closer than the last bit of ``cluster + key`` at a large cluster index) are ordered by the
    exact key and stratum, as the oracle's lexsort orders them."""
    rng = np.random.default_rng(seed)
    local, key, stratum = [], [], []
    for c in range(int(rng.integers(1, 30))):
        for s in range(int(rng.integers(1, 4))):
            d = int(rng.integers(1, 6))
            near = rng.random() + rng.integers(-3, 3, d) * 1e-13
            k = np.sort(np.clip(np.where(rng.random(d) < 0.5, near, rng.random(d)), 0, 1 - 1e-16))
            local += [c + offset] * d
            key += k.tolist()
            stratum += [3 * c + s] * d
    local, key, stratum = np.array(local), np.array(key), np.array(stratum)

    class Exact:
        def exact(self, at):
            return local[at], key[at], stratum[at]

    assert np.array_equal(cluster_key_order(local + key, Exact()), np.lexsort((stratum, key, local)))


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([7, 2**16, 2**16 + 9, 2**21]))
def test_stable_order_is_the_stable_argsort_at_every_width(seed, top):
    values = np.random.default_rng(seed).integers(0, top, 5_000)
    assert np.array_equal(stable_order(values, top), np.argsort(values, kind="stable"))


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_the_layout_of_rounds_is_the_radix_layout_of_their_clusters(seed):
    rng = np.random.default_rng(seed)
    k, run, pos = 40, [], 100
    for _ in range(int(rng.integers(1, 6))):
        active = rng.permutation(k)[: int(rng.integers(1, k))]
        rounds = int(rng.integers(1, 5))
        run.append(Chunk(pos, rounds * active.size, None, active, np.zeros(0, np.int64), np.zeros(0, np.int64)))
        pos += rounds * active.size
    clusters = np.concatenate([np.tile(ch.active, ch.count // ch.active.size) for ch in run])
    count, position = run_layout(run, k)
    assert np.array_equal(count, np.bincount(clusters, minlength=k))
    assert np.array_equal(position, np.argsort(clusters, kind="stable"))
