"""The cluster stage: fit centroids on a seeded sample of the run's embeddings, assign every document.

Writes the arrays of :mod:`clusterclip.contract.cluster` and the ``cluster.json`` record. Documents appended
by ``clusterclip add`` are assigned to the frozen centroids by :mod:`clusterclip.cluster.grow`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict

import numpy as np

from clusterclip.cluster.config import ClusterConfig
from clusterclip.cluster.kmeans import ASSIGN_BATCH, assign, compact_labels, fit_centroids, sample_rows
from clusterclip.contract.cluster import CENTROIDS, CLUSTER_STAGE, LABELS, SCORES, SIZES, ClusterRecord
from clusterclip.contract.corpus import CORPUS_STAGE, check_inputs_unchanged
from clusterclip.contract.embed import EMBED_STAGE, EmbedRecord, gather_embeddings, iter_embeddings
from clusterclip.engines import check_engine, ray_assign
from clusterclip.progress import progress_bar
from clusterclip.settings import command_flags
from clusterclip.stages import Built, Stage, run_stage
from clusterclip.store import RUN, RunDir, record_output_hash, save_npy

log = logging.getLogger(__name__)


def cluster_stage(run: RunDir, config: ClusterConfig | None = None, force: bool = False,
                  progress: bool = True, engine: str = "local", refit: bool = False) -> ClusterRecord:
    """Fit centroids on a sample of the run's embeddings and assign every document.

    Writes ``centroids.npy``, ``labels.npy`` (int32), ``scores.npy`` (cosine to own centroid),
    ``sizes.npy`` and the ``cluster.json`` record. Skipped when fresh. Centroids are always trained on
    the driver; ``engine="ray"`` runs the assignment on Ray Data with identical labels. The caller
    holds the lock.

    After ``clusterclip add`` the record keeps the centroids fitted on the first ``fit_count`` documents
    (the default k stays the one derived from them, so the stage stays fresh); ``refit`` fits new centroids
    over all documents (the default k from their count), which makes every plan stale (``clusterclip cluster``
    first asks :func:`clusterclip.contract.plan.refuse_stranding_refit`, where the plans' staleness is read)."""
    config = config or ClusterConfig()
    check_engine(engine)
    embed = EmbedRecord.require(run, verify=False)
    if run.record(CORPUS_STAGE) is not None:
        check_inputs_unchanged(run)
        run.require_current(EMBED_STAGE, CORPUS_STAGE)
    previous = ClusterRecord.previous(run)
    kept_fit = not refit and config.k is None and previous is not None \
        and previous.inputs_hash == run.output_hash(EMBED_STAGE)
    fit_count = previous.fit_count if kept_fit and previous is not None else None
    k = config.effective_k(fit_count if fit_count is not None else embed.count)
    settings = {**asdict(config), "k": k}
    stage = Stage(CLUSTER_STAGE, settings, run.output_hash(EMBED_STAGE),
                  reads={EMBED_STAGE: None},
                  build=lambda job: _refit_lineage(_build_clusters(run, config, k, embed, progress, engine),
                                                   previous if refit else None, embed.count),
                  command=("clusterclip", "cluster", RUN,
                           *command_flags(ClusterConfig, settings, defaults={"k": None})),
                  record=ClusterRecord)
    return run_stage(run, stage, force or refit)


def _refit_lineage(built: Built, previous: ClusterRecord | None, n: int) -> Built:
    """A refit's record lists every refit of the run (``refits``: the output hash refitted and the documents
    fitted on), kept from the record it replaces."""
    if previous is None:
        return built
    refits = [*(previous.refits or []), {"from": record_output_hash(previous.to_json()), "documents": n}]
    return Built(built.artifacts, {**built.fields, "refits": refits})


def _build_clusters(run: RunDir, config: ClusterConfig, k: int, embed: EmbedRecord, progress: bool,
                    engine: str) -> Built:
    """Fit ``k`` centroids on a seeded sample, assign every document, drop empty clusters, save the arrays."""
    t0 = time.perf_counter()
    n = embed.count
    rows = sample_rows(n, k * config.points_per_centroid, config.seed)
    sample = gather_embeddings(run, rows, verify=False)
    log.info("cluster: training %d centroids on a sample of %d of %d documents (%d per centroid)",
             k, len(rows), n, config.points_per_centroid)
    fit = fit_centroids(sample, k, config.seed, config.niter, config.nredo, config.init,
                        config.points_per_centroid)
    del sample
    t_fit = time.perf_counter() - t0
    if engine == "ray":
        labels, scores = ray_assign([run.locate(f) for f in embed.shard_files()], fit.centroids)
    else:
        blocks = _progress_blocks(iter_embeddings(run, ASSIGN_BATCH, verify=False), n, progress)
        labels, scores = assign(blocks, fit.centroids, n)
    labels, centroids, sizes = compact_labels(labels, fit.centroids)
    objective = float(scores.mean(dtype=np.float64))
    arrays = {CENTROIDS: centroids, LABELS: labels, SCORES: scores, SIZES: sizes}
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
