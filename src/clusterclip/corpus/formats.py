"""The reader formats, one line each, and finding the format of an input.

A format is a class over :class:`~clusterclip.corpus.format_base.RowFormat` (located records) or
:class:`~clusterclip.corpus.format_base.ColumnFormat` (column batches) that carries its own name, the file
names or folders it reads, how it cuts an input into work units and how it reads one; adding one is its module
plus one line in :data:`FORMATS`.
"""

from __future__ import annotations

from pathlib import Path

from clusterclip.corpus.format_base import Folder, Format
from clusterclip.corpus.hf import HfDataset
from clusterclip.corpus.jsonl import Jsonl, JsonlGzip, JsonlZstd
from clusterclip.corpus.parquet import Parquet
from clusterclip.corpus.txt import Txt, TxtFolder

FORMATS: dict[str, type[Format]] = {cls.name: cls for cls in (
    Jsonl,
    JsonlGzip,
    JsonlZstd,
    Parquet,
    Txt,
    TxtFolder,
    HfDataset,
)}
"""Every reader format by name (the name work units and the corpus record's inputs carry), in the order an
input is tried against them and the error for an unknown input lists them."""


def file_format(path: Path) -> str | None:
    """The name of the first format that reads file ``path`` (by its name), or None; a name a format must
    refuse (a compressed file that is no JSON lines) raises."""
    return next((cls.name for cls in FORMATS.values() if not cls.FOLDER and cls.reads_file(path)), None)


def folder_format(folder: Folder) -> str | None:
    """The name of the first folder format that reads ``folder`` as one input, or None."""
    return next((cls.name for cls in FORMATS.values() if cls.FOLDER and cls.reads_folder(folder)), None)


def folder_problem(folder: Folder) -> str | None:
    """Why ``folder``, which no folder format reads, cannot be read as a folder of input files (a dataset
    folder missing its data), or None."""
    return next((why for cls in FORMATS.values() if (why := cls.folder_problem(folder))), None)


def expected_inputs() -> str:
    """What the error for an input no format reads lists: every format's ``EXPECTED``, in registry order."""
    named = [cls.EXPECTED for cls in FORMATS.values() if cls.EXPECTED]
    return named[0] if len(named) == 1 else f"{', '.join(named[:-1])} or {named[-1]}"
