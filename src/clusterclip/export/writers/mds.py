"""``--format mds``: MosaicML Streaming's MDS shards and ``index.json`` (read by ``streaming.StreamingDataset``).

Written with NumPy and ``json`` so that the main environment needs no ``mosaicml-streaming`` (its releases cap
numpy and transformers below the project's, and importing it imports torchvision); its own reader checks the
files in a separate environment (``make mds-check``, docs/export.md). The layout, as streaming 0.13.0 writes
it with ``MDSWriter(columns=..., out=DIR)`` and its defaults (no compression, no hashes, 64 MiB shards):

* ``shard.00000.mds`` ...: ``uint32`` sample count ``n``; ``n + 1`` ``uint32`` offsets of the samples from the
  start of the file (the last is the file's size); the shard's config as JSON (sorted keys); the samples.
* a sample: for each column (sorted by name) whose encoding has no fixed size a ``uint32`` byte length, then
  the columns' bytes in that order. ``str``: UTF-8; ``int``: little-endian ``int64``; ``ndarray:DTYPE``: a
  byte ``ndim << 2 | k`` (the shape's dtype is ``uint8``/``16``/``32``/``64`` for ``k`` = 0..3), the shape,
  then the values.
* ``index.json``: ``{"shards": [...], "version": 2}`` with one entry per shard (its config, ``samples``,
  ``raw_data`` with basename and bytes, ``zip_data`` null).

A shard takes samples until the next would take it past the size limit (counting 4 bytes per sample beside
its own and the header), streaming's rule, so the files are byte for byte what ``MDSWriter`` writes for the
same rows (tested where streaming is installed).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from clusterclip.contract.export import META_KEY
from clusterclip.errors import ClusterClipError
from clusterclip.export.writers.base import Writer, create, token_rows

SIZE_LIMIT = 1 << 26
"""Bytes per shard: streaming's default ``size_limit`` (64 MiB)."""
SHAPE_DTYPES = (np.uint8, np.uint16, np.uint32, np.uint64)
"""The dtype of an ``ndarray`` sample's shape, by the low two bits of its first byte."""


def encodings(batch: pa.Table, token_dtype: np.dtype) -> dict[str, str]:
    """The MDS encoding of each exported column: text and id ``str``, index and cluster ``int``, tokens
    ``ndarray`` of the export's token dtype."""
    known = {"text": "str", "id": "str", "index": "int", "cluster": "int", "tier": "int",
             "tokens": f"ndarray:{token_dtype.name}", "loss_mask": "ndarray:uint8"}
    unknown = [name for name in batch.column_names if name not in known]
    if unknown:
        raise ClusterClipError(f"--format mds: no MDS encoding for column(s) {unknown}")
    return {name: known[name] for name in batch.column_names}


def encode_array(ids: np.ndarray, dtype: np.dtype) -> bytes:
    """An ``ndarray:DTYPE`` value (static dtype, dynamic shape): ``ndim << 2 | k``, the shape, the values.

    ``MDSWriter`` refuses an empty array; a document without tokens (empty text, no ``--append-eos``) is
    written with shape ``(0,)``, which streaming's reader decodes as an empty array."""
    shape = np.array(ids.shape, np.int64)
    k = next(i for i, t in enumerate(SHAPE_DTYPES) if int(shape.max()) <= np.iinfo(t).max)
    return bytes([(ids.ndim << 2) | k]) + shape.astype(SHAPE_DTYPES[k]).tobytes() + \
        np.ascontiguousarray(ids, dtype=dtype).tobytes()


class MdsWriter(Writer):
    """``shard.00000.mds`` ... and ``index.json`` in MosaicML Streaming's MDS format, written directly."""

    name = "mds"
    METADATA = "index.json"
    SUMMARY = "MosaicML Streaming"

    def __init__(self, folder: Path, token_dtype: np.dtype, meta: dict[str, Any] | None = None,
                 size_limit: int | None = None) -> None:
        super().__init__(folder, token_dtype, meta)
        self.size_limit = size_limit if size_limit is not None else SIZE_LIMIT
        self.names: list[str] = []
        self.settings: dict[str, Any] = {}
        self.config = b""
        self.shards: list[dict[str, Any]] = []
        self.samples: list[bytes] = []
        self.size = 0

    def _start(self, batch: pa.Table) -> None:
        columns = encodings(batch, self.token_dtype)
        self.names = sorted(columns)
        self.settings = {"version": 2, "format": "mds", "compression": None, "hashes": [],
                         "size_limit": self.size_limit, "column_names": self.names,
                         "column_encodings": [columns[n] for n in self.names],
                         "column_sizes": [8 if columns[n] == "int" else None for n in self.names]}
        self.config = json.dumps(self.settings, sort_keys=True).encode("utf-8")
        self.size = 8 + len(self.config)

    def _columns(self, batch: pa.Table) -> list[list[bytes]]:
        """Each column's encoded values, in the sorted column order."""
        out = []
        for name in self.names:
            col = batch.column(name)
            if name in ("tokens", "loss_mask"):
                dtype = self.token_dtype if name == "tokens" else np.dtype(np.uint8)
                out.append([encode_array(ids, dtype) for ids in token_rows(col)])
            elif name in ("index", "cluster", "tier"):
                values = np.asarray(col.fill_null(-1).to_numpy(zero_copy_only=False), dtype="<i8")
                out.append([v.tobytes() for v in values])
            elif col.null_count:
                raise ClusterClipError(f"--format mds: the {name} column has nulls, which MDS's str cannot hold")
            else:
                out.append([v.encode("utf-8") for v in col.to_pylist()])
        return out

    def write(self, batch: pa.Table) -> None:
        if not self.names:
            self._start(batch)
        variable = [i for i, n in enumerate(self.names) if self.settings["column_sizes"][i] is None]
        for values in zip(*self._columns(batch), strict=True):
            head = np.array([len(values[i]) for i in variable], "<u4").tobytes()
            sample = head + b"".join(values)
            if self.samples and self.size + len(sample) + 4 > self.size_limit:
                self._flush()
            self.samples.append(sample)
            self.size += len(sample) + 4
        self.batches += 1

    def _flush(self) -> None:
        n = len(self.samples)
        sizes = np.fromiter(map(len, self.samples), np.int64, n)
        offsets = np.concatenate([[0], np.cumsum(sizes)]) + 4 + 4 * (n + 1) + len(self.config)
        if offsets[-1] >= 1 << 32:
            raise ClusterClipError(f"--format mds: a shard of {int(offsets[-1])} bytes does not fit MDS's 32-bit "
                                   "offsets (a document over 4 GiB)")
        basename = f"shard.{len(self.shards):05d}.mds"
        with create(self.folder / basename) as fh:
            fh.write(np.array(n, "<u4").tobytes())
            fh.write(offsets.astype("<u4").tobytes())
            fh.write(self.config)
            for sample in self.samples:
                fh.write(sample)
        self.shards.append({**self.settings, "samples": n, "zip_data": None,
                            "raw_data": {"basename": basename, "bytes": int(offsets[-1]), "hashes": {}}})
        self.samples = []
        self.size = 8 + len(self.config)

    def close(self) -> None:
        if self.samples:
            self._flush()
        if not self.shards:
            raise ClusterClipError("the plan is empty: nothing to export")
        with create(self.folder / self.METADATA, "w") as fh:
            index: dict[str, Any] = {"shards": self.shards, "version": 2}
            if self.meta:
                index[META_KEY] = self.meta  # streaming reads "shards" and "version" only
            fh.write(json.dumps(index, sort_keys=True))
