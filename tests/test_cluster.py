"""Spherical k-means: recovers planted clusters, the stage's artifacts, skipping and limits."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import normalized_mutual_info_score

from clusterclip.cluster.config import ClusterConfig, default_k
from clusterclip.cluster.kmeans import assign, compact_labels, fit_centroids, sample_rows
from clusterclip.cluster.stage import cluster_stage
from clusterclip.errors import ClusterClipError
from clusterclip.store import RunDir, load_npy, save_npy
from tests.records import write_record


def planted(n_per: list[int], dim: int = 32, noise: float = 0.35, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((len(n_per), dim))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    truth = np.repeat(np.arange(len(n_per)), n_per)
    x = centers[truth] + noise * rng.standard_normal((len(truth), dim)) / np.sqrt(dim)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32), truth


@pytest.mark.parametrize("seed", range(5))
def test_recovers_planted_clusters(seed):
    x, truth = planted([400, 200, 100, 50, 50, 30, 20, 300], seed=seed)
    fit = fit_centroids(x, 8, seed=seed)
    labels, scores = assign([x[:500], x[500:]], fit.centroids)
    assert normalized_mutual_info_score(truth, labels) > 0.9
    assert np.allclose(np.linalg.norm(fit.centroids, axis=1), 1, atol=1e-5)
    assert np.allclose(scores, np.sum(x * fit.centroids[labels], axis=1), atol=1e-5)
    assert fit.sample_size == len(x)


def test_default_k_and_limits():
    assert default_k(16_453) == 91
    assert default_k(2) == 2
    assert default_k(10**10) == 10_000
    with pytest.raises(ClusterClipError, match="larger than the number of documents"):
        ClusterConfig(k=11).effective_k(10)
    assert ClusterConfig(k=10).effective_k(10) == 10 and ClusterConfig().effective_k(16_453) == 91
    with pytest.raises(ClusterClipError, match=">= 1"):
        ClusterConfig(k=0)


def test_sample_rows_seeded_sorted_distinct():
    a = sample_rows(1000, 100, seed=3)
    assert np.array_equal(a, sample_rows(1000, 100, seed=3))
    assert np.all(np.diff(a) > 0) and a.max() < 1000
    assert np.array_equal(sample_rows(10, 100, seed=0), np.arange(10))


def test_compact_labels_removes_empty_clusters():
    cents = np.eye(4, dtype=np.float32)
    labels, kept, sizes = compact_labels(np.array([0, 0, 3, 3, 3], dtype=np.int32), cents)
    assert labels.tolist() == [0, 0, 1, 1, 1]
    assert sizes.tolist() == [2, 3]
    np.testing.assert_array_equal(kept, cents[[0, 3]])


def fake_embed_run(tmp_path, x: np.ndarray, shard: int = 300) -> RunDir:
    run = RunDir(tmp_path / "run")
    rels = []
    for i, start in enumerate(range(0, len(x), shard)):
        rel = f"embeddings/shard-{i:05d}.npy"
        save_npy(run.root / rel, x[start:start + shard].astype(np.float16))
        rels.append(rel)
    shards = [{"file": rel, "rows": len(np.load(run.root / rel))} for rel in rels]
    write_record(run, "embed", {"embedder": {"name": "fake"}, "shard_size": shard}, "corpus-hash", rels, 0.0,
                 count=len(x), dim=x.shape[1], model="fake", shards=shards)
    return run


def test_cluster_stage_artifacts_skip_and_rerun(tmp_path):
    x, truth = planted([300, 150, 100, 50], dim=24)
    run = fake_embed_run(tmp_path, x)
    rec = cluster_stage(run, ClusterConfig(k=4, seed=0), progress=False).to_json()
    labels = load_npy(run.root / "labels.npy")
    assert labels.dtype == np.int32 and labels.shape == (len(x),)
    assert normalized_mutual_info_score(truth, labels) > 0.9
    sizes = load_npy(run.root / "sizes.npy")
    assert sizes.sum() == len(x) and (sizes > 0).all() and rec["k"] == len(sizes)
    assert load_npy(run.root / "centroids.npy").shape == (4, 24)
    assert load_npy(run.root / "scores.npy").dtype == np.float32
    assert 0 < rec["objective"] <= 1 and rec["sample_size"] == len(x)
    stamp = run.record_path("cluster").stat().st_mtime_ns
    cluster_stage(run, ClusterConfig(k=4, seed=0), progress=False)
    assert run.record_path("cluster").stat().st_mtime_ns == stamp
    rec2 = cluster_stage(run, ClusterConfig(k=3, seed=0), progress=False).to_json()
    assert rec2["config"]["k"] == 3 and len(load_npy(run.root / "sizes.npy")) <= 3


def test_cluster_stage_is_deterministic_and_samples(tmp_path):
    x, _ = planted([500, 300, 200], dim=16)
    run = fake_embed_run(tmp_path, x)
    rec = cluster_stage(run, ClusterConfig(k=3, seed=7, points_per_centroid=50), progress=False).to_json()
    assert rec["sample_size"] == 150
    first = (run.root / "labels.npy").read_bytes()
    cluster_stage(run, ClusterConfig(k=3, seed=7, points_per_centroid=50), force=True, progress=False)
    assert (run.root / "labels.npy").read_bytes() == first


def test_k_larger_than_n_is_a_clear_error(tmp_path):
    x, _ = planted([5, 5], dim=8)
    run = fake_embed_run(tmp_path, x)
    with pytest.raises(ClusterClipError, match=r"^k 50 is larger than the number of documents \(10\)"):
        cluster_stage(run, ClusterConfig(k=50), progress=False)


def test_training_moves_to_the_gpu_when_faiss_sees_one(monkeypatch):
    """The faiss-gpu path cannot run in CI; check that a visible GPU is requested and the result kept."""
    import faiss

    requested = []

    class RecordingKmeans(faiss.Kmeans):
        def __init__(self, d, k, **kwargs):
            requested.append(kwargs.pop("gpu", False))
            super().__init__(d, k, **kwargs)

    x, _ = planted([80, 60, 40])
    cpu = fit_centroids(x, 3, seed=0)
    monkeypatch.setattr(faiss, "Kmeans", RecordingKmeans)
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1)
    gpu = fit_centroids(x, 3, seed=0)
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 0)
    fit_centroids(x, 3, seed=0)
    assert requested == [True, False]
    np.testing.assert_array_equal(gpu.centroids, cpu.centroids)


def test_assign_into_arrays_of_the_recorded_size_equals_joined_batches():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(50, 8)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    cents = x[:4].copy()
    blocks = [x[:17], x[17:40], x[40:]]
    joined = assign(blocks, cents)
    sized = assign(blocks, cents, n=50)
    assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(joined, sized, strict=True))
    for n in (49, 51):
        with pytest.raises(ClusterClipError, match="embeddings hold 50 rows"):
            assign(blocks, cents, n=n)
