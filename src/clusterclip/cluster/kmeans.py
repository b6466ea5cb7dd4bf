"""Spherical (cosine) k-means with faiss: fit centroids on a sample, assign rows in streamed batches.

Memory is bounded by the training sample (``points_per_centroid * k`` rows, float32) plus one batch of
embeddings during assignment, never ``N x dim``. Clusters left empty by the full assignment are removed and
the labels renumbered (:func:`compact_labels`), so downstream stages can rely on ``sizes > 0`` for every
cluster ``0..K-1``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from clusterclip.cluster.config import DEFAULT_POINTS_PER_CENTROID
from clusterclip.contract.cluster import cluster_totals
from clusterclip.errors import ClusterClipError

log = logging.getLogger(__name__)

SEED_POINTS_PER_CENTROID = 64
ASSIGN_BATCH = 65_536


@dataclass
class KMeansResult:
    centroids: np.ndarray
    train_objective: float
    iterations: int
    sample_size: int


def greedy_kmeans_pp(x: np.ndarray, k: int, seed: int = 0, trials: int | None = None) -> np.ndarray:
    """Greedy k-means++ seeding on unit rows: each step samples ``trials`` candidates by D^2 and keeps
    the one that lowers the potential most (as scikit-learn does; plain k-means++ keeps the first).

    Far more robust than plain k-means++ (no split-one-merge-two local optima on well separated
    data). Seeds are chosen among at most ``SEED_POINTS_PER_CENTROID * k`` sampled rows, so the cost,
    ``O(trials * n * k * dim)``, stays a fraction of the Lloyd iterations that follow. Squared
    distances of unit vectors are ``2 - 2 cos``, so each step is one float32 matrix product.

    ``sklearn.cluster.kmeans_plusplus`` makes the same choices but computes distances in float64
    (float32 input is upcast chunk by chunk): on 185k static embeddings it seeded 3.6x (K=100) and 4.2x
    (K=1000) slower from float32, 1.8x slower from float64, for the same objective and NMI
    (``benchmarks/RESULTS.md``, "k-means++ seeding"); and scikit-learn is not a core dependency.
    """
    rng = np.random.default_rng(seed)
    if len(x) > SEED_POINTS_PER_CENTROID * k:
        x = x[np.sort(rng.choice(len(x), SEED_POINTS_PER_CENTROID * k, replace=False))]
    n = len(x)
    trials = trials or 2 + int(np.log(k))
    chosen = np.empty(k, dtype=np.int64)
    chosen[0] = rng.integers(n)
    closest = np.maximum(2.0 - 2.0 * (x @ x[chosen[0]]), 0.0)
    for i in range(1, k):
        cum = np.cumsum(closest, dtype=np.float64)
        if cum[-1] <= 0:
            rest = np.setdiff1d(np.arange(n), chosen[:i])
            chosen[i:] = rng.choice(rest, size=k - i, replace=False)
            break
        cand = np.minimum(np.searchsorted(cum, rng.random(trials) * cum[-1], side="right"), n - 1)
        dist = np.minimum(closest[None, :], np.maximum(2.0 - 2.0 * (x[cand] @ x.T), 0.0))
        best = int(np.argmin(dist.sum(axis=1, dtype=np.float64)))
        chosen[i] = cand[best]
        closest = dist[best]
    return np.ascontiguousarray(x[chosen], dtype=np.float32)


def fit_centroids(sample: np.ndarray, k: int, seed: int = 0, niter: int = 25, nredo: int = 1,
                  init: str = "kmeans++", points_per_centroid: int = DEFAULT_POINTS_PER_CENTROID) -> KMeansResult:
    """Train spherical k-means on ``sample`` (float32, unit rows) and return unit-norm centroids.

    ``init="kmeans++"`` seeds with :func:`greedy_kmeans_pp`; ``random`` and ``afkmc2`` use faiss' own
    seeding. The best of ``nredo`` runs (highest objective) is kept. faiss' own subsampling is disabled
    (the caller's sample is used whole) so the logged sample size is the real one. With ``faiss-gpu``
    and a visible GPU the training runs there.
    """
    import faiss

    x = np.ascontiguousarray(sample, dtype=np.float32)
    n, d = x.shape
    if k > n:
        raise ClusterClipError(f"k={k} is larger than the training sample ({n} rows)")
    methods = {"random": "ClusteringInitMethod_RANDOM", "afkmc2": "ClusteringInitMethod_AFK_MC2"}
    kwargs: dict[str, Any] = {}
    if init in methods and hasattr(faiss, methods[init]):
        kwargs["init_method"] = getattr(faiss, methods[init])
    elif init == "afkmc2":
        log.warning("cluster: this faiss has no afkmc2 initialisation; using random")
    if hasattr(faiss, "get_num_gpus") and faiss.get_num_gpus() > 0:
        kwargs["gpu"] = True
        log.info("cluster: training on %d GPU(s) (faiss-gpu)", faiss.get_num_gpus())
    km = faiss.Kmeans(d, k, niter=niter, nredo=nredo, spherical=True, seed=seed, verbose=False,
                      max_points_per_centroid=max(points_per_centroid, math.ceil(n / k)),
                      min_points_per_centroid=1, **kwargs)
    if init == "kmeans++":
        best: tuple[float, np.ndarray, int] | None = None
        for redo in range(nredo):
            km.cp.nredo = 1
            km.train(x, init_centroids=greedy_kmeans_pp(x, k, seed + redo))
            if best is None or km.obj[-1] > best[0]:
                best = (float(km.obj[-1]), km.centroids.copy(), len(km.obj))
        assert best is not None
        obj_total, centroids, iterations = best
    else:
        km.train(x)
        obj_total, centroids, iterations = float(km.obj[-1]), km.centroids, len(km.obj)
    centroids = centroids.astype(np.float32)
    centroids /= np.maximum(np.linalg.norm(centroids, axis=1, keepdims=True), 1e-12)
    return KMeansResult(centroids, obj_total / n, iterations, n)


def assign(batches: Iterable[np.ndarray], centroids: np.ndarray,
           n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Nearest centroid (by cosine) and the cosine for every row of the streamed batches. With ``n``, the
    row count, the results are written into arrays of that size (8 bytes per row, not twice that while
    batches are joined); more or fewer rows are an error."""
    import faiss

    index = faiss.IndexFlatIP(centroids.shape[1])
    index.add(np.ascontiguousarray(centroids, dtype=np.float32))
    labels, scores = [], []
    out = (np.empty(n, np.int32), np.empty(n, np.float32)) if n is not None else None
    at = 0
    for block in batches:
        sim, idx = index.search(np.ascontiguousarray(block, dtype=np.float32), 1)
        if out is None:
            labels.append(idx[:, 0].astype(np.int32))
            scores.append(sim[:, 0].astype(np.float32))
        elif at + len(block) <= n:
            out[0][at:at + len(block)], out[1][at:at + len(block)] = idx[:, 0], sim[:, 0]
        at += len(block)
    if out is None:
        return np.concatenate(labels), np.concatenate(scores)
    if at != n:
        raise ClusterClipError(f"cluster: the embeddings hold {at:,} rows, not the {n:,} their record counts")
    return out


def sample_rows(n: int, size: int, seed: int) -> np.ndarray:
    """Sorted, seeded sample of ``size`` distinct row numbers out of ``n``."""
    if size >= n:
        return np.arange(n, dtype=np.int64)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n, size=size, replace=False)).astype(np.int64)


def compact_labels(labels: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Drop clusters that received no documents and renumber labels densely; returns sizes too."""
    sizes = cluster_totals(labels, len(centroids))
    keep = np.flatnonzero(sizes)
    if keep.size == len(centroids):
        return labels, centroids, sizes.astype(np.int64)
    remap = np.full(len(centroids), -1, dtype=np.int32)
    remap[keep] = np.arange(keep.size, dtype=np.int32)
    return remap[labels], centroids[keep], sizes[keep].astype(np.int64)
