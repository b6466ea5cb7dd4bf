"""Reading work units: each format's reader, under the one bad-record policy of
:mod:`clusterclip.corpus.records`."""

from __future__ import annotations

from collections.abc import Container, Iterator, Sequence
from pathlib import Path

from clusterclip.corpus.hf import hf_batches
from clusterclip.corpus.inputs import WorkUnit, work_units
from clusterclip.corpus.jsonl import json_document, jsonl_records
from clusterclip.corpus.parquet import parquet_batches
from clusterclip.corpus.records import (
    ColumnBatch,
    DocBatch,
    Located,
    ReadOptions,
    ReadStats,
    ToDocument,
    column_records,
    read_column_batches,
    read_documents,
    record_document,
)
from clusterclip.corpus.txt import txt_document, txt_records
from clusterclip.errors import ClusterClipError

COLUMN_FORMATS = ("parquet", "hf")


def read_unit(unit: WorkUnit, opts: ReadOptions, stats: ReadStats) -> Iterator[DocBatch]:
    """Documents of one work unit in order, in batches."""
    if unit.fmt in COLUMN_FORMATS:
        batches, null_absent = _column_source(unit, opts)
        yield from read_column_batches(batches, opts, stats, null_absent)
    else:
        records, to_document = _row_source(unit)
        yield from read_documents(records, to_document, opts, stats)


def iter_documents(inputs: Sequence[tuple[Path, str]], opts: ReadOptions, stats: ReadStats) -> Iterator[DocBatch]:
    """Documents of all inputs in order, in batches."""
    for unit in work_units(inputs):
        yield from read_unit(unit, opts, stats)


def located_documents(unit: WorkUnit, opts: ReadOptions) -> Iterator[tuple[Located, ToDocument]]:
    """Every record of a work unit, one at a time (also of a column format), with the function that makes
    its document: for messages that name where a document came from."""
    if unit.fmt in COLUMN_FORMATS:
        batches, null_absent = _column_source(unit, opts)
        for source, before, cols in batches:
            for record in column_records(source, cols, before, null_absent):
                yield record, record_document
    else:
        records, to_document = _row_source(unit)
        for record in records:
            yield record, to_document


def _column_source(unit: WorkUnit, opts: ReadOptions) -> tuple[Iterator[ColumnBatch], Container[str] | None]:
    """The column batches of a Parquet or Hugging Face unit, and the columns whose nulls are absent fields
    (Parquet: the text column; a dataset: every column)."""
    if unit.fmt == "parquet":
        return parquet_batches(unit.path, opts, unit.row_groups), (opts.text_field,)
    return hf_batches(unit.path, opts), None


def _row_source(unit: WorkUnit) -> tuple[Iterator[Located], ToDocument]:
    """The located records of a JSON-lines or ``.txt`` unit and the function that makes their documents."""
    if unit.fmt.startswith("jsonl"):
        return jsonl_records(unit.path, unit.fmt, unit.byte_range, unit.lines_before), json_document
    if unit.fmt in ("txt", "txtdir"):
        files, root = ((unit.path,), unit.path.parent) if unit.fmt == "txt" else (unit.files, unit.path)
        return txt_records(files, root), txt_document
    raise ClusterClipError(f"{unit.path}: unsupported format {unit.fmt}")
