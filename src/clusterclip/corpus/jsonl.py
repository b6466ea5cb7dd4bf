"""The JSON-lines formats (plain, ``.gz``, ``.zst``): one JSON object per line, located by its line number.

Only how to read a file lives here: the located lines (of a whole file, or of the lines starting in a byte
range of a plain file) and the document of one line; :mod:`clusterclip.corpus.records` applies the rest. A
plain file splits into byte ranges that workers read on their own; a compressed one is read whole.
"""

from __future__ import annotations

import io
import json
import os
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import ClassVar

from clusterclip.corpus import limits
from clusterclip.corpus.compressed import open_gzip, open_plain, open_zstd
from clusterclip.corpus.format_base import RowFormat, WorkUnit
from clusterclip.corpus.records import (
    Document,
    Located,
    ReadOptions,
    is_unicode,
    not_utf8,
    record_document,
    unreadable,
)
from clusterclip.errors import BadRecordError, ClusterClipError
from clusterclip.store.paths import open_bytes, size_time

JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")


def jsonl_records(path: Path, fmt: str, opener: Callable[[Path], io.BufferedIOBase] = open_plain,
                  byte_range: tuple[int, int] | None = None, lines_before: int = 0) -> Iterator[Located]:
    """The non-blank lines of a JSON-lines file of format ``fmt``, opened by its format's ``opener`` (plain, gzip or
    zstd), as bytes; line numbers start at 1.

    ``byte_range`` (plain files only) reads just the lines that start in ``[start, stop)``;
    ``lines_before`` is the number of newlines before ``start``, so line numbers stay file-global.
    A truncated or corrupt compressed stream raises, whatever the bad-record policy.
    """
    source = str(path)
    lineno = lines_before
    try:
        with opener(path) as fh:
            lines: Iterable[bytes] = fh
            if byte_range is not None:
                lines_before, lines = _lines_in_range(fh, *byte_range, lines_before)
                lineno = lines_before
            for lineno, raw in enumerate(lines, lines_before + 1):
                if raw.strip():
                    yield source, lineno, raw
    except OSError as exc:
        if exc.errno is not None:
            raise unreadable(path, exc) from None
        raise _corrupt_stream(source, lineno + 1, fmt, exc) from None
    except (EOFError, zlib.error) as exc:
        raise _corrupt_stream(source, lineno + 1, fmt, exc) from None
    except Exception as exc:
        if type(exc).__module__.startswith("zstandard"):
            raise BadRecordError(source, lineno + 1, f"truncated or corrupt zstd stream ({exc})") from None
        raise


def _corrupt_stream(source: str, loc: int, fmt: str, exc: Exception) -> BadRecordError:
    return BadRecordError(source, loc, f"truncated or corrupt {fmt.split('+')[-1]} stream "
                          f"({exc.__class__.__name__}: {exc})")


def json_document(line: bytes, opts: ReadOptions, source: str, loc: int | None) -> Document:
    """The document of one JSON line: a UTF-8 JSON object whose fields :func:`record_document` reads."""
    try:
        record = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise not_utf8(source, loc, exc) from None
    except json.JSONDecodeError as exc:
        what = exc.msg.removesuffix(" at")
        raise BadRecordError(source, loc, f"invalid JSON ({what} at column {exc.colno})") from None
    except RecursionError:
        raise BadRecordError(source, loc, "invalid JSON (nested too deeply to parse)") from None
    except ValueError:
        raise BadRecordError(source, loc, f"invalid JSON (an integer longer than {sys.get_int_max_str_digits()} "
                             "digits; write it as a string)") from None
    if not isinstance(record, dict):
        raise BadRecordError(source, loc, f"expected a JSON object, got {type(record).__name__}")
    doc = record_document(record, opts, source, loc)
    if b"\\ud" in line or b"\\uD" in line:
        _check_surrogates(doc, opts, source, loc)
    return doc


