"""Corpus parts: writing documents into ``corpus/part-*.parquet`` with global indices, and reading them back.

Parts hold exactly ``limits.PART_ROWS`` rows (the last one fewer) and their bytes depend only on their rows,
whoever wrote them (this process, Ray tasks, ``clusterclip add``).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from clusterclip.contract.corpus import corpus_schema
from clusterclip.contract.corpus_texts import RECORD_COLUMN
from clusterclip.corpus import limits
from clusterclip.corpus.id_spill import IdSpill
from clusterclip.corpus.quality import QUALITY_FIELD
from clusterclip.corpus.records import DocBatch, ReadStats
from clusterclip.errors import disk_full_at
from clusterclip.store import atomic_path


@dataclass
class WrittenParts:
    """What writing some documents leaves for the stage record: the parts (run-relative) and their sizes,
    and per document its token count and id hash (in ``id_hashes``, or spilled to ``ids``), with the group
    counts and read stats; ``key_base`` is the spill key of the first document (Ray work units)."""

    parts: list[str]
    part_sizes: list[int]
    tokens: np.ndarray
    id_hashes: np.ndarray
    groups: Counter[str]
    stats: ReadStats
    ids: IdSpill | None = None
    key_base: int = 0


def write_part(path: Path, table: pa.Table) -> None:
    """Write one corpus part atomically; chunks are combined first so the bytes depend only on the rows."""
    with disk_full_at(path), atomic_path(path) as tmp:
        pq.write_table(table.combine_chunks(), tmp, row_group_size=limits.ROW_GROUP_ROWS)


class PartWriter:
    """Writes documents into parts ``name(0), name(1), ...`` of exactly ``part_rows`` rows (the last one
    fewer), indexed from ``first_index`` (``clusterclip add`` continues after the corpus), and keeps what
    the stage record needs: token counts, id hashes, groups."""

    def __init__(self, root: Path, name: Callable[[int], str], count_tokens: Callable[[DocBatch], np.ndarray],
                 part_rows: int, first_index: int = 0, ids: IdSpill | None = None,
                 field_names: Sequence[str] = (), scorer: Callable[[list[str]], np.ndarray] | None = None) -> None:
        self.root, self.name, self.count_tokens, self.part_rows = root, name, count_tokens, part_rows
        self.first_index, self.ids = first_index, ids
        self.field_names, self.scorer = tuple(field_names), scorer
        self.schema = corpus_schema((*self.field_names, *((QUALITY_FIELD,) if scorer is not None else ())))
        self.schema = self.schema.append(pa.field(RECORD_COLUMN, pa.string()))  # dropped from a part holding none
        self.parts: list[str] = []
        self.part_sizes: list[int] = []
        self.tokens: list[np.ndarray] = []
        self.id_hashes: list[np.ndarray] = []
        self.groups: Counter[str] = Counter()
        self.n = 0
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0

    def add(self, batch: DocBatch) -> None:
        tokens = self.count_tokens(batch)
        start = self.first_index + self.n
        kept = [pa.array(list(col), pa.string()) for col in _columns(batch.fields, len(self.field_names), len(batch))]
        if self.scorer is not None:
            kept.append(pa.array([repr(float(s)) for s in self.scorer(batch.texts)], pa.string()))
        rb = pa.record_batch([pa.array(np.arange(start, start + len(batch), dtype=np.int64)),
                              pa.array(batch.ids, pa.string()), pa.array(batch.texts, pa.string()),
                              pa.array(tokens), pa.array(batch.groups, pa.string()), *kept,
                              pa.array(_records(batch), pa.string())], schema=self.schema)
        self.tokens.append(tokens)
        if self.ids is not None:
            self.ids.add(hash_ids(batch.ids), start)
        else:
            self.id_hashes.append(hash_ids(batch.ids))
        self.groups.update(g for g in batch.groups if g is not None)
        self.n += len(batch)
        while rb.num_rows:
            take = min(rb.num_rows, self.part_rows - self._pending_rows)
            self._pending.append(rb.slice(0, take))
            self._pending_rows += take
            rb = rb.slice(take)
            if self._pending_rows == self.part_rows:
                self._flush()

    def finish(self, stats: ReadStats) -> WrittenParts:
        """Write the last part; what was read, for the stage record."""
        if self._pending:
            self._flush()
        return WrittenParts(self.parts, self.part_sizes, concat(self.tokens, np.int64),
                            concat(self.id_hashes, np.uint64), self.groups, stats, self.ids)

    def _flush(self) -> None:
        rel = self.name(len(self.parts))
        write_part(self.root / rel, without_empty_records(pa.Table.from_batches(self._pending, self.schema)))
        self.parts.append(rel)
        self.part_sizes.append(self._pending_rows)
        self._pending, self._pending_rows = [], 0


def _records(batch: DocBatch) -> list[str | None]:
    return batch.records if len(batch.records) == len(batch) else [None] * len(batch)


def without_empty_records(table: pa.Table) -> pa.Table:
    """``table`` without its ``record`` column when no row has a record (plain text: the parts stay as they were)."""
    if RECORD_COLUMN in table.column_names and table.column(RECORD_COLUMN).null_count == table.num_rows:
        return table.drop_columns([RECORD_COLUMN])
    return table


def _columns(rows: Sequence[tuple[str | None, ...]], width: int, n: int) -> list[tuple[str | None, ...]]:
    """The kept fields' values column by column (a document read without them, e.g. a .txt file, has none)."""
    if width == 0:
        return []
    return list(zip(*(row if len(row) == width else (None,) * width for row in rows), strict=True)) if n else \
        [()] * width


def concat(chunks: Sequence[np.ndarray], dtype: type) -> np.ndarray:
    """The chunks end to end as ``dtype`` (empty when there are none)."""
    return np.concatenate(chunks).astype(dtype, copy=False) if chunks else np.zeros(0, dtype)


def hash_ids(ids: list[str]) -> np.ndarray:
    """A 64-bit hash of every id (to count duplicate ids without keeping the ids)."""
    return np.fromiter((int.from_bytes(hashlib.blake2b(s.encode(), digest_size=8).digest(), "little")
                        for s in ids), dtype=np.uint64, count=len(ids))
