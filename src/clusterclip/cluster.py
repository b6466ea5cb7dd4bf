"""Spherical (cosine) k-means with faiss: fit centroids on a sample, assign every document in batches.

Memory is bounded by the training sample (``points_per_centroid * k`` rows, float32) plus one batch of
embeddings during assignment, never ``N x dim``: embeddings stay in their float16 shards on disk.
Clusters left empty by the full assignment are removed and the labels renumbered, so downstream
stages can rely on ``sizes > 0`` for every cluster ``0..K-1``. Documents appended by ``clusterclip add``
are assigned to the frozen centroids by :func:`grow_clusters` (the stage's record: :func:`grow_cluster_record`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from clusterclip.corpus import check_inputs_unchanged
from clusterclip.embed import gather_embeddings, iter_embeddings
from clusterclip.engines import check_engine, ray_assign
from clusterclip.errors import ClusterClipError
from clusterclip.progress import progress_bar
from clusterclip.settings import Settings, SettingsError, at_least, command_flags, optional, setting
from clusterclip.stages import Built, Stage, grow_stage, run_stage
from clusterclip.store import RunDir, load_npy, record_output_hash, save_npy
from clusterclip.store import layout as A
from clusterclip.store.npy_rows import append_npy

log = logging.getLogger(__name__)

DEFAULT_POINTS_PER_CENTROID = 256
SEED_POINTS_PER_CENTROID = 64
ASSIGN_BATCH = 65_536
INITS = ("kmeans++", "random", "afkmc2")


def default_k(n: int) -> int:
    """Default number of clusters: ``sqrt(N / 2)`` clipped to [2, 10000] (about 90 for 16k documents).

    It grows sub-linearly so clusters stay meaningful (a few hundred documents each at 10^5-10^6
    documents) and k-means cost stays affordable; the paper used thousands for 10^7-10^8 documents.
    """
    if n < 2:
        raise ClusterClipError(f"clustering needs at least 2 documents, got {n}")
    return int(min(10_000, max(2, round(math.sqrt(n / 2)))))


@dataclass(frozen=True)
class ClusterConfig(Settings):
    """Options of the cluster stage (part of the stage record); validated on construction."""

    k: int | None = setting(None, check=optional(at_least(1)),
                            help="number of clusters (default: sqrt(N/2) clipped to [2, 10000])")
    seed: int = setting(0, check=at_least(0), flag="--cluster-seed", help="k-means seed")
    niter: int = setting(25, check=at_least(1), help="k-means iterations")
    nredo: int = setting(1, check=at_least(1), help="k-means restarts; the best objective is kept")
    points_per_centroid: int = setting(DEFAULT_POINTS_PER_CENTROID, check=at_least(1),
                                       help="training sample size per centroid (sample = k x this, at most N)")
    init: str = setting("kmeans++", choices=INITS,
                        help="centroid seeding: greedy k-means++ (robust), or faiss' random or AFK-MC2 seeding")

    def effective_k(self, n: int) -> int:
        """The k used for ``n`` documents: ``k``, or :func:`default_k`; ``k`` may not exceed ``n``."""
        if self.k is None:
            return default_k(n)
        if self.k > n:
            raise SettingsError("k", f"{self.k} is larger than the number of documents ({n}); use 1 <= k <= {n}",
                                type(self))
        return int(self.k)


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


def compact_labels(labels: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Drop clusters that received no documents and renumber labels densely; returns sizes too."""
    sizes = cluster_totals(labels, len(centroids))
    keep = np.flatnonzero(sizes)
    if keep.size == len(centroids):
        return labels, centroids, sizes.astype(np.int64)
    remap = np.full(len(centroids), -1, dtype=np.int32)
    remap[keep] = np.arange(keep.size, dtype=np.int32)
    return remap[labels], centroids[keep], sizes[keep].astype(np.int64)


# ------------------------------------------------------------------------------------------ the stage


def cluster_stage(run: RunDir, config: ClusterConfig | None = None, force: bool = False,
                  progress: bool = True, engine: str = "local", refit: bool = False) -> dict[str, Any]:
    """Fit centroids on a sample of the run's embeddings and assign every document.

    Writes ``centroids.npy``, ``labels.npy`` (int32), ``scores.npy`` (cosine to own centroid),
    ``sizes.npy`` and the ``cluster.json`` record. Skipped when fresh. Centroids are always trained on
    the driver; ``engine="ray"`` runs the assignment on Ray Data with identical labels. The caller
    holds the lock.

    After ``clusterclip add`` the record keeps the centroids fitted on the first ``fit_count`` documents
    (the default k stays the one derived from them, so the stage stays fresh); ``refit`` fits new centroids
    over all documents (the default k from their count), which makes every plan stale: refused while a
    current plan exists unless ``force`` (a continuation of it still builds and loads afterwards).
    """
    config = config or ClusterConfig()
    check_engine(engine)
    if refit and not force:
        _refuse_stranding_refit(run)
    embed_rec = run.require(A.EMBED_STAGE, verify=False)
    if run.record(A.CORPUS_STAGE) is not None:
        check_inputs_unchanged(run)
        run.require_current(A.EMBED_STAGE, A.CORPUS_STAGE)
    previous = run.previous_record(A.CLUSTER_STAGE) or {}
    kept_fit = not refit and config.k is None and previous.get("inputs_hash") == run.output_hash(A.EMBED_STAGE)
    k = config.effective_k(int(previous.get("fit_count", embed_rec["count"]) if kept_fit else embed_rec["count"]))
    settings = {**asdict(config), "k": k}
    stage = Stage(A.CLUSTER_STAGE, settings, run.output_hash(A.EMBED_STAGE),
                  reads={A.EMBED_STAGE: None},
                  build=lambda job: _refit_lineage(_build_clusters(run, config, k, embed_rec, progress, engine),
                                                   previous if refit else None, int(embed_rec["count"])),
                  command=("clusterclip", "cluster", A.RUN,
                           *command_flags(ClusterConfig, settings, defaults={"k": None})))
    return run_stage(run, stage, force or refit)


