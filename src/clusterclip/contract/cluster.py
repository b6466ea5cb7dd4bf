"""The cluster stage's contract: its name and files, its record, and the readers of its arrays.

The cluster stage writes ``centroids.npy`` (float32 ``[K, dim]``, unit rows), ``labels.npy`` (int32 ``[N]``,
every cluster ``0..K-1`` non-empty), ``scores.npy`` (float32 ``[N]``: cosine to the own centroid) and
``sizes.npy`` (int64 ``[K]``).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from clusterclip.store import RunDir, load_npy
from clusterclip.store.record import RecordedConfig, StageRecord

CLUSTER_STAGE = "cluster"
CENTROIDS = "centroids.npy"
LABELS = "labels.npy"
SCORES = "scores.npy"
SIZES = "sizes.npy"
GROWN_ARRAYS = (LABELS, SCORES, SIZES)
"""The cluster arrays ``clusterclip add`` rewrites (the centroids stay)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClusterSettings(RecordedConfig):
    """``cluster.json``'s ``config``: the k-means settings (:class:`clusterclip.cluster.config.ClusterConfig`), ``k``
    resolved (the k-means options are there in every record the stage writes)."""

    WHAT: ClassVar[str] = "the cluster settings"

    k: int
    seed: int | None = None
    niter: int | None = None
    nredo: int | None = None
    points_per_centroid: int | None = None
    init: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClusterRecord(StageRecord):
    """``cluster.json``. ``config`` holds the k-means settings (``k`` resolved); ``objective`` is the mean
    cosine of every document to its centroid. After ``clusterclip add``, ``fit_count`` is the number of
    documents the frozen centroids were fitted on; after ``cluster --refit``, ``refits`` lists each refit."""

    NAME: ClassVar[str] = CLUSTER_STAGE
    UPSTREAM: ClassVar[tuple[str, ...]] = ("embed",)
    IN_PIPELINE: ClassVar[bool] = True
    GROWN: ClassVar[bool] = True

    config: ClusterSettings
    k: int
    k_requested: int
    empty_clusters_removed: int
    sample_size: int
    objective: float
    train_objective: float
    iterations: int
    fit_seconds: float
    engine: str
    size_min: int
    size_median: float
    size_max: int
    fit_count: int | None = None
    refits: list[dict[str, object]] | None = None


TOTALS_CHUNK = 1 << 22
"""Documents per step of :func:`cluster_totals`."""


def cluster_totals(labels: np.ndarray, k: int, weights: np.ndarray | None = None) -> np.ndarray:
    """Per cluster, the number of documents (or the sum of ``weights``) over labels ``0..k-1``,
    ``TOTALS_CHUNK`` documents at a time (``np.bincount`` of a whole int32 or memory-mapped array copies it
    to int64); other labels are left out."""
    out = np.zeros(k, np.float64 if weights is not None else np.int64)
    for lo in range(0, len(labels), TOTALS_CHUNK):
        lab = np.asarray(labels[lo:lo + TOTALS_CHUNK], dtype=np.int64)
        ok = (lab >= 0) & (lab < k)
        w = None if weights is None else np.asarray(weights[lo:lo + TOTALS_CHUNK], dtype=np.float64)[ok]
        out += np.bincount(lab[ok], weights=w, minlength=k)[:k]
    return out


def load_labels(run: RunDir, mmap: bool = False) -> np.ndarray:
    """Cluster labels of a finished cluster stage, after verifying the checksums of the stage's arrays
    (all of them: they are small, and callers use the centroids and sizes beside the labels).
    ``mmap`` maps the labels read-only."""
    ClusterRecord.require(run)
    return load_npy(run.path(LABELS), mmap=mmap)


def load_sizes(run: RunDir) -> np.ndarray:
    """``sizes.npy`` (documents per cluster); the caller has verified the stage."""
    return load_npy(run.path(SIZES))


def load_centroids(run: RunDir) -> np.ndarray:
    """``centroids.npy``; the caller has verified the stage."""
    return load_npy(run.path(CENTROIDS))
