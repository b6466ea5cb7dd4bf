"""The Parquet format: the text, id and group columns of a file in batches, located by row number.

Also how a large file splits into runs of row groups that workers read on their own.
"""

from __future__ import annotations

import os
from collections.abc import Container, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from clusterclip.corpus import limits
from clusterclip.corpus.format_base import ColumnFormat, WorkUnit
from clusterclip.corpus.records import ColumnBatch, ReadOptions, unreadable
from clusterclip.errors import BadRecordError
from clusterclip.settings import option
from clusterclip.store.paths import source


def open_parquet(path: str | os.PathLike[str]) -> pq.ParquetFile:
    """Open a Parquet file for streaming. Pre-buffering is off: pyarrow's default pre-buffers every
    requested column chunk of the file, so iterating a file would hold all of it in memory."""
    return pq.ParquetFile(source(path), pre_buffer=False)


def parquet_batches(path: Path, opts: ReadOptions, row_groups: tuple[int, int] | None = None) -> Iterator[ColumnBatch]:
    """The text, id and group columns of a Parquet file (or of its row groups ``[first, stop)``) in record
    batches, each with the number of rows before it in the file."""
    pf, columns = _open_parquet_input(path, opts)
    first, stop = row_groups if row_groups is not None else (0, pf.num_row_groups)
    row = sum(pf.metadata.row_group(g).num_rows for g in range(first))
    try:
        for rb in pf.iter_batches(batch_size=limits.BATCH_ROWS, row_groups=list(range(first, stop)),
                                  columns=columns):
            yield str(path), row, rb.to_pydict()
            row += rb.num_rows
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise BadRecordError(str(path), row + 1, f"corrupt Parquet data ({exc})") from None


def _open_parquet_input(path: Path, opts: ReadOptions) -> tuple[pq.ParquetFile, list[str]]:
    """The open file and the columns to read; a file that is not Parquet or lacks a needed string column
    raises, whatever the bad-record policy."""
    source = str(path)
    try:
        pf = open_parquet(path)
        names = pf.schema_arrow.names
    except OSError as exc:
        if exc.errno is not None:
            raise unreadable(path, exc) from None
        raise BadRecordError(source, None, f"not a readable Parquet file ({exc})") from None
    except (pa.ArrowException, UnicodeDecodeError) as exc:
        raise BadRecordError(source, None, f"not a readable Parquet file ({exc})") from None
    if opts.id_field is not None and opts.id_field not in names:
        raise BadRecordError(source, None, f"no id column {opts.id_field!r} (columns: {', '.join(names)})")
    if opts.read_all_columns(names):  # records of a conversation kind: each row's record is kept whole
        return pf, list(names)
    if opts.text_field not in names:
        raise BadRecordError(source, None, f"no column {opts.text_field!r} (columns: {', '.join(names)}); "
                             f"choose another with {option(type(opts), 'text_field')}")
    text_type = pf.schema_arrow.field(opts.text_field).type
    if not (pa.types.is_string(text_type) or pa.types.is_large_string(text_type)):
        raise BadRecordError(source, None, f"column {opts.text_field!r} has type {text_type}, expected string")
    columns = [c for c in opts.read_columns() if c in names]
    return pf, list(dict.fromkeys(columns))


def row_group_runs(path: Path, rows_per_run: int) -> list[tuple[int, int] | None]:
    """Consecutive row-group ranges of about ``rows_per_run`` rows each (``[None]``: read the file whole,
    also when its footer cannot be read, for the reader to report)."""
    try:
        md = pq.read_metadata(source(path))
    except (pa.ArrowException, OSError, UnicodeDecodeError):
        return [None]
    if md.num_rows <= rows_per_run or md.num_row_groups < 2:
        return [None]
    runs: list[tuple[int, int] | None] = []
    first, rows = 0, 0
    for g in range(md.num_row_groups):
        rows += md.row_group(g).num_rows
        if rows >= rows_per_run:
            runs.append((first, g + 1))
            first, rows = g + 1, 0
    if first < md.num_row_groups:
        runs.append((first, md.num_row_groups))
    return runs


class Parquet(ColumnFormat):
    """Parquet files; with ``split``, a file of more than ``limits.PARQUET_ROWS_PER_UNIT`` rows is one unit per
    run of row groups holding about that many (its footer read here; a file whose footer cannot be read stays
    whole, for the reader to report). A null is an absent field only in the text column."""

    name = "parquet"
    SUFFIXES = (".parquet",)
    EXPECTED = ".parquet"

    @classmethod
    def units(cls, path: Path, split: bool) -> list[WorkUnit]:
        if not split:
            return [WorkUnit(path, cls.name)]
        return [WorkUnit(path, cls.name, row_groups=r) for r in row_group_runs(path, limits.PARQUET_ROWS_PER_UNIT)]

    @classmethod
    def batches(cls, unit: WorkUnit, opts: ReadOptions) -> Iterator[ColumnBatch]:
        return parquet_batches(unit.path, opts, unit.row_groups)

    @classmethod
    def null_absent(cls, opts: ReadOptions) -> Container[str] | None:
        return (opts.text_field,)
