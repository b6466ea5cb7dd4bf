"""The ``dedup`` stage: near-duplicate groups inside the clusters (semantic) and across them (lexical).

Reads the embeddings, the cluster labels, the token counts and the texts; writes the pairwise work
(``INDEX_ARTIFACTS``: kept again when only ``eps`` or ``jaccard`` change, so a new threshold costs one
connected-components pass) and the groups: ``dedup/group.npy``, ``dedup/kept.npy`` and the removed ->
kept map ``dedup/removed.parquet``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from clusterclip.corpus import read_column
from clusterclip.corpus.parts import iter_corpus
from clusterclip.dedup.config import (
    DEDUP_DIR,
    DEDUP_STAGE,
    GROUP,
    INDEX_ARTIFACTS,
    KEPT,
    LEXICAL_JACCARD,
    LEXICAL_PAIRS,
    NEIGHBOUR,
    REMOVED,
    SIMILARITY,
    DedupConfig,
)
from clusterclip.dedup.groups import DuplicateGroups, derive_groups, detector_names, group_sizes
from clusterclip.dedup.lexical import lsh_pairs, signatures
from clusterclip.dedup.semantic import earlier_neighbours, members_neighbours
from clusterclip.embed import gather_embeddings
from clusterclip.engines import ray_tasks
from clusterclip.errors import ClusterClipError
from clusterclip.settings import command_flags
from clusterclip.stages import Built, Stage, run_stage
from clusterclip.store import RunDir, atomic_path, config_hash, load_npy, save_npy
from clusterclip.store import layout as A

log = logging.getLogger(__name__)
TEXT_BATCH = 2048
RAY_TASK_DOCS = 50_000
COSINE_BATCH = 65_536


def dedup_inputs(run: RunDir) -> str:
    """The hash of what the stage reads: the current cluster, embed and corpus outputs."""
    return config_hash({s: run.output_hash(s) for s in (A.CLUSTER_STAGE, A.EMBED_STAGE, A.CORPUS_STAGE)})


def dedup_stage(run: RunDir, config: DedupConfig | None = None, force: bool = False,
                engine: str = "local") -> dict[str, Any]:
    """Find the duplicate groups of ``run`` (skipped when fresh); returns the stage's record. ``engine="ray"``
    runs the semantic pass's clusters as Ray tasks (inside an open ``ray_session``): the same groups, cosines
    within 1e-6 (Ray workers run BLAS on one thread)."""
    config = config or DedupConfig()
    run.require_current(A.CLUSTER_STAGE)
    inputs = dedup_inputs(run)
    previous = run.previous_record(DEDUP_STAGE)
    reuse = not force and _index_reusable(run, previous, inputs, config)
    settings = asdict(config)
    stage = Stage(DEDUP_STAGE, settings, inputs,
                  reads={A.EMBED_STAGE: None, A.CLUSTER_STAGE: [A.LABELS], A.CORPUS_STAGE: [A.TOKENS]},
                  build=lambda job: _build(run, config, reuse, engine),
                  command=("clusterclip", "dedup", A.RUN, *command_flags(DedupConfig, settings)))
    return run_stage(run, stage, force)


def _index_reusable(run: RunDir, previous: dict[str, Any] | None, inputs: str, config: DedupConfig) -> bool:
    """Whether the previous run's pairwise work was built from these inputs and index settings, intact."""
    if not previous or previous.get("inputs_hash") != inputs or previous.get("index") != config.index_settings():
        return False
    return not run.problems(DEDUP_STAGE, previous, only=INDEX_ARTIFACTS)


def _build(run: RunDir, config: DedupConfig, reuse: bool, engine: str) -> Built:
    t0 = time.perf_counter()
    run.path(DEDUP_DIR).mkdir(exist_ok=True)
    labels = load_npy(run.path(A.LABELS))
    tokens = load_npy(run.path(A.TOKENS))
    if reuse:
        log.info("dedup: reusing the stored pairwise work (only the thresholds changed)")
    else:
        _pairwise(run, config, labels, tokens, engine)
    t_pair = time.perf_counter() - t0
    found = derive_groups(load_npy(run.path(NEIGHBOUR)), load_npy(run.path(SIMILARITY)),
                          load_npy(run.path(LEXICAL_PAIRS)), load_npy(run.path(LEXICAL_JACCARD)), tokens,
                          config.eps, config.jaccard)
    save_npy(run.path(GROUP), found.group)
    save_npy(run.path(KEPT), found.kept)
    write_removed(run, found)
    sizes = group_sizes(found.group, found.kept.size)
    removed = found.removed
    log.info("dedup: %d documents, %d groups, %d removed (%.1fs)", found.group.size, found.kept.size, removed.size,
             time.perf_counter() - t0)
    return Built([*INDEX_ARTIFACTS, GROUP, KEPT, REMOVED], dict(
        index=config.index_settings(), documents=int(found.group.size), groups=int(found.kept.size),
        removed=int(removed.size), removed_semantic=int(np.isin(found.linked[removed], (1, 3)).sum()),
        removed_lexical=int(np.isin(found.linked[removed], (2, 3)).sum()), largest_group=int(sizes.max()),
        reused_pairwise=reuse, pairwise_seconds=round(t_pair, 3), engine=engine))


