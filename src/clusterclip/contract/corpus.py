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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from clusterclip.contract.corpus_texts import RECORD_COLUMN, open_part
from clusterclip.errors import ClusterClipError
from clusterclip.store import RUN, RunDir, StaleArtifactError, file_digest, load_json, load_npy
from clusterclip.store.paths import kind, size_time
from clusterclip.store.record import RecordedConfig, StageRecord
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
"""Columns of a corpus part: global document index, id, text, token count, ground-truth group (or null); then one
``field:<name>`` column (text, null: missing) per kept field (``--keep-fields``)."""
FIELD_COLUMN = "field:"
FIELDS_DIR = "fields"
"""``fields/<name>.npy`` (float64, NaN: missing; or int32 codes, -1: missing) and ``fields/<name>.json`` (its kind
and, for a categorical field, its values: code ``i`` is ``categories[i]``) per kept field."""


def corpus_schema(field_names: Sequence[str] = ()) -> pa.Schema:
    """The columns of a corpus part that keeps ``field_names``."""
    return pa.schema([*CORPUS_SCHEMA, *((FIELD_COLUMN + name, pa.string()) for name in field_names)])


def field_files(name: str) -> tuple[str, str]:
    """The array and the description of kept field ``name``, run-relative."""
    return f"{FIELDS_DIR}/{name}.npy", f"{FIELDS_DIR}/{name}.json"


@dataclass(frozen=True)
class DocField:
    """A kept per-document field: ``values`` float64 (NaN: missing) when ``categories`` is None, else int32 codes
    (-1: missing) into ``categories``."""

    name: str
    values: np.ndarray
    categories: tuple[str, ...] | None = None

    @property
    def numeric(self) -> bool:
        return self.categories is None

    def labels(self) -> list[str | None]:
        """Each document's value as text (None: missing); O(N) Python objects: for small corpora and reports."""
        if self.categories is None:
            return [None if v != v else repr(float(v)) for v in self.values.tolist()]
        cats = self.categories
        return [cats[c] if c >= 0 else None for c in self.values.tolist()]


def load_fields(run: RunDir, names: Sequence[str] | None = None, mmap: bool = True) -> dict[str, DocField]:
    """The kept fields of the run (``names``: those; an unknown name raises naming the fields kept); the caller
    has verified the corpus stage."""
    rec = CorpusRecord.require(run, verify=False)
    kept = rec.fields or {}
    wanted = list(kept) if names is None else list(names)
    unknown = [n for n in wanted if n not in kept]
    if unknown:
        raise ClusterClipError(f"{run.root}: the corpus kept no field {unknown[0]!r} (kept: {', '.join(kept) or 'none'}"
                               f"); re-read the corpus with --keep-fields {','.join([*kept, *unknown])}")
    out = {}
    for name in wanted:
        array, meta = field_files(name)
        info = load_json(run.path(meta))
        cats = info.get("categories")
        out[name] = DocField(name, load_npy(run.path(array), mmap=mmap), None if cats is None else tuple(cats))
    return out


def corpus_part(i: int) -> str:
    """The ``i``-th corpus part (50,000 documents each, in document order; each ``add`` starts new parts)."""
    return f"{CORPUS_DIR}/part-{i:05d}.parquet"


def corpus_staging_part(unit: int, i: int) -> str:
    """The ``i``-th part read from work unit ``unit`` by the Ray engine, before the final parts are cut."""
    return f"{CORPUS_STAGING}/unit-{unit:06d}-{i:05d}.parquet"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CorpusSettings(RecordedConfig):
    """``corpus.json``'s ``config``: the reader options (:class:`clusterclip.corpus.config.CorpusConfig`; those newer
    than a run, ``keep_fields`` and ``quality_scorer``, only when set), the ``inputs`` as given and, after each
    ``clusterclip add``, what it read (``added``: its inputs and reader options)."""

    WHAT: ClassVar[str] = "the corpus settings"

    text_field: str
    id_field: str | None
    group_field: str | None
    on_bad_record: str
    split: str
    keep_fields: list[str] | None = None
    record_kind: str
    text_template: str | None
    tokenizer: str | None
    min_words: int
    quality_scorer: str | None = None
    inputs: list[str]
    added: list[dict[str, Any]] | None = None

    def text_options(self) -> dict[str, Any]:
        """What a document's text is made of: the reader options that :class:`~clusterclip.contract.corpus_texts.Parts`
        reads a record's turns with."""
        return {"record_kind": self.record_kind, "text_field": self.text_field, "text_template": self.text_template}

    def differing(self, options: Mapping[str, Any]) -> list[str]:
        """The reader options of ``options`` (settings as the corpus stage records them) whose recorded value
        differs, the inputs aside, sorted."""
        recorded = self.to_json()
        return sorted(k for k, v in options.items() if k != "inputs" and recorded.get(k) != v)

    def with_added(self, entry: Mapping[str, Any]) -> dict[str, Any]:
        """The settings as recorded after one more ``clusterclip add`` (``entry``: its inputs and reader options)."""
        return {**self.to_json(), "added": [*(self.added or []), dict(entry)]}


