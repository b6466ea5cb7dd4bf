"""How the cluster stage grows when ``clusterclip add`` appends documents: they are assigned to the frozen
centroids and the arrays and record extended (the default k stays the one derived from the documents the
centroids were fitted on)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from clusterclip.cluster.kmeans import ASSIGN_BATCH, assign
from clusterclip.contract.cluster import CENTROIDS, CLUSTER_STAGE, GROWN_ARRAYS, LABELS, SCORES, SIZES, ClusterRecord
from clusterclip.contract.embed import EMBED_STAGE
from clusterclip.stages import grow_stage
from clusterclip.stages.growth import Growth
from clusterclip.store import RunDir, load_npy, save_npy
from clusterclip.store.npy_rows import append_npy


def grow_clusters(run: RunDir, new_shards: Sequence[str], n_old: int,
                  old_sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Assign the documents of the appended embedding shards (run-relative) to the frozen centroids, append
    their labels and cosines to ``labels.npy`` and ``scores.npy`` after the first ``n_old`` rows, and write
    the grown ``sizes.npy`` (``old_sizes`` plus the new counts). Returns the new labels, cosines and sizes.
    The caller holds the lock; the record follows with :func:`grow_cluster_record`."""
    def blocks() -> Iterator[np.ndarray]:
        for rel in new_shards:
            arr = load_npy(run.path(rel), mmap=True)
            for start in range(0, len(arr), ASSIGN_BATCH):
                yield np.asarray(arr[start:start + ASSIGN_BATCH], dtype=np.float32)

    labels, scores = assign(blocks(), load_npy(run.path(CENTROIDS)))
    sizes = np.asarray(old_sizes, dtype=np.int64) + np.bincount(labels, minlength=len(old_sizes))
    append_npy(run.path(LABELS), n_old, labels)
    append_npy(run.path(SCORES), n_old, scores)
    save_npy(run.path(SIZES), sizes)
    return labels, scores, sizes


def grow_cluster_record(run: RunDir, growth: Growth) -> ClusterRecord:
    """Rewrite the cluster record after :func:`grow_clusters`: built from the grown embeddings, the objective
    and size statistics over all documents, and ``fit_count``, the documents the centroids were fitted on
    (while the record is current the default k stays the one derived from it, see
    :func:`clusterclip.cluster.stage.cluster_stage`)."""
    previous, n_old, new_scores, sizes = growth.base[CLUSTER_STAGE], growth.n_old, growth.scores, growth.sizes
    assert isinstance(previous, ClusterRecord)
    n = n_old + len(new_scores)
    objective = (previous.objective * n_old + float(new_scores.sum(dtype=np.float64))) / n
    known = {rel: meta for rel, meta in previous.artifacts.items() if rel not in GROWN_ARRAYS}
    return grow_stage(run, previous, run.output_hash(EMBED_STAGE), list(previous.artifacts), 0.0, known,
                      (EMBED_STAGE,), objective=objective,
                      fit_count=previous.fit_count if previous.fit_count is not None else n_old,
                      size_min=int(sizes.min()), size_median=float(np.median(sizes)), size_max=int(sizes.max()))
