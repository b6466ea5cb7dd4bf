"""The embed stage's contract: its name and files, its record, and the readers of its embeddings.

The embed stage writes ``embeddings/shard-NNNNN.npy``: float16 ``[rows, dim]`` unit vectors in document
order, ``shard_size`` rows a shard but the last, listed in its record's ``shards``. A fitted embedder (``lsa``,
``static-vocab``) also stores its model under ``embeddings/<name>/``, listed with checksums in the record.
Consumers read the vectors through this module (memory-mapped, a block at a time), never through the
embedders, so reading embeddings imports no model library.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from clusterclip.errors import ClusterClipError
from clusterclip.store import RUN, RunDir, load_npy
from clusterclip.store.record import RecordedConfig, StageRecord

EMBED_STAGE = "embed"
EMBED_DIR = "embeddings"
EMBED_PROGRESS = "embeddings/progress.json"
"""Finished shards of an interrupted embed stage, with checksums, so a re-run reuses them."""
EMBED_SHARD_GLOB = "shard-*.npy"
CONFIDENCE_GLOB = "confidence-*.npy"
CONFIDENCE_COLUMNS = ("coverage", "norm")
"""Columns of a confidence shard: the share of each document the embedder represented, and its vector's norm
before normalising (``docs/embedders.md``)."""


def embed_shard(i: int) -> str:
    """The ``i``-th embedding shard (float16, rows in document order)."""
    return f"{EMBED_DIR}/shard-{i:05d}.npy"


def confidence_shard(i: int) -> str:
    """The ``i``-th shard's confidence (float32 ``[rows, 2]``: :data:`CONFIDENCE_COLUMNS`)."""
    return f"{EMBED_DIR}/confidence-{i:05d}.npy"


def model_dir(embedder: str) -> str:
    """Where the embed stage stores the fitted model of embedder ``embedder`` (``embeddings/<name>``)."""
    return f"{EMBED_DIR}/{embedder}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class EmbedSettings(RecordedConfig):
    """``embed.json``'s ``config``: the embedder's full configuration (its ``config()``, with its ``name``: each
    embedder's own options), the shard size and, when not ``all``, the ``part`` of conversation records embedded
    (``--embed-part``)."""

    WHAT: ClassVar[str] = "the embed settings"

    embedder: dict[str, Any]
    shard_size: int
    part: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class EmbedRecord(StageRecord):
    """``embed.json``. ``config`` holds the embedder's full configuration, the shard size and the
    ``part`` of conversation records embedded (:class:`EmbedSettings`);
    ``shards`` lists every shard file, its rows and (runs of this version) its ``confidence`` file, in document
    order; ``confidence`` summarises the documents' coverage."""

    NAME: ClassVar[str] = EMBED_STAGE
    FALLBACK: ClassVar[tuple[str, ...]] = ("clusterclip", "embed", "INPUT...", "--out", RUN)
    UPSTREAM: ClassVar[tuple[str, ...]] = ("corpus",)
    IN_PIPELINE: ClassVar[bool] = True
    GROWN: ClassVar[bool] = True

    config: EmbedSettings
    embedder: str
    model: str
    dim: int
    dtype: str
    engine: str
    count: int
    shards: list[dict[str, Any]]
    regrow: list[list[str]] | None = None
    confidence: dict[str, float] | None = None

    @property
    def embedder_config(self) -> dict[str, Any]:
        """Everything that made the vectors: the embedder's ``config()`` as recorded."""
        return dict(self.config.embedder)

    @property
    def shard_size(self) -> int:
        return int(self.config.shard_size)

    @property
    def part(self) -> str:
        """What of a conversation record was embedded (``--embed-part``; ``all`` when the config does not say)."""
        return self.config.part or "all"

    def shard_files(self) -> list[str]:
        """The shard files (run-relative), in document order."""
        return [str(s["file"]) for s in self.shards]

    def has_confidence(self) -> bool:
        """Whether every shard has its confidence file (runs embedded before it have none)."""
        return bool(self.shards) and all("confidence" in s for s in self.shards)


def _embed_shards(run: RunDir, verify: bool) -> tuple[EmbedRecord, list[tuple[Path, int]]]:
    rec = EmbedRecord.require(run, verify=verify)
    shards = [(run.path(s["file"]), int(s["rows"])) for s in rec.shards]
    if sum(r for _, r in shards) != rec.count:
        raise ClusterClipError(f"{run.record_path(EMBED_STAGE)}: shard rows do not add up to count; re-run `embed`")
    return rec, shards


def _load_shard(path: Path, rows: int, dim: int, mmap: bool) -> np.ndarray:
    arr = load_npy(path, mmap=mmap)
    if arr.shape != (rows, dim):
        raise ClusterClipError(f"{path}: shape {arr.shape}, expected {(rows, dim)}; re-run `embed`")
    return arr


def load_embeddings(run: RunDir, dtype: Any = np.float32, verify: bool = True) -> np.ndarray:
    """All embeddings as one ``[count, dim]`` array (float32 by default), artifacts verified first."""
    rec, shards = _embed_shards(run, verify)
    out = np.empty((rec.count, rec.dim), dtype=dtype)
    pos = 0
    for path, rows in shards:
        out[pos:pos + rows] = _load_shard(path, rows, rec.dim, mmap=True)
        pos += rows
    return out


