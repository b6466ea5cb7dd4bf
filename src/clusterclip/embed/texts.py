"""Corpus texts for the embed stage: streamed in document order, or a seeded sample of them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from clusterclip.corpus import open_parquet
from clusterclip.errors import ClusterClipError


def count_rows(parts: Sequence[Path]) -> int:
    """Documents in the corpus parts, from their Parquet metadata (no rows read)."""
    return sum(pq.ParquetFile(p).metadata.num_rows for p in parts)


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
            pf = open_parquet(part)
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
        pf = open_parquet(part)
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
