"""The ``dedup`` stage: near-duplicate groups inside the clusters, from semantic and lexical edges.

Reads the embeddings, the cluster labels, the token counts and the texts; writes the pairwise work
(``INDEX_ARTIFACTS``: kept again when only the thresholds change, ``eps``, ``jaccard``, ``confirm``,
``verify`` or ``min_shingles``, so a new threshold costs one derivation, :mod:`clusterclip.dedup.checked`)
and the groups: ``dedup/group.npy``, ``dedup/kept.npy`` and the removed -> kept map
``dedup/removed.parquet``. The record holds the largest groups with their least similar member.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import asdict
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from clusterclip.contract.cluster import CLUSTER_STAGE, LABELS
from clusterclip.contract.corpus import CORPUS_STAGE, TOKENS, corpus_parts, iter_corpus, read_column
from clusterclip.contract.corpus_texts import open_part
from clusterclip.contract.dedup import (
    BOILERPLATE,
    BYTE_ROWS,
    BYTE_SIGNATURES,
    DEDUP_DIR,
    DEDUP_STAGE,
    GROUP,
    INDEX_ARTIFACTS,
    KEPT,
    LEXICAL_JACCARD,
    LEXICAL_PAIRS,
    NEIGHBOUR,
    REMOVED,
    SHINGLE_COUNT,
    SIGNATURES,
    SIMILARITY,
    TEXT_KEY,
    WORD_SIGNATURES,
    DedupRecord,
    dedup_inputs,
)
from clusterclip.contract.embed import EMBED_STAGE, gather_embeddings
from clusterclip.dedup.checked import CheckedGroups, PairwiseWork, derive_checked_groups
from clusterclip.dedup.config import DedupConfig
from clusterclip.dedup.groups import detector_names
from clusterclip.dedup.lexical import Hashing, TextHashes, boilerplate_lines, candidate_pairs, hash_texts
from clusterclip.dedup.semantic import appended_neighbours, earlier_neighbours, members_neighbours
from clusterclip.engines import ray_tasks
from clusterclip.errors import ClusterClipError
from clusterclip.settings import command_flags
from clusterclip.stages import Built, Stage, run_stage
from clusterclip.store import RUN, RunDir, atomic_path, load_npy, save_npy

log = logging.getLogger(__name__)
TEXT_BATCH = 2048
RAY_TASK_DOCS = 50_000
COSINE_BATCH = 65_536
LARGEST_SHOWN = 3
BOILERPLATE_SAMPLE = 20_000
"""Documents (a seeded uniform sample; all when fewer) whose lines are counted to find the boilerplate lines."""
BOILERPLATE_MIN_DOCUMENTS = 50
"""A boilerplate line is in at least this many of the counted documents (besides the ``boilerplate`` share)."""


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
                  build=lambda job: build_artifacts(run, config, reuse, engine, appended),
                  command=("clusterclip", "dedup", RUN, *command_flags(DedupConfig, settings)), record=DedupRecord)
    return run_stage(run, stage, force)


def _index_reusable(run: RunDir, previous: DedupRecord | None, inputs: str, config: DedupConfig) -> bool:
    """Whether the previous run's pairwise work was built from these inputs and index settings, intact."""
    if previous is None or previous.inputs_hash != inputs or previous.index != config.index_settings():
        return False
    return previous.lists(INDEX_ARTIFACTS) and not run.problems(DEDUP_STAGE, previous.to_json(), only=INDEX_ARTIFACTS)


def build_artifacts(run: RunDir, config: DedupConfig, reuse: bool, engine: str, appended: int | None) -> Built:
    """Write the stage's artifacts (not its record): the pairwise work (kept with ``reuse``, extended from document
    ``appended`` on, or computed whole), then the groups derived from it."""
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
    found = derive_checked_groups(load_work(run, tokens), config, partial(pair_cosines, run))
    save_npy(run.path(GROUP), found.group)
    save_npy(run.path(KEPT), found.kept)
    ids = pa.array(read_column(run, "id"))
    write_removed(run, found, ids)
    removed = found.removed
    log.info("dedup: %d documents, %d groups, %d removed (%.1fs)", found.group.size, found.kept.size, removed.size,
             time.perf_counter() - t0)
    return Built([*INDEX_ARTIFACTS, GROUP, KEPT, REMOVED], dict(
        index=config.index_settings(), documents=int(found.group.size), groups=int(found.kept.size),
        removed=int(removed.size), removed_semantic=int(np.isin(found.linked[removed], (1, 3)).sum()),
        removed_lexical=int(np.isin(found.linked[removed], (2, 3)).sum()),
        largest_group=int(found.size.max(initial=0)), reused_pairwise=reuse, pairwise_seconds=round(t_pair, 3),
        engine=engine, **({} if appended is None else {"appended_from": appended}),
        semantic_edges=found.semantic_edges, unconfirmed_semantic=found.semantic_edges - found.semantic_accepted,
        refused_lexical=found.lexical_edges - found.lexical_accepted, split_off=found.split,
        largest_groups=largest_groups(found, ids)))


