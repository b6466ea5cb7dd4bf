"""The shortcuts that make a plan over strata fast give what the direct computations give: the quantile tiers by
brackets (``plan/quantiles.py``) are ``np.quantile``'s edges bit for bit, and a run placed in parts on threads is the
order placed in one part."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import clusterclip.plan.passes as passes_module
import clusterclip.plan.quantiles as Q
from clusterclip.plan import PlanConfig, build_plan
from clusterclip.plan.interleave import Interleave, Segments, _cluster_parts


@pytest.fixture
def small_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bracketing path on arrays of thousands of values (it serves 2**18 and more)."""
    monkeypatch.setattr(Q, "SMALL", 2_000)
    monkeypatch.setattr(Q, "SAMPLE", 1_024)


def field(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "uniform":
        return rng.random(n)
    if kind == "normal-nan":
        return np.where(rng.random(n) < 0.1, np.nan, rng.normal(size=n) * 1e3)
    if kind == "ties":
        return rng.integers(0, 40, n).astype(np.float64)
    if kind == "sorted":
        return np.sort(rng.random(n))
    if kind == "periodic":
        return np.tile(rng.random(97), n // 97 + 1)[:n]
    return np.r_[np.full(n // 2, -0.0), rng.random(n - n // 2) * -1e-300]  # signed zeros, subnormals


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])  # constants only
@given(st.integers(0, 2**32 - 1), st.integers(3_000, 12_000), st.integers(2, 8),
       st.sampled_from(["uniform", "normal-nan", "ties", "sorted", "periodic", "zeros"]))
def test_bracketed_quantile_tiers_are_numpys_bit_for_bit(small_fast_path, seed, n, tiers, kind):
    v = field(kind, n, np.random.default_rng(seed))
    ok = ~np.isnan(v)
    qs, index = Q.quantile_tiers(v, tiers)
    want = np.quantile(v[ok], np.linspace(0, 1, tiers + 1))
    assert qs.tobytes() == want.tobytes()
    assert np.array_equal(index[ok], np.searchsorted(want[1:-1], v[ok], side="right"))
    assert (index[~ok] == 0).all()


def test_the_brackets_are_what_serves_a_plain_field(small_fast_path, monkeypatch):
    """On a field without long ties the quantiles come from the brackets, not from the fallback."""
    def refuse(*_: object) -> None:
        raise AssertionError("fell back to np.quantile")

    monkeypatch.setattr(Q, "reference_tiers", refuse)
    v = np.random.default_rng(3).random(20_000)
    qs, _ = Q.quantile_tiers(v, 5)
    assert qs.tobytes() == np.quantile(v, np.linspace(0, 1, 6)).tobytes()


def test_segments_give_each_draws_exact_cluster_key_and_stratum():
    rng = np.random.default_rng(0)
    k, strata = 7, 30
    cluster = np.sort(rng.integers(0, k, strata))
    draws = rng.integers(1, 50, strata)
    inter = Interleave(cluster, draws, rng.random(strata), k)
    s = np.arange(strata)
    ilo = rng.integers(0, draws)
    need = draws - ilo
    keep = need > 0
    seg = Segments(s[keep], need[keep], ilo[keep], inter)
    draw = np.concatenate([np.arange(a, b) for a, b in zip(ilo[keep], draws[keep], strict=True)])
    owner = np.repeat(s[keep], need[keep])
    at = rng.permutation(draw.size)[:40]
    c, key, stratum = seg.exact(at)
    assert np.array_equal(seg.draw, draw)
    assert np.array_equal(stratum, owner[at]) and np.array_equal(c, cluster[owner[at]])
    assert np.array_equal(key, (draw[at] + inter.u[owner[at]]) / draws[owner[at]])


def test_parts_hold_whole_clusters_and_every_segment():
    cluster = np.repeat(np.arange(50), np.random.default_rng(1).integers(1, 5, 50))
    end = np.cumsum(np.full(cluster.size, 2_000))
    parts = _cluster_parts(cluster, end, 3)
    assert len(parts) == 3 and parts[0][0] == 0 and parts[-1][1] == cluster.size
    assert all(a == b0 for (_, a), (b0, _) in pairwise(parts))
    assert all(cluster[a - 1] != cluster[a] for a, _ in parts[1:])
    assert _cluster_parts(cluster[:3], end[:3], 3) == [(0, 3)]  # a small run stays whole


@pytest.mark.parametrize("strategy", ["clusterclip", "temperature"])
def test_a_run_placed_on_threads_is_the_run_placed_in_one_part(monkeypatch, strategy):
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 300, 60_000)
    quality = rng.random(labels.size)
    config = PlanConfig(strategy=strategy, max_repeat=4, budget=120_000, strata="cluster,quality:4",
                        tier_weights="0,1,2,3", tier_caps="0,2,3,4")
    orders = []
    for cpus in (1, 4):
        monkeypatch.setattr(passes_module.os, "cpu_count", lambda cpus=cpus: cpus)
        orders.append(np.asarray(build_plan(labels, config, fields={"quality": quality}, chunk_size=1 << 17).order))
    assert np.array_equal(orders[0], orders[1])


def test_an_edge_past_half_way_is_interpolated_from_above_as_numpy_does(small_fast_path):
    """With ``t >= 0.5`` NumPy computes ``b - (b - a) * (1 - t)``, which differs from ``a + (b - a) * t`` in the last
    bit for these two order statistics (ranks 999 and 1000 of 5,000: the first quintile, ``t`` = 0.8)."""
    a, b = 0.997209935789211, 10.805563323551512
    v = np.random.default_rng(2).permutation(np.r_[np.linspace(-5, 0.5, 999), a, b, np.linspace(11, 20, 3_999)])
    qs, _ = Q.quantile_tiers(v, 5)
    assert qs.tobytes() == np.quantile(v, np.linspace(0, 1, 6)).tobytes()
    assert qs[1] != a + (b - a) * ((5_000 - 1) * 0.2 - 999)
