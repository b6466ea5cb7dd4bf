"""Reading work units: each by its format (:data:`clusterclip.corpus.formats.FORMATS`), under the one bad-record
policy of :mod:`clusterclip.corpus.records`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from clusterclip.corpus.format_base import Format, WorkUnit
from clusterclip.corpus.formats import FORMATS
from clusterclip.corpus.inputs import work_units
from clusterclip.corpus.records import DocBatch, Located, ReadOptions, ReadStats, ToDocument
from clusterclip.errors import ClusterClipError


def read_unit(unit: WorkUnit, opts: ReadOptions, stats: ReadStats) -> Iterator[DocBatch]:
    """Documents of one work unit in order, in batches."""
    yield from _format(unit).read(unit, opts, stats)


def iter_documents(inputs: Sequence[tuple[Path, str]], opts: ReadOptions, stats: ReadStats) -> Iterator[DocBatch]:
    """Documents of all inputs in order, in batches."""
    for unit in work_units(inputs):
        yield from read_unit(unit, opts, stats)


def located_documents(unit: WorkUnit, opts: ReadOptions) -> Iterator[tuple[Located, ToDocument]]:
    """Every record of a work unit, one at a time (also of a column format), with the function that makes
    its document: for messages that name where a document came from."""
    yield from _format(unit).located(unit, opts)


def _format(unit: WorkUnit) -> type[Format]:
    cls = FORMATS.get(unit.fmt)
    if cls is None:
        raise ClusterClipError(f"{unit.path}: unsupported format {unit.fmt}")
    return cls