def load_work(run: RunDir, tokens: np.ndarray) -> PairwiseWork:
    """The stored pairwise work of ``run`` (``INDEX_ARTIFACTS``) with the token counts."""
    arrays = [load_npy(run.path(rel)) for rel in (NEIGHBOUR, SIMILARITY, LEXICAL_PAIRS, LEXICAL_JACCARD)]
    return PairwiseWork(*arrays, np.asarray(tokens), *(load_npy(run.path(rel)) for rel in (
        WORD_SIGNATURES, SHINGLE_COUNT, TEXT_KEY, SIGNATURES, BYTE_SIGNATURES, BYTE_ROWS)))


def hashing_of(config: DedupConfig) -> Hashing:
    """What the texts are hashed with under ``config``."""
    return Hashing(config.num_perm, config.shingle, config.lexical_seed, config.word_perm, config.char_ngram,
                   config.char_words)


def _pairwise(run: RunDir, config: DedupConfig, labels: np.ndarray, tokens: np.ndarray, engine: str) -> None:
    """Compute and save the semantic neighbours, the boilerplate lines, the text hashes and the lexical
    candidate pairs."""
    runner = partial(_on_ray, str(run.root)) if engine == "ray" else None
    neighbour, similarity = earlier_neighbours(labels, tokens, lambda rows: fetch_rows(run, rows), runner=runner)
    save_npy(run.path(NEIGHBOUR), neighbour)
    save_npy(run.path(SIMILARITY), similarity)
    boilerplate = _boilerplate(run, config, labels.size)
    save_npy(run.path(BOILERPLATE), boilerplate)
    if engine == "ray":
        hashes = _hashes_on_ray(run, config, labels.size, boilerplate)
    else:
        hashes = hash_texts((b.column(0) for b in iter_corpus(run, ("text",), TEXT_BATCH)), hashing_of(config),
                            boilerplate=boilerplate)
    _lexical(run, config, hashes, labels.size)


def _boilerplate(run: RunDir, config: DedupConfig, n: int) -> np.ndarray:
    """The boilerplate lines of the corpus, counted on a seeded sample of ``BOILERPLATE_SAMPLE`` documents (one
    streamed pass over the texts; none when ``config.boilerplate`` is 0)."""
    if config.boilerplate <= 0 or n == 0:
        return np.zeros(0, np.uint64)
    rng = np.random.default_rng(config.lexical_seed)
    chosen = np.zeros(n, bool)
    chosen[rng.choice(n, min(n, BOILERPLATE_SAMPLE), replace=False)] = True

    def sample() -> Iterator[pa.Array]:
        pos = 0
        for batch in iter_corpus(run, ("text",), TEXT_BATCH):
            rows = np.flatnonzero(chosen[pos:pos + batch.num_rows])
            pos += batch.num_rows
            if rows.size:
                yield batch.column(0).take(pa.array(rows))

    return boilerplate_lines(sample(), config.boilerplate, BOILERPLATE_MIN_DOCUMENTS)


def _hashes_on_ray(run: RunDir, config: DedupConfig, n: int, boilerplate: np.ndarray) -> TextHashes:
    """The text hashes as one Ray task per corpus part (each reads its part's texts), in index order."""
    calls, first = [], 0
    for part in corpus_parts(run):
        rows = open_part(part).metadata.num_rows
        calls.append((str(part), first, hashing_of(config), boilerplate))
        first += rows
    if first != n:
        raise ClusterClipError(f"{run.root}: the corpus parts hold {first} documents, the labels {n}")
    return TextHashes.concat(ray_tasks(_part_hashes, calls), hashing_of(config))


def _part_hashes(path: str, first: int, hashing: Hashing, boilerplate: np.ndarray) -> TextHashes:
    """One Ray task: the text hashes of one corpus part's documents (the first is document ``first``)."""
    pf = open_part(path)
    return hash_texts((b.column(0) for b in pf.iter_batches(batch_size=TEXT_BATCH, columns=["text"])), hashing, first,
                      boilerplate)


