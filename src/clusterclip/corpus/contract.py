"""The corpus stage's contract: its name and files, its record, and the readers of its artifacts.

The corpus stage reads the user's inputs once into ``corpus/part-*.parquet`` (columns of
:data:`CORPUS_SCHEMA`, exactly ``PART_ROWS`` rows a part but the last, rows in document order) and
``tokens.npy`` (int64 token count per document), so later stages never parse user files. Every consumer
reads them through this module, which imports only the storage floor.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import itertools
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from clusterclip.errors import ClusterClipError
from clusterclip.store import RUN, RunDir, StaleArtifactError, file_digest, load_npy
from clusterclip.store.paths import kind, size_time, source
from clusterclip.store.record import StageRecord
from clusterclip.store.replica import local_path

CORPUS_STAGE = "corpus"
CORPUS_DIR = "corpus"
CORPUS_PART_GLOB = "part-*.parquet"
CORPUS_STAGING = "corpus/.staging"
CORPUS_ID_SPILL = "corpus/.ids"
"""Scratch of the duplicate-id check while the corpus stage runs (:mod:`clusterclip.corpus.id_spill`)."""
TOKENS = "tokens.npy"
"""int64 ``[N]``: tokens per document (the corpus stage's tokenizer, or a word/punctuation count)."""
DEFAULT_IDENTITY = "default-corpus"
"""The content identity of the built-in default corpus in a run's lineage (it has no input files)."""

CORPUS_SCHEMA = pa.schema([("index", pa.int64()), ("id", pa.string()), ("text", pa.string()),
                           ("n_tokens", pa.int64()), ("group", pa.string())])
"""Columns of a corpus part: global document index, id, text, token count, ground-truth group (or null)."""


def corpus_part(i: int) -> str:
    """The ``i``-th corpus part (50,000 documents each, in document order; each ``add`` starts new parts)."""
    return f"{CORPUS_DIR}/part-{i:05d}.parquet"


def corpus_staging_part(unit: int, i: int) -> str:
    """The ``i``-th part read from work unit ``unit`` by the Ray engine, before the final parts are cut."""
    return f"{CORPUS_STAGING}/unit-{unit:06d}-{i:05d}.parquet"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CorpusRecord(StageRecord):
    """``corpus.json``. ``config`` holds the reader options, ``inputs`` (as given) and, after adds, ``added``.

    ``inputs`` (the field) fingerprints every input file read (path, format, size, modification time,
    SHA-256), ``input_hashes`` is the content identity of the stage's own inputs; each ``clusterclip add``
    appends to ``additions`` (what it read, where its documents start) and to ``regrow`` (its command).
    """

    NAME: ClassVar[str] = CORPUS_STAGE
    FALLBACK: ClassVar[tuple[str, ...]] = ("clusterclip", "embed", "INPUT...", "--out", RUN)

    count: int
    tokens: int
    skipped: int
    skipped_examples: list[str]
    duplicate_ids: int
    groups: dict[str, int]
    inputs: list[dict[str, Any]]
    engine: str
    input_hashes: list[str]
    additions: list[dict[str, Any]] | None = None
    regrow: list[list[str]] | None = None

    def parts(self) -> list[str]:
        """The corpus parts it lists (run-relative), in document order."""
        return sorted(r for r in self.artifacts if fnmatch.fnmatch(r, f"{CORPUS_DIR}/{CORPUS_PART_GLOB}"))

    def read_options(self, fields: Sequence[str]) -> dict[str, Any]:
        """The recorded values of the reader options ``fields`` (what ``clusterclip add`` reads new inputs with)."""
        return {f: self.config[f] for f in fields}

    def lineage_hashes(self) -> list[str]:
        """The content identities of every input that entered the run, in order: the corpus stage's
        (:data:`DEFAULT_IDENTITY` for the default corpus; the path for records written before hashes) and
        each add's."""
        base = self.input_hashes or [e.get("sha256") or e["path"] for e in self.inputs] or [DEFAULT_IDENTITY]
        return [*base, *(h for a in self.additions or () for h in a.get("input_hashes", a.get("inputs", [])))]


def open_part(path: str | os.PathLike[str]) -> pq.ParquetFile:
    """Open a corpus part (or any Parquet file) for streaming. Pre-buffering is off: pyarrow's default
    pre-buffers every requested column chunk of the file, so iterating a file would hold all of it in memory."""
    return pq.ParquetFile(source(path), pre_buffer=False)


def corpus_parts(run: RunDir) -> list[Path]:
    """The corpus parts of a run directory, in index order: those its corpus record lists, or, without a
    record, every ``corpus/part-*.parquet``."""
    rec = run.record(CORPUS_STAGE) or {}
    rels = sorted(r for r in rec.get("artifacts", {}) if fnmatch.fnmatch(r, f"{CORPUS_DIR}/{CORPUS_PART_GLOB}"))
    if not rels:
        return sorted(run.path(CORPUS_DIR).glob(CORPUS_PART_GLOB))
    return [run.locate(r) for r in rels]


def count_rows(parts: Sequence[Path]) -> int:
    """Documents in the corpus parts, from their Parquet metadata (no rows read)."""
    return sum(open_part(p).metadata.num_rows for p in parts)


def iter_corpus(run: RunDir, columns: Sequence[str] = ("text",), batch_rows: int = 4096,
                first: int = 0) -> Iterator[pa.RecordBatch]:
    """Stream the corpus of a run directory in index order, only the given columns, from document ``first``
    (parts wholly before it are skipped from their metadata, e.g. to read what ``clusterclip add`` appended)."""
    start = 0
    for part in corpus_parts(run):
        pf = open_part(part)
        rows = pf.metadata.num_rows
        if start + rows > first:
            skip = max(0, first - start)
            for rb in pf.iter_batches(batch_size=batch_rows, columns=list(columns)):
                if skip >= rb.num_rows:
                    skip -= rb.num_rows
                    continue
                yield rb.slice(skip)
                skip = 0
        start += rows


def read_column(run: RunDir, column: str) -> list[Any]:
    """One corpus column as a Python list (e.g. ids or groups); O(N) memory."""
    out: list[Any] = []
    for rb in iter_corpus(run, (column,)):
        out.extend(rb.column(0).to_pylist())
    return out


def load_tokens(run: RunDir, mmap: bool = True) -> np.ndarray:
    """``tokens.npy`` (memory-mapped by default); the caller has verified the corpus stage."""
    return load_npy(run.path(TOKENS), mmap=mmap)


class TextReader:
    """Texts of the corpus parts in document order, from row ``start``, handed out ``take(k)`` at a time.

    Whole row groups before ``start`` are skipped without being read.
    """

    def __init__(self, parts: Sequence[Path], start: int = 0, read_rows: int = 8192) -> None:
        self._batches = self._iter(parts, start, read_rows)
        self._buf: list[str] = []
        self._pos = 0

    @staticmethod
    def _iter(parts: Sequence[Path], skip: int, read_rows: int) -> Iterator[list[str]]:
        for part in parts:
            pf = open_part(part)
            for rg in range(pf.num_row_groups):
                rg_rows = pf.metadata.row_group(rg).num_rows
                if skip >= rg_rows:
                    skip -= rg_rows
                    continue
                for batch in pf.iter_batches(batch_size=read_rows, row_groups=[rg], columns=["text"]):
                    texts = [t if t is not None else "" for t in batch.column(0).to_pylist()]
                    if skip:
                        texts, skip = texts[skip:], max(0, skip - len(texts))
                    if texts:
                        yield texts

    def take(self, k: int) -> list[str]:
        while len(self._buf) - self._pos < k:
            try:
                more = next(self._batches)
            except StopIteration:
                raise ClusterClipError("corpus parts hold fewer rows than their metadata says; "
                                       "re-run the corpus stage") from None
            self._buf = self._buf[self._pos:] + more
            self._pos = 0
        out = self._buf[self._pos:self._pos + k]
        self._pos += k
        return out


def sample_texts(parts: Sequence[Path], n_docs: int, size: int, seed: int) -> list[str]:
    """The texts of a seeded uniform sample of ``min(size, n_docs)`` documents, in document order.

    Only the row groups holding sampled rows are read, one at a time, and only the sampled texts become
    Python strings: at 10^6 documents and more the sample costs a fraction of a pass over the corpus.
    """
    rows = np.sort(np.random.default_rng(seed).choice(n_docs, size=min(size, n_docs), replace=False))
    out: list[str] = []
    first = 0
    for part in parts:
        pf = open_part(part)
        sizes = [pf.metadata.row_group(g).num_rows for g in range(pf.metadata.num_row_groups)]
        starts = first + np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
        for g in range(len(sizes)):
            lo, hi = np.searchsorted(rows, [starts[g], starts[g + 1]])
            if hi > lo:
                texts = pf.read_row_group(g, columns=["text"]).column(0)
                out.extend(texts.take(pa.array(rows[lo:hi] - starts[g])).to_pylist())
        first = int(starts[-1])
    if len(out) != rows.size:
        raise ClusterClipError(f"corpus parts hold {first} documents, expected {n_docs}; rebuild the corpus")
    return out


def same_content(entry: dict[str, Any], known: dict[str, Any]) -> bool:
    """Whether the input file of fingerprint ``entry`` still holds the bytes of the recorded ``known`` entry:
    same size and modification time, or (a rewrite or a copy) the same SHA-256."""
    if entry["size"] != known.get("size"):
        return False
    if entry["mtime_ns"] == known.get("mtime_ns"):
        return True
    if not known.get("sha256"):
        return False
    try:
        return file_digest(entry["path"]) == known["sha256"]
    except OSError as exc:
        raise ClusterClipError(f"{entry['path']}: cannot read ({exc.strerror})") from None


def check_inputs_unchanged(run: RunDir) -> None:
    """Refuse to go on when a corpus input changed since the corpus stage (or an add) read it: its size, or
    its bytes when its modification time changed (an input rewritten with the same bytes is fine)."""
    rec = CorpusRecord.require(run, verify=False)
    for entry in rec.inputs:
        path = local_path(entry["path"])
        if kind(path) is None:
            raise StaleArtifactError(f"{path}: input of the corpus stage no longer exists; re-run "
                                     f"`{run.rebuild_command(CORPUS_STAGE)}`")
        size, mtime_ns = size_time(path)
        if not same_content({**entry, "size": size, "mtime_ns": mtime_ns}, entry):
            raise StaleArtifactError(
                f"{path}: changed since the corpus stage read it (size {entry['size']} -> {size}); "
                f"re-run `{run.rebuild_command(CORPUS_STAGE)}` so every stage uses the same corpus")


@dataclass(frozen=True)
class RowGroup:
    """One row group of a corpus part: its file, number and first and last-plus-one document index."""

    path: str
    group: int
    start: int
    stop: int


def in_index_order(rows: pa.Table, index: np.ndarray, folder: Path, rebuild: str) -> pa.Table:
    """``rows`` without their ``index`` column, refused unless it holds ``index`` (the corpus's order)."""
    if not np.array_equal(rows.column("index").to_numpy(), index):
        raise StaleArtifactError(f"{folder}: rows are not in index order; rebuild the corpus with `{rebuild}`")
    return rows.drop_columns(["index"])


class CorpusIndex:
    """Where each document lives: the corpus parts with their row groups' first rows, from metadata."""

    def __init__(self, run: RunDir) -> None:
        self.parts = corpus_parts(run)
        if not self.parts:
            raise StaleArtifactError(f"{run.path(CORPUS_DIR)}: no {CORPUS_PART_GLOB} files; rebuild the corpus "
                                     f"with `{run.rebuild_command(CORPUS_STAGE, force=True)}`")
        run.require(CORPUS_STAGE, only=[p.relative_to(run.root).as_posix() for p in self.parts])
        self.rebuild = run.rebuild_command(CORPUS_STAGE, force=True)
        self.rg_starts: list[np.ndarray] = []
        self.rg_bytes: list[int] = []
        start = 0
        for part in self.parts:  # each footer is dropped once read: 2 MiB per million documents, 2 GiB at 10^9
            pf = open_part(part)
            md = pf.metadata
            names = pf.schema_arrow.names
            cols = [names.index(c) for c in ("id", "text")]
            rows = [md.row_group(g).num_rows for g in range(md.num_row_groups)]
            self.rg_starts.append(start + np.concatenate([[0], np.cumsum(rows)]).astype(np.int64))
            self.rg_bytes += [sum(md.row_group(g).column(c).total_uncompressed_size for c in cols)
                              for g in range(md.num_row_groups)]
            start += sum(rows)
        self.n = start
        self.text_bytes = sum(self.rg_bytes)

    def row_groups(self) -> list[RowGroup]:
        """Every row group of the corpus, in document order (a part's groups share its path string)."""
        groups: list[RowGroup] = []
        for part, starts in zip(self.parts, self.rg_starts, strict=True):
            path, bounds = str(part), starts.tolist()
            groups += [RowGroup(path, g, a, b) for g, (a, b) in enumerate(itertools.pairwise(bounds))]
        return groups

    @functools.cached_property
    def files(self) -> list[pq.ParquetFile]:
        """The parts, open (for the window export, whose corpus fits ``--memory-mb``)."""
        return [open_part(p) for p in self.parts]

    def gather(self, docs: np.ndarray) -> pa.Table:
        """``id`` and ``text`` of ``docs`` (sorted, distinct indices), reading only the row groups holding them."""
        tables = []
        for pf, starts in zip(self.files, self.rg_starts, strict=True):
            lo, hi = np.searchsorted(docs, [starts[0], starts[-1]])
            if lo == hi:
                continue
            mine = docs[lo:hi]
            rg = np.searchsorted(starts, mine, side="right") - 1
            groups = np.unique(rg)
            sizes = starts[groups + 1] - starts[groups]
            first = np.zeros(len(starts) - 1, np.int64)
            first[groups] = np.concatenate([[0], np.cumsum(sizes)[:-1]])
            table = pf.read_row_groups(groups.tolist(), columns=["index", "id", "text"])
            tables.append(self.checked(table.take(pa.array(first[rg] + mine - starts[rg])), mine))
        return pa.concat_tables(tables)

    def checked(self, rows: pa.Table, index: np.ndarray) -> pa.Table:
        """``rows`` without their ``index`` column, refused unless it holds ``index`` (the corpus's order)."""
        return in_index_order(rows, index, self.parts[0].parent, self.rebuild)
