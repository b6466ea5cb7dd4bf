"""What consumers read of the corpus parts' documents: each one's text, or one part of a conversation.

The embed stage reads texts in document order (:class:`TextReader`) and a fitted embedder a seeded sample of them
(:func:`sample_texts`). With ``--embed-part prompt|response|last-user`` (:class:`Parts`), a document kept with
its conversation record (the parts' ``record`` column) gives that part of its turns instead: the record is
parsed again with the reader options the corpus stage recorded, so the part is what the reader saw. A document of
plain text, or a conversation without that part (no system or user turn for ``prompt``), gives its whole text.
Other stages read it from here (the corpus contract, :mod:`clusterclip.contract.corpus`, names the parts).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from clusterclip.contract.record_kinds import PARTS, kind_of, part_of
from clusterclip.errors import ClusterClipError
from clusterclip.store.paths import source

RECORD_COLUMN = "record"
"""A part's documents of a conversation kind (``--record-kind``): each one's input record as JSON (null for plain
text; a part without such documents has no such column)."""


def open_part(path: str | os.PathLike[str]) -> pq.ParquetFile:
    """Open a corpus part (or any Parquet file) for streaming. Pre-buffering is off: pyarrow's default
    pre-buffers every requested column chunk of the file, so iterating a file would hold all of it in memory."""
    return pq.ParquetFile(source(path), pre_buffer=False)


class Parts:
    """One part of every conversation (``--embed-part``, :data:`PARTS`), from the reader options the corpus record
    holds (``record_kind``, ``text_field``, ``text_template``; a record written before them: their defaults)."""

    def __init__(self, part: str, options: Mapping[str, Any]) -> None:
        if part not in PARTS:
            raise ClusterClipError(f"no part {part!r} of a conversation; parts are {', '.join(PARTS)}")
        self.part = part
        self.kind = str(options.get("record_kind") or "auto")
        self.text_field = str(options.get("text_field") or "text")
        self.template = options.get("text_template")
        if self.kind == "auto" and self.template is not None:
            self.kind = "template"

    @property
    def whole(self) -> bool:
        """Whether every document gives its whole text (``all``: the record column need not be read)."""
        return self.part == "all"

    def of(self, texts: Sequence[str], records: Sequence[str | None]) -> list[str]:
        """The part of each document (``records``: its record as JSON, None for plain text), else its text."""
        if self.whole:
            return list(texts)
        return [text if record is None else self._part(record, text)
                for text, record in zip(texts, records, strict=True)]

    def turns(self, record: str) -> list[tuple[str, str]] | None:
        """The turns of a record as the reader saw them (None: plain text or a template, not a conversation)."""
        fields = json.loads(record)
        kind = kind_of(fields, self.kind, self.text_field)
        return None if kind is None or kind.name == "template" else kind.turns(fields, self.template)

    def _part(self, record: str, text: str) -> str:
        fields = json.loads(record)
        kind = kind_of(fields, self.kind, self.text_field)
        piece = part_of(kind.turns(fields, self.template), self.part) if kind is not None else ""
        return piece if piece.strip() else text


def _texts(table: pa.Table | pa.RecordBatch, parts: Parts | None) -> list[str]:
    texts = [t if t is not None else "" for t in table.column("text").to_pylist()]
    if parts is None or parts.whole or RECORD_COLUMN not in table.schema.names:
        return texts
    return parts.of(texts, table.column(RECORD_COLUMN).to_pylist())


def _columns(pf: pq.ParquetFile, parts: Parts | None) -> list[str]:
    """The columns that give a part's texts: ``text``, and its ``record`` when a part of conversations is read."""
    wants = parts is not None and not parts.whole and RECORD_COLUMN in pf.schema_arrow.names
    return ["text", RECORD_COLUMN] if wants else ["text"]


class TextReader:
    """Texts of the corpus parts in document order, from row ``start``, handed out ``take(k)`` at a time (with
    ``parts``: that part of each conversation).

    Whole row groups before ``start`` are skipped without being read.
    """

    def __init__(self, files: Sequence[Path], start: int = 0, read_rows: int = 8192,
                 parts: Parts | None = None) -> None:
        self._batches = self._iter(files, start, read_rows, parts)
        self._buf: list[str] = []
        self._pos = 0

    @staticmethod
    def _iter(files: Sequence[Path], skip: int, read_rows: int, parts: Parts | None) -> Iterator[list[str]]:
        for part in files:
            pf = open_part(part)
            for rg in range(pf.num_row_groups):
                rg_rows = pf.metadata.row_group(rg).num_rows
                if skip >= rg_rows:
                    skip -= rg_rows
                    continue
                for batch in pf.iter_batches(batch_size=read_rows, row_groups=[rg], columns=_columns(pf, parts)):
                    if skip:
                        batch, skip = batch.slice(skip), max(0, skip - batch.num_rows)
                    if batch.num_rows:
                        yield _texts(batch, parts)

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


def sample_texts(files: Sequence[Path], n_docs: int, size: int, seed: int, parts: Parts | None = None) -> list[str]:
    """The texts (with ``parts``: that part of each conversation) of a seeded uniform sample of ``min(size,
    n_docs)`` documents, in document order.

    Only the row groups holding sampled rows are read, one at a time, and only the sampled texts become
    Python strings: at 10^6 documents and more the sample costs a fraction of a pass over the corpus.
    """
    rows = np.sort(np.random.default_rng(seed).choice(n_docs, size=min(size, n_docs), replace=False))
    out: list[str] = []
    first = 0
    for part in files:
        pf = open_part(part)
        sizes = [pf.metadata.row_group(g).num_rows for g in range(pf.metadata.num_row_groups)]
        starts = first + np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
        for g in range(len(sizes)):
            lo, hi = np.searchsorted(rows, [starts[g], starts[g + 1]])
            if hi > lo:
                table = pf.read_row_group(g, columns=_columns(pf, parts))
                out.extend(_texts(table.take(pa.array(rows[lo:hi] - starts[g])), parts))
        first = int(starts[-1])
    if len(out) != rows.size:
        raise ClusterClipError(f"corpus parts hold {first} documents, expected {n_docs}; rebuild the corpus")
    return out