@dataclasses.dataclass(frozen=True, kw_only=True)
class CorpusRecord(StageRecord):
    """``corpus.json``. ``config`` holds the reader options, ``inputs`` (as given) and, after adds, ``added``.

    ``inputs`` (the field) fingerprints every input file read (path, format, size, modification time,
    SHA-256), ``input_hashes`` is the content identity of the stage's own inputs; each ``clusterclip add``
    appends to ``additions`` (what it read, where its documents start) and to ``regrow`` (its command).
    ``fields`` describes each kept field (kind, missing values, range or number of values: ``fields/``);
    ``kinds`` counts the documents of each record kind when some are not plain text (conversations).
    """

    NAME: ClassVar[str] = CORPUS_STAGE
    FALLBACK: ClassVar[tuple[str, ...]] = ("clusterclip", "embed", "INPUT...", "--out", RUN)
    IN_PIPELINE: ClassVar[bool] = True
    GROWN: ClassVar[bool] = True

    config: CorpusSettings
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
    fields: dict[str, dict[str, Any]] | None = None
    kinds: dict[str, int] | None = None

    def parts(self) -> list[str]:
        """The corpus parts it lists (run-relative), in document order."""
        return sorted(r for r in self.artifacts if fnmatch.fnmatch(r, f"{CORPUS_DIR}/{CORPUS_PART_GLOB}"))

    def read_options(self, fields: Sequence[str]) -> dict[str, Any]:
        """The recorded values of the reader options ``fields`` (what ``clusterclip add`` reads new inputs with);
        an option the record does not hold (newer than the run, recorded only when set) keeps its default."""
        recorded = self.config.to_json()
        values = {f: recorded[f] for f in fields if f in recorded}
        return {f: tuple(v) if isinstance(v, list) else v for f, v in values.items()}

    def lineage_hashes(self) -> list[str]:
        """The content identities of every input that entered the run, in order: the corpus stage's
        (:data:`DEFAULT_IDENTITY` for the default corpus; the path for records written before hashes) and
        each add's."""
        base = self.input_hashes or [e.get("sha256") or e["path"] for e in self.inputs] or [DEFAULT_IDENTITY]
        return [*base, *(h for a in self.additions or () for h in a.get("input_hashes", a.get("inputs", [])))]


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
    (parts wholly before it are skipped from their metadata, e.g. to read what ``clusterclip add`` appended); a
    column a part lacks (``record`` in a part of plain text) is null."""
    start = 0
    for part in corpus_parts(run):
        pf = open_part(part)
        rows = pf.metadata.num_rows
        if start + rows > first:
            skip = max(0, first - start)
            present = [c for c in columns if c in pf.schema_arrow.names]
            for rb in pf.iter_batches(batch_size=batch_rows, columns=present):
                if skip >= rb.num_rows:
                    skip -= rb.num_rows
                    continue
                yield _with_nulls(rb.slice(skip), columns)
                skip = 0
        start += rows


def _with_nulls(rb: pa.RecordBatch, columns: Sequence[str]) -> pa.RecordBatch:
    """``rb`` with the ``columns`` its part lacks (the ``record`` of plain text) as null strings, in order."""
    if list(rb.schema.names) == list(columns):
        return rb
    arrays = [rb.column(c) if c in rb.schema.names else pa.nulls(rb.num_rows, pa.string()) for c in columns]
    return pa.RecordBatch.from_arrays(arrays, names=list(columns))


def read_column(run: RunDir, column: str) -> list[Any]:
    """One corpus column as a Python list (e.g. ids or groups); O(N) memory."""
    out: list[Any] = []
    for rb in iter_corpus(run, (column,)):
        out.extend(rb.column(0).to_pylist())
    return out


def load_tokens(run: RunDir, mmap: bool = True) -> np.ndarray:
    """``tokens.npy`` (memory-mapped by default); the caller has verified the corpus stage."""
    return load_npy(run.path(TOKENS), mmap=mmap)


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


def row_columns(pf: pq.ParquetFile, records: bool) -> list[str]:
    """The columns a consumer of whole rows reads of a part: index, id, text and, with ``records``, the ``record``
    column when the part has one (:func:`with_records` adds it to a part of plain text)."""
    return ["index", "id", "text", *([RECORD_COLUMN] if records and RECORD_COLUMN in pf.schema_arrow.names else [])]


def with_records(table: pa.Table, records: bool) -> pa.Table:
    """``table`` with a null ``record`` column when ``records`` asks for one and its part had none (plain text)."""
    if not records or RECORD_COLUMN in table.column_names:
        return table
    return table.append_column(RECORD_COLUMN, pa.nulls(table.num_rows, pa.string()))


class CorpusIndex:
    """Where each document lives: the corpus parts with their row groups' first rows, from metadata; with
    ``records``, :meth:`gather` also reads each document's conversation record (null for plain text)."""

    def __init__(self, run: RunDir, records: bool = False) -> None:
        self.records = records
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
            cols = [names.index(c) for c in row_columns(pf, records)[1:]]
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
        """``id`` and ``text`` (and ``record``) of ``docs`` (sorted, distinct indices), reading only the row groups
        holding them."""
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
            table = with_records(pf.read_row_groups(groups.tolist(), columns=row_columns(pf, self.records)),
                                 self.records)
            tables.append(self.checked(table.take(pa.array(first[rg] + mine - starts[rg])), mine))
        return pa.concat_tables(tables)

    def checked(self, rows: pa.Table, index: np.ndarray) -> pa.Table:
        """``rows`` without their ``index`` column, refused unless it holds ``index`` (the corpus's order)."""
        return in_index_order(rows, index, self.parts[0].parent, self.rebuild)
