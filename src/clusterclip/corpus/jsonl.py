"""The JSON-lines reader (plain, ``.gz``, ``.zst``): one JSON object per line, located by its line number.

Only how to read a file lives here: the located lines (of a whole file, or of the lines starting in a byte
range of a plain file) and the document of one line; :mod:`clusterclip.corpus.records` applies the rest.
"""

from __future__ import annotations

import io
import json
import os
import sys
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from clusterclip.corpus.compressed import open_binary
from clusterclip.corpus.records import (
    Document,
    Located,
    ReadOptions,
    is_unicode,
    not_utf8,
    record_document,
    unreadable,
)
from clusterclip.errors import BadRecordError


def jsonl_records(path: Path, fmt: str, byte_range: tuple[int, int] | None = None,
                  lines_before: int = 0) -> Iterator[Located]:
    """The non-blank lines of a JSON-lines file (plain, gzip or zstd), as bytes; line numbers start at 1.

    ``byte_range`` (plain files only) reads just the lines that start in ``[start, stop)``;
    ``lines_before`` is the number of newlines before ``start``, so line numbers stay file-global.
    A truncated or corrupt compressed stream raises, whatever the bad-record policy.
    """
    source = str(path)
    lineno = lines_before
    try:
        with open_binary(path, fmt) as fh:
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
    for what, name, value in (("id", opts.id_field, doc[0]), ("text", opts.text_field, doc[1]),
                              ("group", opts.group_field, doc[2])):
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
    with open(path, "rb") as fh:
        fh.seek(start)
        left = stop - start
        while left > 0:
            data = fh.read(min(chunk, left))
            if not data:
                break
            n += data.count(b"\n")
            left -= len(data)
    return n
