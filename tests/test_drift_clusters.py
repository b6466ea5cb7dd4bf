"""The neighbourhood test of ``add``'s drift report cuts per cluster (``clusterclip.add.drift.cluster_cuts``)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as hs

from clusterclip.add.drift import CLUSTER_REFERENCE, DRIFT_PERCENTILE, cluster_cuts, drift_report
from clusterclip.store import save_npy


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
