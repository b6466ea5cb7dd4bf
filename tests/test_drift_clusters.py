"""The neighbourhood tests of ``add``'s drift report: the pooled and per-cluster cuts at one level
(``clusterclip.add.drift.cluster_cuts``, ``neighbour_level``) and the clusters' two-sample test (``cluster_test``)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as hs

from clusterclip.add.drift import (
    CLUSTER_REFERENCE,
    DRIFT_PERCENTILE,
    _neighbour_flags,
    cluster_cuts,
    cluster_test,
    drift_report,
    neighbour_level,
)
from clusterclip.store import save_npy


def _report(tmp_path, ref, new):
    """The drift report of new documents ``new = (sims, labels)`` against reference documents ``ref`` (all close to
    a centroid, so only the neighbourhood tests can flag them)."""
    scores, labels = tmp_path / "s.npy", tmp_path / "l.npy"
    k = int(max(ref[1].max(), new[1].max())) + 1
    save_npy(scores, np.full(len(ref[0]), 0.5, np.float32))
    save_npy(labels, np.asarray(ref[1], np.int32))
    sizes = np.bincount(ref[1], minlength=k)
    return drift_report((scores, labels), len(ref[0]), np.full(len(new[0]), 0.9, np.float32), new[1], sizes, 0.1,
                        None, (np.asarray(ref[0], np.float32), np.asarray(new[0], np.float32), ref[1]))


@given(sizes=hs.lists(hs.integers(0, 60), min_size=1, max_size=6), seed=hs.integers(0, 2**16))
@settings(max_examples=60, deadline=None)
def test_cluster_cuts_are_the_conformal_rank_of_each_clusters_own_values(sizes, seed):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(len(sizes)), sizes).astype(np.int32)
    rng.shuffle(labels)
    sims = rng.random(labels.size).astype(np.float32)
    cuts = cluster_cuts(sims, labels, len(sizes) + 1, -1.0)
    assert cuts.shape == (len(sizes) + 1,) and cuts[-1] == np.float32(-1.0)
    for c, m in enumerate(sizes):
        rank = int(np.floor(DRIFT_PERCENTILE / 100 * (m + 1)))
        want = np.sort(sims[labels == c])[rank - 1] if m >= CLUSTER_REFERENCE else np.float32(-1.0)
        assert cuts[c] == want


def test_a_new_domain_in_a_dense_cluster_is_new_though_above_the_pooled_cut(tmp_path):
    """Cluster 0's documents have close neighbours (0.9-1.0), cluster 1's sparse ones (0.3-0.6): the pooled 5th
    percentile is about 0.32. New documents at 0.7 in cluster 0 are far below what that cluster shows, and all
    are new; new documents typical of either cluster are not (about 5 % of them fall below by chance)."""
    rng = np.random.default_rng(0)
    scores, labels = tmp_path / "s.npy", tmp_path / "l.npy"
    save_npy(scores, np.full(400, 0.5, np.float32))
    save_npy(labels, np.repeat(np.arange(2), 200).astype(np.int32))
    ref_labels = np.repeat(np.arange(2), 200).astype(np.int32)
    ref_sims = np.concatenate([rng.uniform(0.9, 1.0, 200), rng.uniform(0.3, 0.6, 200)]).astype(np.float32)
    new_labels = np.array([0] * 100 + [0] * 400 + [1] * 400)
    new_sims = np.concatenate([np.full(100, 0.7), rng.uniform(0.9, 1.0, 400), rng.uniform(0.3, 0.6, 400)])
    report = drift_report((scores, labels), 400, np.full(900, 0.9, np.float32), new_labels, np.array([200, 200]),
                          0.1, None, (ref_sims, new_sims.astype(np.float32), ref_labels))
    assert report["neighbour_cut"] < 0.35 and report["clusters_with_own_cut"] == 2
    flagged = report["below_neighbour_cut"]
    assert 100 <= flagged <= 100 + 80  # every one of the new domain, and some 5 % of the 800 typical ones
    assert report["below_cut"] == 0


def test_a_new_domain_in_a_broad_cluster_is_new_though_above_that_clusters_own_cut(tmp_path):
    """Minipile's case: cluster 1 (a tenth of the reference) has a long lower tail of its own (a fifth of it at
    0.1-0.5), so its own 5 % cut is near 0.2; a new domain at 0.45-0.5 that joins it is above that cut but below
    what 98 % of all existing documents show. The per-cluster cut alone flagged none of it; the pooled and the
    per-cluster cuts at one level flag all of it, and typical new documents of either cluster stay near 5 %."""
    rng = np.random.default_rng(1)
    ref_sims = np.concatenate([rng.uniform(0.5, 0.9, 900), rng.uniform(0.6, 0.9, 80), rng.uniform(0.1, 0.5, 20)])
    ref_labels = np.repeat([0, 1], [900, 100]).astype(np.int32)
    typical = np.concatenate([rng.uniform(0.5, 0.9, 450), rng.uniform(0.6, 0.9, 40), rng.uniform(0.1, 0.5, 10)])
    new_sims = np.concatenate([rng.uniform(0.45, 0.5, 300), typical])
    new_labels = np.repeat([1, 0, 1, 1], [300, 450, 40, 10])
    report = _report(tmp_path, (ref_sims, ref_labels), (new_sims, new_labels))
    assert report["clusters_with_own_cut"] == 2 and 0.025 <= report["neighbour_level"] <= 0.05
    assert 300 <= round(report["drift_share"] * 800) <= 300 + 0.1 * 500
    flags, _ = _neighbour_flags((ref_sims, new_sims, ref_labels), new_labels, 2)
    assert flags[:300].all()


def test_the_cluster_test_flags_a_group_shifted_inside_its_clusters_body():
    """Half of a cluster's new documents drawn from 0.1-0.3 (its own: 0-1) are in no 5 % tail one by one, but
    as a group they are plainly not the cluster's: the test flags the lowest of them, about as many as its
    lower bound allows and never more than the shifted half."""
    rng = np.random.default_rng(2)
    ref_sims, ref_labels = rng.uniform(0, 1, 300), np.zeros(300, np.int64)
    new_sims = np.concatenate([rng.uniform(0, 1, 250), rng.uniform(0.1, 0.3, 250)])
    flags = cluster_test(ref_sims, ref_labels, new_sims, np.zeros(500, np.int64), 1)
    assert 100 <= flags.sum() <= 250
    assert new_sims[flags].max() <= new_sims[~flags].min()


def test_the_cluster_test_rarely_flags_new_documents_like_their_clusters_own():
    """Same-distribution adds over 5 clusters of different spreads, 100 seeds: the chance that any document is
    flagged is about CLUSTER_TEST_LEVEL (5 %) or less."""
    fired = 0
    for seed in range(100):
        rng = np.random.default_rng(seed)
        centre = rng.uniform(0.3, 0.8, 5)
        ref_labels, new_labels = rng.integers(0, 5, 1000), rng.integers(0, 5, 400)
        ref_sims = centre[ref_labels] + 0.1 * rng.standard_normal(1000)
        new_sims = centre[new_labels] + 0.1 * rng.standard_normal(400)
        fired += bool(cluster_test(ref_sims, ref_labels, new_sims, new_labels, 5).any())
    assert fired <= 12


@given(sizes=hs.lists(hs.integers(1, 80), min_size=1, max_size=5), seed=hs.integers(0, 2**16))
@settings(max_examples=40, deadline=None)
def test_the_cuts_flag_what_the_combined_conformal_score_says(sizes, seed):
    """A new document is below its cut exactly when its rank among all reference documents or (a cluster with a
    cut of its own) among its cluster's, ``(count <= s) + 1`` over ``m + 1``, is at most the level; and the level
    lets the two cuts together flag the stated 5 % of the reference, each left out."""
    rng = np.random.default_rng(seed)
    k = len(sizes)
    ref_labels = np.repeat(np.arange(k), sizes)
    ref_sims = rng.random(ref_labels.size).astype(np.float32)
    new_labels = rng.integers(0, k, 200)
    new_sims = rng.random(200).astype(np.float32)
    level = neighbour_level(ref_sims, ref_labels, k)
    p_all = ((ref_sims[None, :] <= new_sims[:, None]).sum(1) + 1) / (ref_sims.size + 1)
    own = (ref_labels[None, :] == new_labels[:, None])
    p_own = (((ref_sims[None, :] <= new_sims[:, None]) & own).sum(1) + 1) / (own.sum(1) + 1)
    has_cut = np.asarray(sizes)[new_labels] >= CLUSTER_REFERENCE
    want = (p_all <= level) | (has_cut & (p_own <= level))
    _, report = _neighbour_flags((ref_sims, new_sims, ref_labels), new_labels, k)
    assert report["below_neighbour_cut"] == int(want.sum())
    assert report["neighbour_level"] == round(level, 6) and level <= DRIFT_PERCENTILE / 100 + 1e-12
