"""The planned stream of a corpus larger than ``--memory-mb``: one pass over the corpus, then one bucket at a time.

Reading the plan window by window re-reads, for every window, the row groups its documents live in; a
plan in random order touches nearly all of them, so an export cost about ``draws / window`` passes over the
corpus. Here the corpus is read **once**, in order, row group by row group: every planned copy of a document
goes, with its plan position, to the bucket of ``bucket_rows`` consecutive positions that holds it (an
Arrow IPC file in a scratch folder). Then each bucket is read back, sorted by position and handed on: the
same rows in the same order as the windows made, with each corpus byte read once and written once more to
scratch. Memory: the plan's inverse (8 bytes per draw, plus 8 per document), one row group, and one bucket
(a third of ``memory_mb`` of text, at most ``BUCKET_BYTES``) up to three times while it is sorted.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from clusterclip.errors import ClusterClipError

BUCKET_BYTES = 1 << 30
"""The most text one bucket holds (1 GiB): within one Arrow ``string`` array, however large ``--memory-mb``."""
SCHEMA = pa.schema([("position", pa.int64()), ("id", pa.string()), ("text", pa.string())])


HELD_COPIES = 3
"""Copies of a bucket alive at once while :func:`gather` sorts it (memory-mapped as read, sorted, joined into
one chunk); the first is file pages the kernel can drop, so this is a bound with room to spare."""


def bucket_rows(text_bytes: int, n_docs: int, memory_mb: int) -> int:
    """Plan positions per bucket: as many as hold, at the corpus's mean document, a third of ``memory_mb`` of
    text (``HELD_COPIES``: the sort holds up to three copies) and at most ``BUCKET_BYTES``."""
    limit = min(memory_mb * 2**20 // HELD_COPIES, BUCKET_BYTES)
    return max(1, int(limit / max(text_bytes / max(n_docs, 1), 1)))


def scatter(order: np.ndarray, row_groups: Iterator[tuple[int, pa.Table]], n_docs: int, rows: int,
            scratch: Path) -> int:
    """Write every planned copy to its bucket file ``scratch/bucket-NNNNNN.arrow``; returns the bucket count.

    ``row_groups`` yields ``(first document index, table of id and text)`` in corpus order.
    """
    counts = np.bincount(order, minlength=n_docs)
    by_doc = np.argsort(order, kind="stable")  # every document's positions, increasing, documents in order
    starts = np.concatenate([[0], np.cumsum(counts)])
    n_buckets = -(-order.shape[0] // rows)
    writers: dict[int, pa.ipc.RecordBatchFileWriter] = {}
    try:
        for first, table in row_groups:
            last = first + table.num_rows
            positions = by_doc[starts[first]:starts[last]]
            if not positions.size:
                continue
            local = pa.array(np.repeat(np.arange(table.num_rows), counts[first:last]))
            bucket = positions // rows
            grouped = np.argsort(bucket, kind="stable")
            rows_out = pa.table({"position": positions, "id": table.column("id").take(local),
                                 "text": table.column("text").take(local)}, schema=SCHEMA).take(pa.array(grouped))
            cuts = np.flatnonzero(np.diff(bucket[grouped], prepend=-1, append=n_buckets))
            for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
                k = int(bucket[grouped[a]])
                if k not in writers:
                    writers[k] = pa.ipc.new_file(str(scratch / f"bucket-{k:06d}.arrow"), SCHEMA)
                writers[k].write_table(rows_out.slice(a, b - a))
    finally:
        for w in writers.values():
            w.close()
        pa.default_memory_pool().release_unused()
    return n_buckets


def gather(order: np.ndarray, labels: np.ndarray, rows: int, n_buckets: int, scratch: Path) -> Iterator[pa.Table]:
    """Each bucket in plan order (``text, id, index, cluster``), checked to hold exactly its positions; the
    scratch folder is removed at the end."""
    try:
        for k in range(n_buckets):
            lo, hi = k * rows, min((k + 1) * rows, order.shape[0])
            with pa.memory_map(str(scratch / f"bucket-{k:06d}.arrow")) as source:
                table = pa.ipc.open_file(source).read_all()
            positions = table.column("position").to_numpy()
            sort = np.argsort(positions, kind="stable")
            if not np.array_equal(positions[sort], np.arange(lo, hi)):
                raise ClusterClipError(f"export: bucket {k} holds {positions.size} rows, not plan positions "
                                       f"{lo}..{hi - 1} (the corpus parts and the plan disagree)")
            table = table.take(pa.array(sort)).combine_chunks()
            block = np.asarray(order[lo:hi], dtype=np.int64)
            yield pa.table({"text": table.column("text"), "id": table.column("id"), "index": pa.array(block),
                            "cluster": pa.array(np.asarray(labels[block], dtype=np.int64))})
            del table
            (scratch / f"bucket-{k:06d}.arrow").unlink()
            pa.default_memory_pool().release_unused()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
