"""What every export writer shares: the :class:`Writer` interface, exclusive file creation and row helpers.

A batch is a ``pyarrow.Table`` of the planned stream (:mod:`clusterclip.export.stream`): columns ``text,
id, index, cluster`` (text), ``tokens, id, index, cluster`` (with a tokenizer) or ``tokens`` (packed). The
policy (plan order, repeats, windows, staging, record, refusal) lives above the writers; a writer sees
one staging folder, gets every batch in stream order and is closed once.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import IO, Any, ClassVar

import numpy as np
import pyarrow as pa

from clusterclip.errors import ClusterClipError, install_command
from clusterclip.store import atomic_write


def missing(fmt: str, package: str, exc: ImportError) -> ClusterClipError:
    """The error for a format whose library is not installed, naming what installs it (``package``: its pip
    name, whose first word is its import name)."""
    return ClusterClipError(f"--format {fmt} needs the {package} package ({exc}); "
                            f"{install_command(package.partition('-')[0])} (see docs/export.md)")


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


def plain_rows(batch: pa.Table) -> list[dict[str, Any]]:
    """Rows as dicts with tokens (and a loss mask) as arrays and a missing cluster as -1 (the binary formats have
    no null)."""
    cols = {name: batch.column(name) for name in batch.column_names}
    if "cluster" in cols:
        cols["cluster"] = cols["cluster"].fill_null(-1)
    out: list[dict[str, Any]] = [{} for _ in range(batch.num_rows)]
    for name, col in cols.items():
        values = token_rows(col) if name in ("tokens", "loss_mask") else col.to_pylist()
        for row, v in zip(out, values, strict=True):
            row[name] = v
    return out


def add_json_key(path: Path, key: str, value: Any) -> None:
    """Add ``key`` to the JSON object in ``path`` (a library's index), rewritten atomically."""
    with open(path, encoding="utf-8") as fh:
        found = json.load(fh)
    found[key] = value
    with atomic_write(path, "w") as fh:
        json.dump(found, fh)


class Writer(ABC):
    """Writes the batches of one export into ``folder``; ``close`` finishes the library's files.

    A subclass is a format of the registry (:data:`clusterclip.export.writers.registry.WRITERS`) and says what
    the export needs to know of it: its ``name`` (``--format``), a one-line ``SUMMARY`` for the help, whether it
    holds token ids only (``TOKENS_ONLY``: a tokenizer is required) and only the stream's first column
    (``FIRST_COLUMN_ONLY``: no id, index or cluster), whether ``--blend`` can write its sources
    (``BLEND_SOURCES``), how it keeps records (``RECORDS``, ``--keep-record``: ``json``, it gets each record's
    JSON in a ``record`` column; ``typed``, its fields as typed columns; None: it does not), and whether it writes
    its rows twice (``WRITES_TWICE``: the free space the export checks for is doubled), and where it writes the
    export's identity (``METADATA``: a JSON file of the folder, or each shard's schema; None: nowhere), which the
    export's reader (``clusterclip.contract.export.FORMAT_METADATA``) checks.
    """

    name: ClassVar[str]
    SUMMARY: ClassVar[str] = ""
    TOKENS_ONLY: ClassVar[bool] = False
    FIRST_COLUMN_ONLY: ClassVar[bool] = False
    BLEND_SOURCES: ClassVar[bool] = False
    RECORDS: ClassVar[str | None] = None
    WRITES_TWICE: ClassVar[bool] = False
    METADATA: ClassVar[str | None] = None

    def __init__(self, folder: Path, token_dtype: np.dtype, meta: dict[str, Any] | None = None) -> None:
        self.folder = folder
        self.token_dtype = token_dtype
        self.meta = meta or {}
        """The export's identity, for formats whose files carry metadata (:mod:`clusterclip.export.manifest`)."""
        self.batches = 0

    @abstractmethod
    def write(self, batch: pa.Table) -> None:
        """Append ``batch`` (the next rows of the stream) and count it in ``batches``."""

    @abstractmethod
    def close(self) -> None:
        """Finish the library's files (an index, a merge) after the last batch."""


class ShardWriter(Writer):
    """One file per batch (a shard), complete when written: nothing to finish."""

    def close(self) -> None:
        """Every shard is complete already."""