def _refit_lineage(built: Built, previous: Mapping[str, Any] | None, n: int) -> Built:
    """A refit's record lists every refit of the run (``refits``: the output hash refitted and the documents
    fitted on), kept from the record it replaces."""
    if not previous:
        return built
    refits = [*previous.get("refits", []), {"from": record_output_hash(previous), "documents": n}]
    return Built(built.artifacts, {**built.fields, "refits": refits})


def _refuse_stranding_refit(run: RunDir) -> None:
    """Refuse a refit that would make current plans stale (a training job reading one could not resume it)."""
    plans = [s.split("/")[1] for s in run.stages() if s.startswith(A.PLANS_DIR + "/") and not run.stale_reason(s)]
    if plans:
        raise ClusterClipError(
            f"{run.root}: `cluster --refit` relabels every document and makes plan(s) {', '.join(plans)} stale, "
            "so the sampler refuses them; re-run with --force to refit anyway (a running plan then goes on with "
            "`clusterclip plan RUN --continue PLAN --consumed N`, built on the new clusters)")


def _build_clusters(run: RunDir, config: ClusterConfig, k: int, embed_rec: dict[str, Any], progress: bool,
                    engine: str) -> Built:
    """Fit ``k`` centroids on a seeded sample, assign every document, drop empty clusters, save the arrays."""
    t0 = time.perf_counter()
    n = int(embed_rec["count"])
    rows = sample_rows(n, k * config.points_per_centroid, config.seed)
    sample = gather_embeddings(run, rows, verify=False)
    log.info("cluster: training %d centroids on a sample of %d of %d documents (%d per centroid)",
             k, len(rows), n, config.points_per_centroid)
    fit = fit_centroids(sample, k, config.seed, config.niter, config.nredo, config.init,
                        config.points_per_centroid)
    del sample
    t_fit = time.perf_counter() - t0
    if engine == "ray":
        labels, scores = ray_assign([run.path(s["file"]) for s in embed_rec["shards"]], fit.centroids)
    else:
        blocks = _progress_blocks(iter_embeddings(run, ASSIGN_BATCH, verify=False), n, progress)
        labels, scores = assign(blocks, fit.centroids, n)
    labels, centroids, sizes = compact_labels(labels, fit.centroids)
    objective = float(scores.mean(dtype=np.float64))
    arrays = {A.CENTROIDS: centroids, A.LABELS: labels, A.SCORES: scores, A.SIZES: sizes}
    for rel, arr in arrays.items():
        save_npy(run.path(rel), arr)
    log.info("cluster: k=%d, mean cosine to centroid %.4f, %.1fs", len(centroids), objective,
             time.perf_counter() - t0)
    return Built(list(arrays), dict(
        k=len(centroids), k_requested=k, empty_clusters_removed=int(k - len(centroids)),
        sample_size=fit.sample_size, objective=objective, train_objective=fit.train_objective,
        iterations=fit.iterations, fit_seconds=round(t_fit, 3), engine=engine,
        size_min=int(sizes.min()), size_median=float(np.median(sizes)), size_max=int(sizes.max()),
    ))


def _progress_blocks(blocks: Iterable[np.ndarray], total: int, enabled: bool) -> Iterator[np.ndarray]:
    bar = progress_bar("assign", "docs", total, enabled)
    for block in blocks:
        yield block
        bar.update(len(block))
    bar.close()


def load_labels(run: RunDir, mmap: bool = False) -> np.ndarray:
    """Cluster labels of a finished cluster stage, after verifying the checksums of the stage's arrays
    (all of them: they are small, and callers use the centroids and sizes beside the labels).
    ``mmap`` maps the labels read-only."""
    run.require(A.CLUSTER_STAGE)
    return load_npy(run.path(A.LABELS), mmap=mmap)


# ----------------------------------------------------------------------------- growing (clusterclip add)

GROWN_ARRAYS = (A.LABELS, A.SCORES, A.SIZES)
"""The cluster arrays an add rewrites (the centroids stay)."""


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

    labels, scores = assign(blocks(), load_npy(run.path(A.CENTROIDS)))
    sizes = np.asarray(old_sizes, dtype=np.int64) + np.bincount(labels, minlength=len(old_sizes))
    append_npy(run.path(A.LABELS), n_old, labels)
    append_npy(run.path(A.SCORES), n_old, scores)
    save_npy(run.path(A.SIZES), sizes)
    return labels, scores, sizes


def grow_cluster_record(run: RunDir, previous: Mapping[str, Any], n_old: int, new_scores: np.ndarray,
                        sizes: np.ndarray) -> dict[str, Any]:
    """Rewrite the cluster record after :func:`grow_clusters`: built from the grown embeddings, the objective
    and size statistics over all documents, and ``fit_count``, the documents the centroids were fitted on
    (while the record is current the default k stays the one derived from it, see :func:`cluster_stage`)."""
    n = n_old + len(new_scores)
    objective = (float(previous["objective"]) * n_old + float(new_scores.sum(dtype=np.float64))) / n
    known = {rel: meta for rel, meta in previous["artifacts"].items() if rel not in GROWN_ARRAYS}
    return grow_stage(run, previous, run.output_hash(A.EMBED_STAGE), list(previous["artifacts"]), 0.0, known,
                      (A.EMBED_STAGE,), objective=objective, fit_count=int(previous.get("fit_count", n_old)),
                      size_min=int(sizes.min()), size_median=float(np.median(sizes)), size_max=int(sizes.max()))
