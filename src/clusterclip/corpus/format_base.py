"""What every reader format shares: the :class:`Format` interface, its two kinds (:class:`RowFormat`,
:class:`ColumnFormat`), the :class:`WorkUnit` one worker reads and the listing of a folder.

A format is a class that carries its name, the file names or folders it reads, how it cuts an input into work
units and how it reads one; adding one is its module plus one line in
:data:`clusterclip.corpus.formats.FORMATS`. A format only reads: the bad-record policy, field extraction and
batching are :mod:`clusterclip.corpus.records`'.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Container, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

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
    unreadable,
)
from clusterclip.store.paths import files_below


def files_under(path: Path) -> list[Path]:
    """Every file below folder ``path`` (symbolic links to folders not followed), sorted; a folder that
    cannot be listed raises instead of being skipped, so no document goes missing without a word. A folder of a
    store is its prefix's objects."""
    remote = files_below(path)
    if remote is not None:
        return remote

    def fail(exc: OSError) -> None:
        raise unreadable(Path(exc.filename or path), exc)

    files = [Path(root, name) for root, _, names in os.walk(path, onerror=fail) for name in names]
    return sorted(p for p in files if p.is_file())


class Folder:
    """A folder given as an input: its ``path`` and, listed once when first asked, its visible ``files``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @functools.cached_property
    def files(self) -> list[Path]:
        """The files below the folder whose names do not start with a dot, sorted (:func:`files_under`)."""
        return [p for p in files_under(self.path) if not p.name.startswith(".")]


@dataclass(frozen=True)
class WorkUnit:
    """A piece of the input that one worker reads on its own: a file, a Hugging Face dataset, a run of
    up to ``limits.TXT_FILES_PER_UNIT`` files of a ``.txt`` folder (``files``, ids relative to ``path``), the
    row groups ``[first, stop)`` of a large Parquet file (``row_groups``), or the lines starting in a
    byte range of a large plain JSONL file (``byte_range``; ``lines_before``: newlines before it).
    ``fmt`` is the name of its format (:data:`clusterclip.corpus.formats.FORMATS`)."""

    path: Path
    fmt: str
    files: tuple[Path, ...] = ()
    row_groups: tuple[int, int] | None = None
    byte_range: tuple[int, int] | None = None
    lines_before: int = 0


class Format:
    """A reader format. Subclasses set ``name`` (what work units and the corpus record's inputs name it by),
    ``SUFFIXES`` (the file names it reads) or ``FOLDER`` with :meth:`reads_folder` (the folders it reads as
    one input), ``EXPECTED`` (how the error for an unknown input names it; empty: not named), and derive from
    :class:`RowFormat` or :class:`ColumnFormat`, which say how a unit is read.

    Formats are never instantiated: everything is a class attribute or a class method.
    """

    name: ClassVar[str]
    SUFFIXES: ClassVar[tuple[str, ...]] = ()
    """Endings of the file names this format reads, lower case (``.jsonl``); a name is matched lower-cased."""
    FOLDER: ClassVar[bool] = False
    """A folder format: it reads a whole folder as one input (:meth:`reads_folder` says which folders)."""
    EXPECTED: ClassVar[str] = ""
    """This format in the list of the error for an input no format reads (``.parquet``)."""

    @classmethod
    def reads_file(cls, path: Path) -> bool:
        """Whether this format reads file ``path``, by its name; a name it must refuse raises
        :class:`~clusterclip.errors.ClusterClipError`."""
        return path.name.lower().endswith(cls.SUFFIXES)

    @classmethod
    def reads_folder(cls, folder: Folder) -> bool:
        """Whether this (folder) format reads ``folder`` as one input."""
        return False

    @classmethod
    def folder_problem(cls, folder: Folder) -> str | None:
        """Why ``folder``, which no folder format reads, cannot be read as a folder of input files, when it
        looks like one of this format's (e.g. a dataset folder missing its data); None when it does not."""
        return None

    @classmethod
    def units(cls, path: Path, split: bool) -> list[WorkUnit]:
        """The work units of input ``path`` in document order; ``split`` asks for pieces that workers read on
        their own (the default: the whole input is one unit)."""
        return [WorkUnit(path, cls.name)]

    @classmethod
    def read(cls, unit: WorkUnit, opts: ReadOptions, stats: ReadStats) -> Iterator[DocBatch]:
        """The documents of ``unit`` in order, in batches, under the bad-record policy of ``opts``."""
        raise NotImplementedError

    @classmethod
    def located(cls, unit: WorkUnit, opts: ReadOptions) -> Iterator[tuple[Located, ToDocument]]:
        """Every record of ``unit``, one at a time, with the function that makes its document (for messages
        that name where a document came from)."""
        raise NotImplementedError


class RowFormat(Format):
    """A format of located records (JSON lines, ``.txt`` files): :meth:`records` yields ``(source, line or
    None, record)`` and ``document`` (a static method) makes the document of one record, raising
    :class:`~clusterclip.errors.BadRecordError` for a bad one."""

    document: ClassVar[ToDocument]

    @classmethod
    def records(cls, unit: WorkUnit, opts: ReadOptions) -> Iterator[Located]:
        """The located records of ``unit`` in order."""
        raise NotImplementedError

    @classmethod
    def read(cls, unit: WorkUnit, opts: ReadOptions, stats: ReadStats) -> Iterator[DocBatch]:
        return read_documents(cls.records(unit, opts), cls.document, opts, stats)

    @classmethod
    def located(cls, unit: WorkUnit, opts: ReadOptions) -> Iterator[tuple[Located, ToDocument]]:
        for record in cls.records(unit, opts):
            yield record, cls.document


class ColumnFormat(Format):
    """A format of column batches (Parquet, Hugging Face datasets): :meth:`batches` yields ``(source, rows
    before, columns)``; a null is an absent field in the columns :meth:`null_absent` names (None: in every
    column), elsewhere it stays None."""

    @classmethod
    def batches(cls, unit: WorkUnit, opts: ReadOptions) -> Iterator[ColumnBatch]:
        """The column batches of ``unit`` in order, each with the number of rows before it."""
        raise NotImplementedError

    @classmethod
    def null_absent(cls, opts: ReadOptions) -> Container[str] | None:
        """The columns whose nulls are absent fields (None: every column)."""
        return None

    @classmethod
    def read(cls, unit: WorkUnit, opts: ReadOptions, stats: ReadStats) -> Iterator[DocBatch]:
        return read_column_batches(cls.batches(unit, opts), opts, stats, cls.null_absent(opts))

    @classmethod
    def located(cls, unit: WorkUnit, opts: ReadOptions) -> Iterator[tuple[Located, ToDocument]]:
        null_absent = cls.null_absent(opts)
        for source, before, cols in cls.batches(unit, opts):
            for record in column_records(source, cols, before, null_absent):
                yield record, record_document