def gather_embeddings(run: RunDir, rows: np.ndarray, verify: bool = True) -> np.ndarray:
    """Float32 embeddings of the documents ``rows`` (sorted indices), read from memory-mapped shards."""
    rec, shards = _embed_shards(run, verify)
    out = np.empty((len(rows), rec.dim), dtype=np.float32)
    start = 0
    for path, n in shards:
        lo, hi = np.searchsorted(rows, [start, start + n])
        if hi > lo:
            out[lo:hi] = _load_shard(path, n, rec.dim, mmap=True)[rows[lo:hi] - start]
        start += n
    return out


def iter_embeddings(run: RunDir, batch_rows: int = 65536, verify: bool = True) -> Iterator[np.ndarray]:
    """Yield float32 blocks of ``batch_rows`` rows (the last one fewer) in document order.

    Shards are memory-mapped, so memory stays bounded by one block whatever the corpus size.
    """
    if batch_rows < 1:
        raise ClusterClipError(f"batch_rows must be >= 1, got {batch_rows}")
    rec, shards = _embed_shards(run, verify)
    pending: list[np.ndarray] = []
    have = 0
    for path, rows in shards:
        arr = _load_shard(path, rows, rec.dim, mmap=True)
        pos = 0
        while pos < rows:
            take = min(batch_rows - have, rows - pos)
            pending.append(np.asarray(arr[pos:pos + take], dtype=np.float32))
            have += take
            pos += take
            if have == batch_rows:
                yield pending[0] if len(pending) == 1 else np.concatenate(pending)
                pending, have = [], 0
    if have:
        yield pending[0] if len(pending) == 1 else np.concatenate(pending)


def load_confidence(run: RunDir, verify: bool = True) -> np.ndarray | None:
    """Every document's embedding confidence, float32 ``[count, 2]`` (:data:`CONFIDENCE_COLUMNS`), or None for a
    run embedded before confidence was recorded. 8 bytes a document."""
    rec = EmbedRecord.require(run, verify=verify)
    if not rec.has_confidence():
        return None
    parts = [load_npy(run.path(s["confidence"])) for s in rec.shards]
    out = np.concatenate(parts) if parts else np.zeros((0, 2), np.float32)
    if out.shape != (rec.count, len(CONFIDENCE_COLUMNS)):
        raise ClusterClipError(f"{run.path(EMBED_DIR)}: confidence of shape {out.shape}, expected "
                               f"{(rec.count, len(CONFIDENCE_COLUMNS))}; re-run `embed`")
    return out


COVERAGE_BINS = 1000
"""Coverage is summarised from a histogram of this many bins over [0, 1] (quantiles to 0.001), one shard at a
time, so the summary costs no memory per document."""


def coverage_histogram(confidence: np.ndarray) -> np.ndarray:
    """Counts of documents per coverage bin (:data:`COVERAGE_BINS` + 1 bins: the last holds coverage 1)."""
    bins = np.clip((np.asarray(confidence[:, 0], np.float64) * COVERAGE_BINS).astype(np.int64), 0, COVERAGE_BINS)
    return np.bincount(bins, minlength=COVERAGE_BINS + 1)


def confidence_summary(histogram: np.ndarray) -> dict[str, float]:
    """What the record and ``status`` say of the coverage (from :func:`coverage_histogram` summed over shards):
    its median and 5th percentile (to 0.001) and the share of documents of which the embedder represented less
    than half."""
    n = int(histogram.sum())
    if not n:
        return {"coverage_median": 0.0, "coverage_p5": 0.0, "below_half": 0.0}
    cum = np.cumsum(histogram)

    def quantile(q: float) -> float:
        return round(min(1.0, int(np.searchsorted(cum, q * (n - 1), side="right")) / COVERAGE_BINS), 4)

    return {"coverage_median": quantile(0.5), "coverage_p5": quantile(0.05),
            "below_half": round(float(cum[COVERAGE_BINS // 2 - 1]) / n, 4)}


def shards_confidence(run: RunDir, shards: list[dict[str, Any]]) -> dict[str, float] | None:
    """:func:`confidence_summary` of the confidence files of ``shards`` (entries of :attr:`EmbedRecord.shards`),
    read one at a time; None when there is no shard or one has no confidence file."""
    if not shards or not all("confidence" in s for s in shards):
        return None
    histogram = np.zeros(COVERAGE_BINS + 1, np.int64)
    for shard in shards:
        histogram += coverage_histogram(load_npy(run.path(shard["confidence"])))
    return confidence_summary(histogram)


def cluster_coverage(run: RunDir, labels: np.ndarray, k: int) -> np.ndarray | None:
    """Each cluster's mean coverage (:data:`CONFIDENCE_COLUMNS`), read one confidence shard at a time (``labels``
    may be memory-mapped) after the shards' checksums are verified; None for a run embedded before confidence was
    recorded or whose labels do not match."""
    rec = EmbedRecord.require(run, verify=False)
    if not rec.has_confidence() or len(labels) != rec.count:
        return None
    run.verify(EMBED_STAGE, rec.to_json(), only=[s["confidence"] for s in rec.shards])
    sums, counts, start = np.zeros(k), np.zeros(k), 0
    for shard in rec.shards:
        cov = np.asarray(load_npy(run.path(shard["confidence"]), mmap=True)[:, 0], np.float64)
        lab = np.asarray(labels[start:start + cov.size], np.int64)
        ok = (lab >= 0) & (lab < k)
        sums += np.bincount(lab[ok], weights=cov[ok], minlength=k)[:k]
        counts += np.bincount(lab[ok], minlength=k)[:k]
        start += cov.size
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
