"""The plain-text reader: each ``.txt`` file is one document, its id the path relative to the folder read."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from clusterclip.corpus.records import Document, Located, ReadOptions, is_unicode, not_utf8, unreadable
from clusterclip.errors import BadRecordError


def txt_records(paths: Iterable[Path], root: Path) -> Iterator[Located]:
    """Each ``.txt`` file is one record, ``(id, bytes)``: its path relative to ``root`` and its content."""
    for p in paths:
        try:
            data = p.read_bytes()
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