def _lexical(run: RunDir, config: DedupConfig, hashes: TextHashes, n: int) -> None:
    """Save the text hashes, and the LSH candidate pairs of the signatures with their Jaccard estimates, over
    the whole corpus: a lexical near-copy is one whatever clusters the embedder put the two documents in."""
    if hashes.text_key.size != n:
        raise ClusterClipError(f"{run.root}: the corpus holds {hashes.text_key.size} texts, the labels {n}")
    pairs, jac = candidate_pairs(hashes, config.bands)
    save_npy(run.path(SIGNATURES), hashes.signatures)
    save_npy(run.path(BYTE_SIGNATURES), hashes.byte_signatures)
    save_npy(run.path(BYTE_ROWS), hashes.byte_rows())
    save_npy(run.path(WORD_SIGNATURES), hashes.word_signatures)
    save_npy(run.path(SHINGLE_COUNT), hashes.shingle_count)
    save_npy(run.path(TEXT_KEY), hashes.text_key)
    save_npy(run.path(LEXICAL_PAIRS), pairs)
    save_npy(run.path(LEXICAL_JACCARD), jac)


def _append_pairwise(run: RunDir, config: DedupConfig, labels: np.ndarray, first: int) -> None:
    """The pairwise work of documents ``first..N-1`` (appended by ``clusterclip add``) added to the stored work
    of the older ones, which is read whole before anything is written: semantic neighbours of the new documents
    only, text hashes of the new texts only, then the LSH candidates of all signatures."""
    neighbour, similarity = load_npy(run.path(NEIGHBOUR)), load_npy(run.path(SIMILARITY))
    rows = load_npy(run.path(BYTE_ROWS))[:first]
    old = TextHashes(*(load_npy(run.path(rel), mmap=True)[:first]
                       for rel in (SIGNATURES, WORD_SIGNATURES, SHINGLE_COUNT, TEXT_KEY)), rows >= 0,
                     load_npy(run.path(BYTE_SIGNATURES))[:int((rows >= 0).sum())])
    new_nb, new_sim = appended_neighbours(labels, first, lambda rows: fetch_rows(run, rows))
    texts = (b.column(0) for b in iter_corpus(run, ("text",), TEXT_BATCH, first=first))
    new = hash_texts(texts, hashing_of(config), first, load_npy(run.path(BOILERPLATE)))
    save_npy(run.path(NEIGHBOUR), np.concatenate([neighbour[:first], new_nb]))
    save_npy(run.path(SIMILARITY), np.concatenate([similarity[:first], new_sim]))
    _lexical(run, config, TextHashes.concat([old, new], hashing_of(config)), labels.size)


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


def pair_cosines(run: RunDir, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float32 cosines of the document pairs ``(a[i], b[i])`` from the stored embeddings, in batches."""
    out = np.empty(a.size, np.float32)
    for s in range(0, a.size, COSINE_BATCH):
        x, y = a[s:s + COSINE_BATCH], b[s:s + COSINE_BATCH]
        out[s:s + x.size] = np.einsum("ij,ij->i", fetch_rows(run, x), fetch_rows(run, y))
    return out


def write_removed(run: RunDir, found: CheckedGroups, ids: pa.Array) -> None:
    """``dedup/removed.parquet``: removed and kept index and id, the removed document's cosine and word-set
    Jaccard estimate to the kept one (every one ``>= confirm``), and the detector of its accepted edges."""
    removed = found.removed
    kept = found.kept[found.group[removed]]
    table = pa.table({"removed_index": removed, "removed_id": ids.take(pa.array(removed)),
                      "kept_index": kept, "kept_id": ids.take(pa.array(kept)),
                      "cosine": found.cosine_to_kept[removed], "word_jaccard": found.jaccard_to_kept[removed],
                      "detector": pa.array(detector_names(found.linked[removed]).tolist(), pa.string())})
    with atomic_path(run.path(REMOVED)) as tmp:
        pq.write_table(table, tmp)


def largest_groups(found: CheckedGroups, ids: pa.Array, k: int = LARGEST_SHOWN) -> list[dict[str, Any]]:
    """The record's ``largest_groups``: the ``k`` largest groups with their least similar member."""
    return [{"size": s.size, "kept": s.kept, "kept_id": str(ids[s.kept]), "member": s.member,
             "member_id": str(ids[s.member]), "jaccard": round(s.jaccard, 4), "cosine": round(s.cosine, 4),
             "mean_cosine": round(s.mean_cosine, 4)} for s in found.largest(k)]