def _pairwise(run: RunDir, config: DedupConfig, labels: np.ndarray, tokens: np.ndarray, engine: str) -> None:
    """Compute and save the semantic neighbours and the lexical candidate pairs."""
    runner = partial(_on_ray, str(run.root)) if engine == "ray" else None
    neighbour, similarity = earlier_neighbours(labels, tokens, lambda rows: fetch_rows(run, rows), runner=runner)
    save_npy(run.path(NEIGHBOUR), neighbour)
    save_npy(run.path(SIMILARITY), similarity)
    texts = (b.column(0) for b in iter_corpus(run, ("text",), TEXT_BATCH))
    sig = signatures(texts, labels.size, config.num_perm, config.shingle, config.lexical_seed)
    pairs, jac = lsh_pairs(sig, config.bands, labels)
    save_npy(run.path(LEXICAL_PAIRS), pairs)
    save_npy(run.path(LEXICAL_JACCARD), jac)


def _on_ray(root: str, clusters: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    """The clusters' semantic neighbours as Ray tasks, clusters batched to about ``RAY_TASK_DOCS`` documents."""
    batches: list[list[np.ndarray]] = [[]]
    held = 0
    for members in clusters:
        if held >= RAY_TASK_DOCS:
            batches.append([])
            held = 0
        batches[-1].append(members)
        held += members.size
    done = ray_tasks(_clusters_task, [(root, batch) for batch in batches if batch])
    return [result for batch in done for result in batch]


def _clusters_task(root: str, clusters: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    """One Ray task: the semantic neighbours of a few clusters, embeddings read from the run directory."""
    run = RunDir(root)
    return [members_neighbours(members, lambda rows: fetch_rows(run, rows)) for members in clusters]


def fetch_rows(run: RunDir, rows: np.ndarray) -> np.ndarray:
    """Float32 embeddings of ``rows`` in the given order (any order)."""
    order = np.argsort(rows, kind="stable")
    got = gather_embeddings(run, rows[order], verify=False)
    out = np.empty_like(got)
    out[order] = got
    return out


def write_removed(run: RunDir, found: DuplicateGroups) -> None:
    """``dedup/removed.parquet``: removed and kept index and id, cosine to the kept one, detector."""
    removed = found.removed
    kept = found.kept[found.group[removed]]
    cosine = np.empty(removed.size, np.float32)
    for a in range(0, removed.size, COSINE_BATCH):
        r, k = removed[a:a + COSINE_BATCH], kept[a:a + COSINE_BATCH]
        cosine[a:a + r.size] = np.einsum("ij,ij->i", fetch_rows(run, r), fetch_rows(run, k))
    ids = pa.array(read_column(run, "id"))
    table = pa.table({"removed_index": removed, "removed_id": ids.take(pa.array(removed)),
                      "kept_index": kept, "kept_id": ids.take(pa.array(kept)), "cosine": cosine,
                      "detector": pa.array(detector_names(found.linked[removed]).tolist(), pa.string())})
    with atomic_path(run.path(REMOVED)) as tmp:
        pq.write_table(table, tmp)


def load_groups(run: RunDir) -> tuple[np.ndarray, np.ndarray]:
    """The current ``(group, kept)`` arrays of ``run``, checksum-verified; refuses a missing stage, or one
    built from other corpus, embed or cluster outputs (stale, or behind after ``clusterclip add``)."""
    if run.record(DEDUP_STAGE) is None:
        raise ClusterClipError(f"{run.root}: no duplicate groups yet; run `clusterclip dedup {run.root}` first")
    rec = run.require_current(DEDUP_STAGE, verify=True, only=(GROUP, KEPT))
    if rec.get("inputs_hash") != dedup_inputs(run):
        raise ClusterClipError(f"{run.root}: the duplicate groups predate the current corpus or clusters (e.g. "
                               f"`clusterclip add`); re-run `clusterclip dedup {run.root}`")
    return load_npy(run.path(GROUP)), load_npy(run.path(KEPT))