def _check_surrogates(doc: Document, opts: ReadOptions, source: str, loc: int | None) -> None:
    """Refuse a document whose id, text or group holds a lone surrogate: only a JSON ``\\udXXX`` escape
    makes one (decoded UTF-8 cannot), and no UTF-8 column can store it."""
    kept = zip(opts.field_names, doc[3] if len(doc) > 3 else (), strict=False)
    for what, name, value in (("id", opts.id_field, doc[0]), ("text", opts.text_field, doc[1]),
                              ("group", opts.group_field, doc[2]), *(("kept", n, v) for n, v in kept)):
        if value is not None and not is_unicode(value):
            raise BadRecordError(source, loc, f"{what} field {name!r} holds a lone surrogate "
                                 f"(a \\ud800-\\udfff escape without its pair), which is not valid Unicode")


def _lines_in_range(fh: io.BufferedIOBase, start: int, stop: int, lines_before: int) -> tuple[int, Iterator[bytes]]:
    """Position ``fh`` at the first line starting at or after ``start``; return the newlines before it
    and an iterator over the lines that start before ``stop``."""
    pos = start
    if start > 0:
        fh.seek(start - 1)
        if fh.read(1) != b"\n":
            pos += len(fh.readline())
            lines_before += 1

    def lines() -> Iterator[bytes]:
        nonlocal pos
        while pos < stop:
            raw = fh.readline()
            if not raw:
                return
            pos += len(raw)
            yield raw

    return lines_before, lines()


def count_newlines(path: str | os.PathLike[str], start: int, stop: int, chunk: int = 1 << 22) -> int:
    """Newline bytes in ``[start, stop)`` of a file (to number the lines of a byte range)."""
    n = 0
    with open_bytes(path) as fh:
        fh.seek(start)
        left = stop - start
        while left > 0:
            data = fh.read(min(chunk, left))
            if not data:
                break
            n += data.count(b"\n")
            left -= len(data)
    return n


class JsonLines(RowFormat):
    """What the JSON-lines formats share: their located lines and the document of one line."""

    document = staticmethod(json_document)
    open_bytes: ClassVar[Callable[[Path], io.BufferedIOBase]] = staticmethod(open_plain)
    """How a file of the format is opened for its bytes (decompressed)."""

    @classmethod
    def records(cls, unit: WorkUnit, opts: ReadOptions) -> Iterator[Located]:
        return jsonl_records(unit.path, unit.fmt, cls.open_bytes, unit.byte_range, unit.lines_before)


class Jsonl(JsonLines):
    """Plain JSON lines; with ``split``, a file of more than ``limits.JSONL_BYTES_PER_UNIT`` bytes is one unit per
    byte range of that size (whose ``lines_before`` :func:`clusterclip.corpus.inputs.number_lines` fills in)."""

    name = "jsonl"
    SUFFIXES = JSONL_SUFFIXES
    EXPECTED = ".jsonl[.gz|.zst]"

    @classmethod
    def units(cls, path: Path, split: bool) -> list[WorkUnit]:
        per = limits.JSONL_BYTES_PER_UNIT
        if split and (size := size_time(path)[0]) > per:
            return [WorkUnit(path, cls.name, byte_range=(a, min(a + per, size))) for a in range(0, size, per)]
        return [WorkUnit(path, cls.name)]


class CompressedJsonl(JsonLines):
    """JSON lines compressed with the codec of ``CODEC_SUFFIXES``, read whole (a stream cannot seek); a
    compressed file of anything but JSON lines is refused."""

    CODEC_SUFFIXES: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def reads_file(cls, path: Path) -> bool:
        name = path.name.lower()
        if name.endswith(cls.SUFFIXES):
            return True
        for suffix in cls.CODEC_SUFFIXES:
            if name.endswith(suffix):
                raise ClusterClipError(f"{path}: compressed input must be JSON lines (.jsonl{suffix})")
        return False


class JsonlGzip(CompressedJsonl):
    name = "jsonl+gzip"
    open_bytes = staticmethod(open_gzip)
    CODEC_SUFFIXES = (".gz",)
    SUFFIXES = tuple(s + ".gz" for s in JSONL_SUFFIXES)


class JsonlZstd(CompressedJsonl):
    name = "jsonl+zstd"
    open_bytes = staticmethod(open_zstd)
    CODEC_SUFFIXES = (".zst", ".zstd")
    SUFFIXES = tuple(s + c for c in CODEC_SUFFIXES for s in JSONL_SUFFIXES)
