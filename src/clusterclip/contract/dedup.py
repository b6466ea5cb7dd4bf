"""The dedup stage's contract: its name and files, its record, and the reader of its groups.

The dedup stage stores the pairwise work (the semantic neighbour of each document, the MinHash LSH candidate pairs
and the signatures, per document its word-set signature, distinct shingle count and normalised-text key, which
confirm the edges, and the short documents' byte-shingle signatures) and the groups derived from it:
``dedup/group.npy`` (int64 group id per document, ids in the order of their representatives' indices),
``dedup/kept.npy`` (int64, the representative of each group, ascending) and the removed -> kept map
``dedup/removed.parquet``. Plans read the groups through :func:`load_groups`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from clusterclip.errors import ClusterClipError
from clusterclip.store import RunDir, config_hash, load_npy, record_output_hash
from clusterclip.store.record import RecordedConfig, StageRecord

DEDUP_STAGE = "dedup"
DEDUP_DIR = "dedup"
NEIGHBOUR = "dedup/neighbour.npy"
"""int64 [N]: the earlier member (kept-rule order, same cluster) of highest cosine, -1 for a cluster's first."""
SIMILARITY = "dedup/similarity.npy"
"""float32 [N]: that cosine (-2 for a cluster's first): with ``NEIGHBOUR`` it derives groups for any eps."""
LEXICAL_PAIRS = "dedup/lexical_pairs.npy"
"""int64 [P, 2]: MinHash LSH candidate pairs (both in one band bucket), each once, first < second."""
LEXICAL_JACCARD = "dedup/lexical_jaccard.npy"
"""float32 [P]: the signatures' Jaccard estimate of each candidate pair."""
GROUP = "dedup/group.npy"
"""int64 [N]: group id per document (ids 0..G-1 in the order of their representatives' indices)."""
KEPT = "dedup/kept.npy"
"""int64 [G]: the representative (kept document) of each group, ascending."""
REMOVED = "dedup/removed.parquet"
"""One row per removed document: removed/kept index and id, its cosine and word-set Jaccard estimate
(``word_jaccard``; of byte shingles when both are short) to the kept one, and the detector whose accepted edges
touch it."""
SIGNATURES = "dedup/signatures.npy"
"""uint32 [N, num_perm]: MinHash signatures (kept so that ``clusterclip add`` hashes only the new texts)."""
WORD_SIGNATURES = "dedup/word_signatures.npy"
"""uint32 [N, word_perm]: MinHash signatures of each document's set of words (word 1-shingles), the second
signal that confirms a semantic edge and checks each group member against its kept document."""
SHINGLE_COUNT = "dedup/shingle_count.npy"
"""int32 [N]: distinct word shingles of each document (fewer than ``min_shingles``: a low-information
document, which joins only documents with the same ``TEXT_KEY``)."""
TEXT_KEY = "dedup/text_key.npy"
"""uint64 [N]: a hash of each document's lower-cased text with whitespace runs collapsed (symbols kept)."""
BOILERPLATE = "dedup/boilerplate.npy"
"""uint64 [B], sorted: the keys of the boilerplate lines (:mod:`clusterclip.dedup.lines`) left out of every
document's signatures, word set and shingle count (kept so that ``clusterclip add`` hashes new texts the same way)."""
BYTE_SIGNATURES = "dedup/byte_signatures.npy"
"""uint32 [S, num_perm]: MinHash signatures of the byte shingles of the *short* documents (fewer than twice
``char_words`` word shingles), in document order: a pair of short documents is compared on them."""
BYTE_ROWS = "dedup/byte_rows.npy"
"""int64 [N]: each document's row in ``BYTE_SIGNATURES``, -1 when it is not short."""
INDEX_ARTIFACTS = (NEIGHBOUR, SIMILARITY, LEXICAL_PAIRS, LEXICAL_JACCARD, SIGNATURES, WORD_SIGNATURES,
                   SHINGLE_COUNT, TEXT_KEY, BOILERPLATE, BYTE_SIGNATURES, BYTE_ROWS)
"""The pairwise work, reused when only the thresholds change."""
READS = ("cluster", "embed", "corpus")
"""The stages whose outputs the groups are built from (their output hashes make its inputs hash)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class DedupSettings(RecordedConfig):
    """``dedup.json``'s ``config``: the thresholds and the pairwise work's settings
    (:class:`clusterclip.dedup.config.DedupConfig`, every one)."""

    WHAT: ClassVar[str] = "the dedup settings"

    eps: float
    jaccard: float
    confirm: float
    verify: float
    shingle_confirm: float
    min_shingles: int
    num_perm: int
    bands: int
    shingle: int
    lexical_seed: int
    word_perm: int
    char_ngram: int
    char_words: int
    boilerplate: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class DedupRecord(StageRecord):
    """``dedup.json``: the thresholds (``config``), the settings the pairwise work depends on (``index``) and
    counts of what was found; ``appended_from`` when ``clusterclip add`` extended the groups from there.

    The derivation's counts (optional: records of older versions lack them): ``semantic_edges`` (documents
    whose semantic neighbour is within ``eps``), ``unconfirmed_semantic`` (those edges refused: word-set
    Jaccard below ``confirm``, or a low-information pair), ``refused_lexical`` (lexical edges at ``jaccard``
    refused as low-information pairs), ``split_off`` (members the first star check moved out of their
    component) and ``largest_groups``: the few largest groups, each ``size``, ``kept`` / ``kept_id``, its least
    similar ``member`` / ``member_id`` with their word-set ``jaccard`` and ``cosine``, and ``mean_cosine`` (the
    members' mean cosine to the kept document)."""

    NAME: ClassVar[str] = DEDUP_STAGE
    UPSTREAM: ClassVar[tuple[str, ...]] = ("corpus", "embed", "cluster")

    config: DedupSettings
    index: dict[str, int | float]
    documents: int
    groups: int
    removed: int
    removed_semantic: int
    removed_lexical: int
    largest_group: int
    reused_pairwise: bool
    pairwise_seconds: float
    engine: str
    appended_from: int | None = None
    semantic_edges: int | None = None
    unconfirmed_semantic: int | None = None
    refused_lexical: int | None = None
    split_off: int | None = None
    largest_groups: list[dict[str, Any]] | None = None


def inputs_of(records: Mapping[str, Mapping[str, Any]]) -> str:
    """The stage's inputs hash for these cluster, embed and corpus records (e.g. those before an add)."""
    return config_hash({s: record_output_hash(records[s]) for s in READS})


def dedup_inputs(run: RunDir) -> str:
    """The hash of what the stage reads: the current cluster, embed and corpus outputs."""
    return inputs_of({s: run.require(s, verify=False) for s in READS})


def load_groups(run: RunDir) -> tuple[np.ndarray, np.ndarray]:
    """The current ``(group, kept)`` arrays of ``run``, checksum-verified; refuses a missing stage, or one
    built from other corpus, embed or cluster outputs (stale, or behind after ``clusterclip add``)."""
    if run.record(DEDUP_STAGE) is None:
        raise ClusterClipError(f"{run.root}: no duplicate groups yet; run `clusterclip dedup {run.root}` first")
    rec = DedupRecord.require(run, verify=True, only=(GROUP, KEPT), current=True)
    if rec.inputs_hash != dedup_inputs(run):
        raise ClusterClipError(f"{run.root}: the duplicate groups predate the current corpus or clusters (e.g. "
                               f"`clusterclip add`); re-run `clusterclip dedup {run.root}`")
    return load_npy(run.path(GROUP)), load_npy(run.path(KEPT))
