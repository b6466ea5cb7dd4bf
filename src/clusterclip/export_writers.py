"""One writer per export format: each only writes batches of records into a folder, with its own library.

A batch is a ``pyarrow.Table`` of the planned stream (see :mod:`clusterclip.export`): columns ``text, id,
index, cluster`` (text), ``tokens, id, index, cluster`` (with a tokenizer) or ``tokens`` (packed). The
policy (plan order, repeats, windows, staging, manifest, refusal) lives in :mod:`clusterclip.export`;
a writer sees one staging folder, gets every batch in stream order and is closed once. The trainer
formats use their library's own writer, so the library's own reader is the check:
``litdata`` (``BinaryWriter``, read by ``litdata.StreamingDataset``), ``megatron``
(``IndexedDatasetBuilder``, read by ``IndexedDataset``), ``hf`` (``datasets.Dataset.save_to_disk``).
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from clusterclip.errors import ClusterClipError
from clusterclip.store import file_digest
from clusterclip.store import layout as A


def _missing(fmt: str, package: str, exc: ImportError) -> ClusterClipError:
    return ClusterClipError(f"--format {fmt} needs the {package} package ({exc}); install clusterclip[export] "
                            "(see docs/export.md)")


def create(path: Path, mode: str = "wb") -> IO[Any]:
    """Open a new file for writing, refusing one that exists or a symbolic link (``O_EXCL | O_NOFOLLOW``):
    a writer never writes through a link planted in its folder."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
    return os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"}))


def token_rows(column: pa.ChunkedArray | pa.Array) -> list[np.ndarray]:
    """The token ids of each row of a ``list<int>`` column as NumPy arrays (views of one buffer)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    offsets = arr.offsets.to_numpy()
    values = arr.values.to_numpy(zero_copy_only=False)
    return [values[offsets[i]:offsets[i + 1]] for i in range(len(arr))]


def _plain_rows(batch: pa.Table) -> list[dict[str, Any]]:
    """Rows as dicts with tokens as arrays and a missing cluster as -1 (the binary formats have no null)."""
    cols = {name: batch.column(name) for name in batch.column_names}
    if "cluster" in cols:
        cols["cluster"] = cols["cluster"].fill_null(-1)
    out: list[dict[str, Any]] = [{} for _ in range(batch.num_rows)]
    for name, col in cols.items():
        values = token_rows(col) if name == "tokens" else col.to_pylist()
        for row, v in zip(out, values, strict=True):
            row[name] = v
    return out


class Writer(ABC):
    """Writes the batches of one export into ``folder``; ``close`` finishes the library's files."""

    def __init__(self, folder: Path, token_dtype: np.dtype) -> None:
        self.folder = folder
        self.token_dtype = token_dtype
        self.batches = 0

    @abstractmethod
    def write(self, batch: pa.Table) -> None:
        """Append ``batch`` (the next rows of the stream) and count it in ``batches``."""

    @abstractmethod
    def close(self) -> None:
        """Finish the library's files (an index, a merge) after the last batch."""


class _ShardWriter(Writer):
    """One file per batch (a shard), complete when written: nothing to finish."""

    def close(self) -> None:
        """Every shard is complete already."""


class JsonlWriter(_ShardWriter):
    """``part-00000.jsonl``: one JSON object per row, one file per batch (a shard)."""

    def write(self, batch: pa.Table) -> None:
        with create(self.folder / A.export_shard(self.batches, "jsonl"), "w") as fh:
            for rec in batch.to_pylist():
                fh.write(json.dumps(rec, ensure_ascii=False))
                fh.write("\n")
        self.batches += 1


class ParquetWriter(_ShardWriter):
    """``part-00000.parquet``: one file per batch (a shard)."""

    def write(self, batch: pa.Table) -> None:
        with create(self.folder / A.export_shard(self.batches, "parquet")) as fh:
            pq.write_table(batch, fh)
        self.batches += 1


class HfWriter(Writer):
    """A ``datasets.Dataset`` saved with ``save_to_disk``: batches go to one Arrow stream file (memory-mapped
    by ``Dataset.from_file``, so memory stays bounded), which ``save_to_disk`` then shards."""

    def __init__(self, folder: Path, token_dtype: np.dtype) -> None:
        super().__init__(folder, token_dtype)
        try:
            import datasets  # noqa: F401
        except ImportError as exc:
            raise _missing("hf", "datasets", exc) from exc
        self.stream = folder.parent / (folder.name + ".arrow")
        self.file: Any = None
        self.sink: Any = None

    def write(self, batch: pa.Table) -> None:
        if self.sink is None:
            self.file = create(self.stream)
            self.sink = pa.ipc.new_stream(self.file, batch.schema)
        self.sink.write_table(batch)
        self.batches += 1

    def close(self) -> None:
        import datasets

        if self.sink is None:
            raise ClusterClipError("the plan is empty: nothing to export")
        self.sink.close()
        self.file.close()
        ds = datasets.Dataset.from_file(str(self.stream))
        # The fingerprint names the content (the stream's bytes are determined by the export's identity),
        # so a re-run writes identical state.json instead of a random one.
        ds._fingerprint = file_digest(self.stream)[:16]
        ds.save_to_disk(str(self.folder))
        del ds
        self.stream.unlink()


class LitdataWriter(Writer):
    """litdata chunks (``chunk-0-0.bin`` ...) and ``index.json``, written by ``litdata``'s ``BinaryWriter``."""

    def __init__(self, folder: Path, token_dtype: np.dtype) -> None:
        super().__init__(folder, token_dtype)
        try:
            from litdata.streaming.writer import BinaryWriter
        except ImportError as exc:
            raise _missing("litdata", "litdata", exc) from exc
        self.writer = BinaryWriter(str(folder), chunk_bytes="64MB")
        self.items = 0

    def write(self, batch: pa.Table) -> None:
        for row in _plain_rows(batch):
            self.writer.add_item(self.items, row)
            self.items += 1
        self.batches += 1

    def close(self) -> None:
        self.writer.done()
        self.writer.merge()


class MegatronWriter(Writer):
    """``data.bin`` / ``data.idx`` by megatron-core's ``IndexedDatasetBuilder``: one document per row (a planned
    document, or a packed sample with ``--seq-len``), in stream order. Token ids only."""

    PREFIX = "data"

    def __init__(self, folder: Path, token_dtype: np.dtype) -> None:
        super().__init__(folder, token_dtype)
        try:
            from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
        except ImportError as exc:
            raise _missing("megatron", "megatron-core", exc) from exc
        self.builder = IndexedDatasetBuilder(str(folder / f"{self.PREFIX}.bin"), dtype=token_dtype.type)

    def write(self, batch: pa.Table) -> None:
        import torch

        for ids in token_rows(batch.column("tokens")):
            self.builder.add_document(torch.from_numpy(np.array(ids)), [int(ids.size)])
        self.batches += 1

    def close(self) -> None:
        self.builder.finalize(str(self.folder / f"{self.PREFIX}.idx"))


WRITERS: dict[str, type[Writer]] = {"jsonl": JsonlWriter, "parquet": ParquetWriter, "hf": HfWriter,
                                    "litdata": LitdataWriter, "megatron": MegatronWriter}
"""Export formats and their writers (``--format``)."""
