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

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from clusterclip.cluster.contract import CLUSTER_STAGE, LABELS
from clusterclip.corpus.contract import CORPUS_STAGE, TOKENS, corpus_parts, iter_corpus, open_part, read_column
from clusterclip.dedup.config import DedupConfig
from clusterclip.dedup.contract import (
    DEDUP_DIR,
    DEDUP_STAGE,
    GROUP,
    INDEX_ARTIFACTS,
    KEPT,
    LEXICAL_JACCARD,
    LEXICAL_PAIRS,
    NEIGHBOUR,
    REMOVED,
    SIGNATURES,
    SIMILARITY,
    DedupRecord,
    dedup_inputs,
)
from clusterclip.dedup.groups import DuplicateGroups, derive_groups, detector_names, group_sizes
from clusterclip.dedup.lexical import lsh_pairs, signatures
from clusterclip.dedup.semantic import appended_neighbours, earlier_neighbours, members_neighbours
from clusterclip.embed.contract import EMBED_STAGE, gather_embeddings
from clusterclip.engines import ray_tasks
from clusterclip.errors import ClusterClipError
from clusterclip.settings import command_flags
from clusterclip.stages import Built, Stage, run_stage
from clusterclip.store import RUN, RunDir, atomic_path, load_npy, save_npy

log = logging.getLogger(__name__)
TEXT_BATCH = 2048
RAY_TASK_DOCS = 50_000
COSINE_BATCH = 65_536


def dedup_stage(run: RunDir, config: DedupConfig | None = None, force: bool = False,
                engine: str = "local", appended: int | None = None) -> DedupRecord:
    """Find the duplicate groups of ``run`` (skipped when fresh); returns the stage's record. ``engine="ray"``
    runs the semantic pass's clusters and the MinHash signatures of each corpus part as Ray tasks (inside an
    open ``ray_session``): the same groups, cosines within 1e-6 (Ray workers run BLAS on one thread).
    ``appended`` (from ``clusterclip add``, which checked that the stored pairwise work covers documents
    ``0..appended-1``) extends that work to the new documents only (:func:`clusterclip.dedup.grow.extend_groups`)."""
    config = config or DedupConfig()
    run.require_current(CLUSTER_STAGE)
    inputs = dedup_inputs(run)
    previous = DedupRecord.previous(run)
    reuse = not force and _index_reusable(run, previous, inputs, config)
    settings = asdict(config)
    stage = Stage(DEDUP_STAGE, settings, inputs,
                  reads={EMBED_STAGE: None, CLUSTER_STAGE: [LABELS], CORPUS_STAGE: [TOKENS]},
                  build=lambda job: _build(run, config, reuse, engine, appended),
                  command=("clusterclip", "dedup", RUN, *command_flags(DedupConfig, settings)), record=DedupRecord)
    return run_stage(run, stage, force)


def _index_reusable(run: RunDir, previous: DedupRecord | None, inputs: str, config: DedupConfig) -> bool:
    """Whether the previous run's pairwise work was built from these inputs and index settings, intact."""
    if previous is None or previous.inputs_hash != inputs or previous.index != config.index_settings():
        return False
    return not run.problems(DEDUP_STAGE, previous.to_json(), only=INDEX_ARTIFACTS)


def _build(run: RunDir, config: DedupConfig, reuse: bool, engine: str, appended: int | None) -> Built:
    t0 = time.perf_counter()
    run.path(DEDUP_DIR).mkdir(exist_ok=True)
    labels = load_npy(run.path(LABELS))
    tokens = load_npy(run.path(TOKENS))
    if reuse:
        log.info("dedup: reusing the stored pairwise work (only the thresholds changed)")
    elif appended is not None:
        _append_pairwise(run, config, labels, appended)
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
        reused_pairwise=reuse, pairwise_seconds=round(t_pair, 3), engine=engine,
        **({} if appended is None else {"appended_from": appended})))


def _pairwise(run: RunDir, config: DedupConfig, labels: np.ndarray, tokens: np.ndarray, engine: str) -> None:
    """Compute and save the semantic neighbours and the lexical candidate pairs."""
    runner = partial(_on_ray, str(run.root)) if engine == "ray" else None
    neighbour, similarity = earlier_neighbours(labels, tokens, lambda rows: fetch_rows(run, rows), runner=runner)
    save_npy(run.path(NEIGHBOUR), neighbour)
    save_npy(run.path(SIMILARITY), similarity)
    if engine == "ray":
        sig = _signatures_on_ray(run, config, labels.size)
    else:
        texts = (b.column(0) for b in iter_corpus(run, ("text",), TEXT_BATCH))
        sig = signatures(texts, labels.size, config.num_perm, config.shingle, config.lexical_seed)
    _lexical(run, config, sig, labels)


def _signatures_on_ray(run: RunDir, config: DedupConfig, n: int) -> np.ndarray:
    """The MinHash signatures as one Ray task per corpus part (each reads its part's texts), in index order."""
    calls, first = [], 0
    for part in corpus_parts(run):
        rows = open_part(part).metadata.num_rows
        calls.append((str(part), first, config.num_perm, config.shingle, config.lexical_seed))
        first += rows
    if first != n:
        raise ClusterClipError(f"{run.root}: the corpus parts hold {first} documents, the labels {n}")
    return np.concatenate([np.zeros((0, config.num_perm), np.uint32), *ray_tasks(_part_signatures, calls)])


def _part_signatures(path: str, first: int, num_perm: int, shingle: int, seed: int) -> np.ndarray:
    """One Ray task: the signatures of one corpus part's documents (the first is document ``first``)."""
    pf = open_part(path)
    texts = (b.column(0) for b in pf.iter_batches(batch_size=TEXT_BATCH, columns=["text"]))
    return signatures(texts, pf.metadata.num_rows, num_perm, shingle, seed, first)


def _lexical(run: RunDir, config: DedupConfig, sig: np.ndarray, labels: np.ndarray) -> None:
    pairs, jac = lsh_pairs(sig, config.bands, labels)
    save_npy(run.path(SIGNATURES), sig)
    save_npy(run.path(LEXICAL_PAIRS), pairs)
    save_npy(run.path(LEXICAL_JACCARD), jac)


def _append_pairwise(run: RunDir, config: DedupConfig, labels: np.ndarray, first: int) -> None:
    """The pairwise work of documents ``first..N-1`` (appended by ``clusterclip add``) added to the stored work
    of the older ones, which is read whole before anything is written: semantic neighbours of the new documents
    only, MinHash signatures of the new texts only, then the LSH candidates of all signatures."""
    neighbour, similarity = load_npy(run.path(NEIGHBOUR)), load_npy(run.path(SIMILARITY))
    old_sig = load_npy(run.path(SIGNATURES), mmap=True)
    new_nb, new_sim = appended_neighbours(labels, first, lambda rows: fetch_rows(run, rows))
    texts = (b.column(0) for b in iter_corpus(run, ("text",), TEXT_BATCH, first=first))
    new_sig = signatures(texts, labels.size - first, config.num_perm, config.shingle, config.lexical_seed, first)
    save_npy(run.path(NEIGHBOUR), np.concatenate([neighbour[:first], new_nb]))
    save_npy(run.path(SIMILARITY), np.concatenate([similarity[:first], new_sim]))
    _lexical(run, config, np.concatenate([old_sig[:first], new_sig]), labels)


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
