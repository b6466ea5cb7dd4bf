"""The plain-text formats: each ``.txt`` file is one document, its id the path relative to the folder read (a
``.txt`` file given itself: its name). A folder of ``.txt`` files is one input, read in runs of files."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from clusterclip.corpus import limits
from clusterclip.corpus.format_base import Folder, RowFormat, WorkUnit, files_under
from clusterclip.corpus.hf import is_hf_dataset_dir
from clusterclip.corpus.records import Document, Located, ReadOptions, is_unicode, not_utf8, unreadable
from clusterclip.errors import BadRecordError
from clusterclip.store.paths import read_bytes


def txt_records(paths: Iterable[Path], root: Path) -> Iterator[Located]:
    """Each ``.txt`` file is one record, ``(id, bytes)``: its path relative to ``root`` and its content."""
    for p in paths:
        try:
            data = read_bytes(p)
        except OSError as exc:
            raise unreadable(p, exc) from None
        yield str(p), None, (str(p.relative_to(root)), data)


def txt_document(record: tuple[str, bytes], opts: ReadOptions, source: str, loc: int | None) -> Document:
    """A ``.txt`` file's document: its UTF-8 text, which may not be blank."""
    rel, data = record
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8(source, loc, exc) from None
    if not text.strip():
        raise BadRecordError(source, loc, "empty document")
    if not is_unicode(rel):
        raise BadRecordError(source, loc, "file name is not valid UTF-8 (it is the document id); rename the file")
    return rel, text, None


class Txt(RowFormat):
    """A ``.txt`` file: one document, its id the file name."""

    name = "txt"
    SUFFIXES = (".txt",)
    EXPECTED = ".txt"
    document = staticmethod(txt_document)

    @classmethod
    def records(cls, unit: WorkUnit, opts: ReadOptions) -> Iterator[Located]:
        return txt_records((unit.path,), unit.path.parent)


class TxtFolder(RowFormat):
    """A folder holding ``.txt`` files (at any depth), which is no dataset ``save_to_disk`` wrote (such a folder
    may hold a ``README.txt``): each ``.txt`` file one document, its id the path relative to the folder; read
    in runs of ``limits.TXT_FILES_PER_UNIT`` files."""

    name = "txtdir"
    FOLDER = True
    EXPECTED = "a folder of .txt files"
    document = staticmethod(txt_document)

    @classmethod
    def reads_folder(cls, folder: Folder) -> bool:
        return not is_hf_dataset_dir(folder.path) and any(p.suffix.lower() == ".txt" for p in folder.files)

    @classmethod
    def units(cls, path: Path, split: bool) -> list[WorkUnit]:
        per = limits.TXT_FILES_PER_UNIT
        files = [p for p in files_under(path) if p.name.endswith(".txt")]
        return [WorkUnit(path, cls.name, tuple(files[i:i + per])) for i in range(0, len(files), per)]

    @classmethod
    def records(cls, unit: WorkUnit, opts: ReadOptions) -> Iterator[Located]:
        return txt_records(unit.files, unit.path)
