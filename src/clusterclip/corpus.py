"""Corpus readers and the corpus stage.

Readers turn JSONL (plain, ``.gz``, ``.zst``), Parquet, folders of ``.txt`` files and Hugging Face
datasets saved with ``save_to_disk`` into batches of documents ``(id, text, group)``. The corpus stage
gives every document a stable index (its position in input order), counts its tokens and writes
``corpus/part-*.parquet`` plus ``tokens.npy`` into the run directory, so later stages never re-parse
user files. Bad records raise :class:`~clusterclip.errors.BadRecordError` naming file, line and problem,
or are skipped and counted with ``on_bad_record="skip"``.

With no inputs the embedded default corpus is used: the docstrings of the Python standard library
installed with the interpreter (real English text, available offline everywhere).
"""

from __future__ import annotations

import ast
import dataclasses
import errno
import fnmatch
import functools
import gzip
import hashlib
import io
import json
import logging
import os
import re
import shutil
import sys
import sysconfig
import zlib
from collections import Counter
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from clusterclip.engines import check_engine
from clusterclip.errors import BadRecordError, ClusterClipError, DiskFullError, disk_full_at
from clusterclip.progress import progress_bar
from clusterclip.settings import Settings, SettingsError, at_least, command_flags, is_text, optional, setting
from clusterclip.stages import Built, Stage, run_stage
from clusterclip.store import RUN, RunDir, StaleArtifactError, atomic_path, config_hash, save_npy
from clusterclip.store import layout as A

log = logging.getLogger(__name__)

DEFAULT_CORPUS = "stdlib-docstrings"
BATCH_ROWS = 2048
PART_ROWS = 50_000
TXT_FILES_PER_UNIT = 10_000
PARQUET_ROWS_PER_UNIT = 1_000_000
JSONL_BYTES_PER_UNIT = 256 << 20
ROW_GROUP_ROWS = 2048
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
COMPRESSED = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")

CORPUS_SCHEMA = pa.schema(
    [
        ("index", pa.int64()),
        ("id", pa.string()),
        ("text", pa.string()),
        ("n_tokens", pa.int64()),
        ("group", pa.string()),
    ]
)


@dataclass(frozen=True)
class ReadOptions(Settings):
    """How records are turned into documents; validated on construction."""

    text_field: str = setting("text", check=is_text, help="field or column holding the document text")
    id_field: str | None = setting(None, check=optional(is_text),
                                   help="field holding a unique document id (default: FILE:LINE of each record)")
    group_field: str | None = setting("domain", check=optional(is_text),
                                      help="optional ground-truth field kept for reports and experiments "
                                           "(never used to cluster)")
    on_bad_record: str = setting("error", choices=("error", "skip"),
                                 help="stop at the first bad record, or skip bad records and count them")
    split: str = setting("train", check=is_text, help="split to read from a Hugging Face DatasetDict")


@dataclass
class ReadStats:
    """Counts kept while reading; ``examples`` holds the first few skipped-record messages."""

    read: int = 0
    skipped: int = 0
    examples: list[str] = field(default_factory=list)

    max_examples: ClassVar[int] = 10

    def skip(self, err: BadRecordError) -> None:
        self.skipped += 1
        if len(self.examples) < self.max_examples:
            self.examples.append(str(err))

    def merge(self, later: ReadStats) -> None:
        """Add the counts of documents read after these (examples stay the first few in order)."""
        self.read += later.read
        self.skipped += later.skipped
        self.examples.extend(later.examples[: self.max_examples - len(self.examples)])


@dataclass
class DocBatch:
    """Documents as parallel columns: ids, texts and (optional) ground-truth groups."""

    ids: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    groups: list[str | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.texts)

    def add(self, doc_id: str, text: str, group: str | None) -> None:
        self.ids.append(doc_id)
        self.texts.append(text)
        self.groups.append(group)


# --------------------------------------------------------------------------------------------- inputs


HF_METADATA = ("state.json", "dataset_info.json")


def _is_hf_dataset_dir(path: Path) -> bool:
    """A folder ``save_to_disk`` wrote: a Dataset (``state.json``, ``dataset_info.json`` and ``.arrow``
    data) or a DatasetDict (``dataset_dict.json`` and a split folder that is such a Dataset)."""
    if (path / "dataset_dict.json").is_file():
        return any(_is_hf_dataset_dir(split) for split in _subdirs(path))
    return all((path / name).is_file() for name in HF_METADATA) and any(path.glob("*.arrow"))


def _has_hf_metadata(path: Path) -> bool:
    return (path / "dataset_dict.json").is_file() or all((path / name).is_file() for name in HF_METADATA)


def _subdirs(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if p.is_dir())
    except OSError as exc:
        raise _unreadable(path, exc) from None


def _unreadable(path: Path, exc: OSError) -> ClusterClipError:
    """The one-line error of an input that cannot be listed or read (permission denied, I/O error)."""
    return ClusterClipError(f"{path}: cannot read: {exc.strerror or exc}")


def files_under(path: Path) -> list[Path]:
    """Every file below folder ``path`` (symbolic links to folders not followed), sorted; a folder that
    cannot be listed raises instead of being skipped, so no document goes missing without a word."""
    def fail(exc: OSError) -> None:
        raise _unreadable(Path(exc.filename or path), exc)

    files = [Path(root, name) for root, _, names in os.walk(path, onerror=fail) for name in names]
    return sorted(p for p in files if p.is_file())


def _format_of(path: Path) -> str:
    name = path.name.lower()
    for suffix, codec in COMPRESSED.items():
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            if any(name.endswith(s) for s in JSONL_SUFFIXES):
                return f"jsonl+{codec}"
            raise ClusterClipError(f"{path}: compressed input must be JSON lines (.jsonl{suffix})")
    if any(name.endswith(s) for s in JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith(".txt"):
        return "txt"
    raise ClusterClipError(
        f"{path}: unknown input format; expected .jsonl[.gz|.zst], .parquet, .txt, a folder of .txt "
        "files or a Hugging Face dataset folder (save_to_disk)"
    )


def expand_inputs(inputs: Sequence[str | os.PathLike[str]]) -> list[tuple[Path, str]]:
    """Resolve user inputs into ``(path, format)`` pairs in a deterministic order.

    A folder is a Hugging Face dataset when it holds ``save_to_disk`` metadata; otherwise its ``.txt``
    files (recursively) are documents, or, lacking those, its JSONL/Parquet files are read.
    """
    out: list[tuple[Path, str]] = []
    for raw in inputs:
        path = Path(raw)
        if not path.exists():
            raise ClusterClipError(f"{path}: no such file or directory")
        if not _is_unicode(str(path)):
            raise ClusterClipError(f"{os.fsencode(path)!r}: path is not valid UTF-8; rename it")
        if path.is_dir() and _is_hf_dataset_dir(path):
            out.append((path, "hf"))
        elif path.is_dir():
            files = [p for p in files_under(path) if not p.name.startswith(".")]
            txt = [p for p in files if p.suffix.lower() == ".txt"]
            if txt:
                out.append((path, "txtdir"))
                continue
            if _has_hf_metadata(path):
                raise ClusterClipError(f"{path}: looks like a Hugging Face dataset folder (save_to_disk metadata) "
                                       "but holds no .arrow data files; save it again with save_to_disk")
            data = []
            for p in files:
                try:
                    data.append((p, _format_of(p)))
                except ClusterClipError:
                    continue
            if not data:
                raise ClusterClipError(f"{path}: folder holds no .txt, .jsonl or .parquet files")
            out.extend(data)
        else:
            out.append((path, _format_of(path)))
    return out


def inputs_fingerprint(inputs: Sequence[tuple[Path, str]]) -> list[dict[str, Any]]:
    """Path, size and modification time of every input file: what staleness checks compare."""
    entries = []
    for path, fmt in inputs:
        files = files_under(path) if path.is_dir() else [path]
        for p in files:
            st = p.stat()
            entries.append({"path": str(p.resolve()), "format": fmt, "size": st.st_size,
                            "mtime_ns": st.st_mtime_ns})
    return entries


# -------------------------------------------------------------------------------------------- readers

# A format only reads. A row format (JSON lines, .txt files) yields ``(source, location, record)``, the
# location being the 1-based line (None: the whole file is the record), and names the function that turns
# a record into a document; a column format (Parquet, Hugging Face datasets) yields ``(source, rows
# before, columns)`` batches. Field extraction, the bad-record policy and batching live once, below.

Document = tuple[str, str, str | None]
Located = tuple[str, int | None, Any]
ToDocument = Callable[[Any, ReadOptions, str, int | None], Document]
ColumnBatch = tuple[str, int, dict[str, list]]


def read_documents(records: Iterable[Located], to_document: ToDocument, opts: ReadOptions,
                   stats: ReadStats) -> Iterator[DocBatch]:
    """Documents of located records in batches of ``BATCH_ROWS``, under the bad-record policy: a record
    that ``to_document`` rejects stops the read (``on_bad_record="error"``) or is skipped and counted."""
    batch = DocBatch()
    for source, loc, record in records:
        try:
            batch.add(*to_document(record, opts, source, loc))
        except BadRecordError as err:
            if opts.on_bad_record == "error":
                raise
            stats.skip(err)
            continue
        stats.read += 1
        if len(batch.texts) >= BATCH_ROWS:
            yield batch
            batch = DocBatch()
    if batch:
        yield batch


def read_column_batches(batches: Iterable[ColumnBatch], opts: ReadOptions, stats: ReadStats,
                        null_absent: Container[str] | None = None) -> Iterator[DocBatch]:
    """Documents of located column batches (Parquet, Hugging Face datasets), one batch for each.

    A batch whose rows are all good is converted a column at a time (:func:`column_documents`); any other
    goes row by row through :func:`read_documents`, a null being an absent field (with ``null_absent``,
    only in those columns; elsewhere it stays ``None``).
    """
    for source, before, cols in batches:
        batch = column_documents(cols, opts, source, before)
        if batch is None:
            yield from read_documents(_column_records(source, cols, before, null_absent), record_document,
                                      opts, stats)
        elif batch:
            stats.read += len(batch)
            yield batch


def column_documents(cols: dict[str, list], opts: ReadOptions, source: str, before: int) -> DocBatch | None:
    """What :func:`record_document` makes of every row of a column batch (rows numbered from
    ``before + 1``), computed a column at a time; None when some row is bad."""
    texts = cols[opts.text_field]
    if not all(isinstance(t, str) and t.strip() for t in texts):
        return None
    if opts.id_field is None:
        ids = [_default_id(source, row) for row in range(before + 1, before + len(texts) + 1)]
    elif opts.id_field in cols and all(v is not None and not isinstance(v, (dict, list)) for v in cols[opts.id_field]):
        ids = [str(v) for v in cols[opts.id_field]]
    else:
        return None
    groups = cols.get(opts.group_field) if opts.group_field else None
    return DocBatch(ids, texts, [_group_value(v) for v in groups] if groups else [None] * len(texts))


def record_document(record: dict[str, Any], opts: ReadOptions, source: str, loc: int | None) -> Document:
    """``(id, text, group)`` of a record of named fields, as ``opts`` names them."""
    text = _text_of(record, opts, source, loc)
    return _id_of(record, opts, source, loc), text, _group_of(record, opts)


def _text_of(record: dict[str, Any], opts: ReadOptions, source: str, loc: int | None) -> str:
    if opts.text_field not in record:
        keys = ", ".join(sorted(map(str, record))[:8]) or "none"
        raise BadRecordError(source, loc, f"missing text field {opts.text_field!r} (fields: {keys}); "
                             "choose another with --text-field")
    text = record[opts.text_field]
    if not isinstance(text, str):
        raise BadRecordError(source, loc, f"text field {opts.text_field!r} is "
                             f"{type(text).__name__}, expected a string")
    if not text.strip():
        raise BadRecordError(source, loc, f"text field {opts.text_field!r} is empty")
    return text


def _id_of(record: dict[str, Any], opts: ReadOptions, source: str, loc: int | None) -> str:
    if opts.id_field is None:
        return _default_id(source, loc)
    value = record.get(opts.id_field)
    if value is None:
        raise BadRecordError(source, loc, f"missing id field {opts.id_field!r}")
    if isinstance(value, (dict, list)):
        raise BadRecordError(source, loc, f"id field {opts.id_field!r} must be a string or number")
    return str(value)


def _group_of(record: dict[str, Any], opts: ReadOptions) -> str | None:
    return None if opts.group_field is None else _group_value(record.get(opts.group_field))


def _group_value(value: Any) -> str | None:
    return None if value is None or isinstance(value, (dict, list)) else str(value)


def _is_unicode(text: str) -> bool:
    """False for a string holding a lone surrogate (from a JSON escape or an undecodable file name),
    which no UTF-8 column can store."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _default_id(source: str, loc: int | None) -> str:
    return f"{_file_name(source)}:{loc}"


@functools.lru_cache(maxsize=256)
def _file_name(source: str) -> str:
    return Path(source).name


def _not_utf8(source: str, loc: int | None, exc: UnicodeDecodeError) -> BadRecordError:
    return BadRecordError(source, loc, f"not valid UTF-8 (byte {exc.start})")


def _open_binary(path: Path, fmt: str) -> io.BufferedIOBase:
    if fmt.endswith("gzip"):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    if fmt.endswith("zstd"):
        return io.BufferedReader(_ZstdStream(path), buffer_size=1 << 20)
    return open(path, "rb")


class _ZstdStream(io.RawIOBase):
    """Decompress every zstd frame of a file and fail loudly on a truncated last frame.

    ``zstandard``'s stream reader ends silently at a truncated frame, which would drop documents
    without a word; here a frame that has not reached its end when the file does is an error.
    """

    def __init__(self, path: Path, chunk: int = 1 << 20) -> None:
        import zstandard

        self._zstd = zstandard
        self._fh = open(path, "rb")  # noqa: SIM115 - closed in close()
        self._chunk = chunk
        self._dobj = zstandard.ZstdDecompressor().decompressobj()
        self._pending = b""
        self._in_frame = False

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        while not self._pending:
            data = self._fh.read(self._chunk)
            if not data:
                if self._in_frame:
                    raise EOFError("zstd stream ends inside a frame")
                return 0
            while data:
                self._in_frame = True
                self._pending += self._dobj.decompress(data)
                if not self._dobj.eof:
                    break
                data = self._dobj.unused_data
                self._dobj = self._zstd.ZstdDecompressor().decompressobj()
                self._in_frame = False
        n = min(len(buf), len(self._pending))
        buf[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def close(self) -> None:
        self._fh.close()
        super().close()


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
        with _open_binary(path, fmt) as fh:
            lines: Iterable[bytes] = fh
            if byte_range is not None:
                lines_before, lines = _lines_in_range(fh, *byte_range, lines_before)
                lineno = lines_before
            for lineno, raw in enumerate(lines, lines_before + 1):
                if raw.strip():
                    yield source, lineno, raw
    except OSError as exc:
        if exc.errno is not None:
            raise _unreadable(path, exc) from None
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
        raise _not_utf8(source, loc, exc) from None
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
        if value is not None and not _is_unicode(value):
            raise BadRecordError(source, loc, f"{what} field {name!r} holds a lone surrogate "
                                 f"(a \\ud800-\\udfff escape without its pair), which is not valid Unicode")


def open_parquet(path: str | os.PathLike[str]) -> pq.ParquetFile:
    """Open a Parquet file for streaming. Pre-buffering is off: pyarrow's default pre-buffers every
    requested column chunk of the file, so iterating a file would hold all of it in memory."""
    return pq.ParquetFile(path, pre_buffer=False)


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


def parquet_batches(path: Path, opts: ReadOptions, row_groups: tuple[int, int] | None = None) -> Iterator[ColumnBatch]:
    """The text, id and group columns of a Parquet file (or of its row groups ``[first, stop)``) in record
    batches, each with the number of rows before it in the file."""
    pf, columns = _open_parquet_input(path, opts)
    first, stop = row_groups if row_groups is not None else (0, pf.num_row_groups)
    row = sum(pf.metadata.row_group(g).num_rows for g in range(first))
    try:
        for rb in pf.iter_batches(batch_size=BATCH_ROWS, row_groups=list(range(first, stop)), columns=columns):
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
            raise _unreadable(path, exc) from None
        raise BadRecordError(source, None, f"not a readable Parquet file ({exc})") from None
    except (pa.ArrowException, UnicodeDecodeError) as exc:
        raise BadRecordError(source, None, f"not a readable Parquet file ({exc})") from None
    if opts.text_field not in names:
        raise BadRecordError(source, None, f"no column {opts.text_field!r} (columns: {', '.join(names)}); "
                             "choose another with --text-field")
    if opts.id_field is not None and opts.id_field not in names:
        raise BadRecordError(source, None, f"no id column {opts.id_field!r} (columns: {', '.join(names)})")
    text_type = pf.schema_arrow.field(opts.text_field).type
    if not (pa.types.is_string(text_type) or pa.types.is_large_string(text_type)):
        raise BadRecordError(source, None, f"column {opts.text_field!r} has type {text_type}, expected string")
    columns = [c for c in (opts.text_field, opts.id_field, opts.group_field) if c and c in names]
    return pf, list(dict.fromkeys(columns))


def _column_records(source: str, cols: dict[str, list], before: int,
                    null_absent: Container[str] | None) -> Iterator[Located]:
    """The rows of a column batch as records numbered from ``before + 1``: a null in a ``null_absent``
    column (None: any) is an absent field, elsewhere it stays ``None``."""
    names = list(cols)
    for row, values in enumerate(zip(*cols.values(), strict=True), before + 1):
        yield source, row, {c: v for c, v in zip(names, values, strict=True)
                            if v is not None or (null_absent is not None and c not in null_absent)}


def txt_records(paths: Iterable[Path], root: Path) -> Iterator[Located]:
    """Each ``.txt`` file is one record, ``(id, bytes)``: its path relative to ``root`` and its content."""
    for p in paths:
        try:
            data = p.read_bytes()
        except OSError as exc:
            raise _unreadable(p, exc) from None
        yield str(p), None, (str(p.relative_to(root)), data)


def txt_document(record: tuple[str, bytes], opts: ReadOptions, source: str, loc: int | None) -> Document:
    """A ``.txt`` file's document: its UTF-8 text, which may not be blank."""
    rel, data = record
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _not_utf8(source, loc, exc) from None
    if not text.strip():
        raise BadRecordError(source, loc, "empty document")
    if not _is_unicode(rel):
        raise BadRecordError(source, loc, "file name is not valid UTF-8 (it is the document id); rename the file")
    return rel, text, None


def hf_batches(path: Path, opts: ReadOptions) -> Iterator[ColumnBatch]:
    """The text, id and group columns of a dataset written by ``datasets.Dataset.save_to_disk`` (a
    DatasetDict uses ``opts.split``) in batches, each with the number of rows before it."""
    try:
        import datasets
    except ImportError:
        raise ClusterClipError(f"{path}: reading Hugging Face datasets needs `pip install "
                               "clusterclip[hf]`") from None
    try:
        ds = datasets.load_from_disk(str(path))
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as exc:
        if isinstance(exc, OSError) and exc.errno not in (None, errno.ENOENT):
            raise _unreadable(path, exc) from None
        raise ClusterClipError(f"{path}: not a readable Hugging Face dataset folder ({type(exc).__name__}: "
                               f"{exc}); save it again with save_to_disk") from None
    if isinstance(ds, datasets.DatasetDict):
        if opts.split not in ds:
            raise ClusterClipError(f"{path}: split {opts.split!r} not found (splits: {', '.join(ds)}); "
                                   "choose one with --split")
        ds = ds[opts.split]
    if opts.text_field not in ds.column_names:
        raise BadRecordError(str(path), None, f"no column {opts.text_field!r} (columns: "
                             f"{', '.join(ds.column_names)}); choose another with --text-field")
    columns = [c for c in (opts.text_field, opts.id_field, opts.group_field) if c and c in ds.column_names]
    ds = ds.select_columns(list(dict.fromkeys(columns)))
    row = 0
    try:
        for cols in ds.iter(batch_size=BATCH_ROWS):
            yield str(path), row, cols
            row += len(cols[opts.text_field])
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise BadRecordError(str(path), row + 1, f"corrupt Hugging Face dataset data ({exc})") from None


@dataclass(frozen=True)
class WorkUnit:
    """A piece of the input that one worker reads on its own: a file, a Hugging Face dataset, a run of
    up to ``TXT_FILES_PER_UNIT`` files of a ``.txt`` folder (``files``, ids relative to ``path``), the
    row groups ``[first, stop)`` of a large Parquet file (``row_groups``), or the lines starting in a
    byte range of a large plain JSONL file (``byte_range``; ``lines_before``: newlines before it)."""

    path: Path
    fmt: str
    files: tuple[Path, ...] = ()
    row_groups: tuple[int, int] | None = None
    byte_range: tuple[int, int] | None = None
    lines_before: int = 0


def work_units(inputs: Sequence[tuple[Path, str]], split: bool = False) -> list[WorkUnit]:
    """Split resolved inputs into work units, in document order. With ``split``, a Parquet file of more
    than ``PARQUET_ROWS_PER_UNIT`` rows becomes one unit per run of row groups holding about that many
    (reading its footer here; a file whose footer cannot be read stays whole, for the reader to report),
    and a plain JSONL file of more than ``JSONL_BYTES_PER_UNIT`` bytes one unit per byte range of that
    size, whose ``lines_before`` :func:`number_lines` fills in."""
    units: list[WorkUnit] = []
    for path, fmt in inputs:
        if fmt == "txtdir":
            files = [p for p in files_under(path) if p.name.endswith(".txt")]
            units.extend(WorkUnit(path, fmt, tuple(files[i:i + TXT_FILES_PER_UNIT]))
                         for i in range(0, len(files), TXT_FILES_PER_UNIT))
        elif fmt == "parquet" and split:
            units.extend(WorkUnit(path, fmt, row_groups=r) for r in _row_group_runs(path, PARQUET_ROWS_PER_UNIT))
        elif fmt == "jsonl" and split and (size := path.stat().st_size) > JSONL_BYTES_PER_UNIT:
            units.extend(WorkUnit(path, fmt, byte_range=(a, min(a + JSONL_BYTES_PER_UNIT, size)))
                         for a in range(0, size, JSONL_BYTES_PER_UNIT))
        else:
            units.append(WorkUnit(path, fmt))
    return units


def number_lines(units: Sequence[WorkUnit], newline_counts: Sequence[int]) -> list[WorkUnit]:
    """Set ``lines_before`` of byte-range units from the newlines in each range (``newline_counts``, one
    per byte-range unit, in order), so ids and error locations keep the file's line numbers."""
    out: list[WorkUnit] = []
    counts = iter(newline_counts)
    seen: dict[Path, int] = {}
    for unit in units:
        if unit.byte_range is not None:
            before = seen.get(unit.path, 0)
            unit = dataclasses.replace(unit, lines_before=before)
            seen[unit.path] = before + next(counts)
        out.append(unit)
    return out


def _row_group_runs(path: Path, rows_per_run: int) -> list[tuple[int, int] | None]:
    """Consecutive row-group ranges of about ``rows_per_run`` rows each (``[None]``: read the file whole)."""
    try:
        md = pq.read_metadata(path)
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


def read_unit(unit: WorkUnit, opts: ReadOptions, stats: ReadStats) -> Iterator[DocBatch]:
    """Documents of one work unit in order, in batches."""
    path, fmt = unit.path, unit.fmt
    if fmt == "parquet":
        yield from read_column_batches(parquet_batches(path, opts, unit.row_groups), opts, stats,
                                       null_absent=(opts.text_field,))
    elif fmt == "hf":
        yield from read_column_batches(hf_batches(path, opts), opts, stats)
    elif fmt.startswith("jsonl"):
        yield from read_documents(jsonl_records(path, fmt, unit.byte_range, unit.lines_before), json_document,
                                  opts, stats)
    elif fmt in ("txt", "txtdir"):
        files, root = ((path,), path.parent) if fmt == "txt" else (unit.files, path)
        yield from read_documents(txt_records(files, root), txt_document, opts, stats)
    else:
        raise ClusterClipError(f"{path}: unsupported format {fmt}")


def iter_documents(inputs: Sequence[tuple[Path, str]], opts: ReadOptions, stats: ReadStats) -> Iterator[DocBatch]:
    """Documents of all inputs in order, in batches."""
    for unit in work_units(inputs):
        yield from read_unit(unit, opts, stats)


# ------------------------------------------------------------------------------------ default corpus


def stdlib_documents(min_words: int = 25, root: str | None = None) -> Iterator[DocBatch]:
    """The embedded default corpus: docstrings of the standard library, one per module/class/function.

    Sources are parsed with :mod:`ast` (nothing is imported, so no side effects). A docstring needs at
    least ``min_words`` words to count as a document; the group is the top-level module name.
    """
    docs = _stdlib_docstrings(Path(root or sysconfig.get_paths()["stdlib"]), min_words)
    return read_documents(((DEFAULT_CORPUS, None, doc) for doc in docs), _as_is, ReadOptions(), ReadStats())


def _as_is(doc: Document, opts: ReadOptions, source: str, loc: int | None) -> Document:
    return doc


def _stdlib_docstrings(base: Path, min_words: int) -> Iterator[Document]:
    skip_dirs = {"test", "tests", "idlelib", "site-packages", "dist-packages", "lib2to3", "turtledemo",
                 "__pycache__", "ensurepip", "venv"}
    files = sorted(p for p in base.rglob("*.py") if not skip_dirs.intersection(p.relative_to(base).parts))
    for path in files:
        rel = path.relative_to(base).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        if not parts:
            continue
        module = ".".join(parts)
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError, UnicodeDecodeError):
            continue
        for qualname, doc in _docstrings(tree, module):
            if len(doc.split()) >= min_words:
                yield qualname, f"{qualname}\n\n{doc}", parts[0].lstrip("_") or parts[0]


def _docstrings(tree: ast.Module, module: str) -> Iterator[tuple[str, str]]:
    doc = ast.get_docstring(tree)
    if doc:
        yield module, doc
    stack: list[tuple[str, ast.AST]] = [(module, tree)]
    while stack:
        prefix, node = stack.pop(0)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}.{child.name}"
                doc = ast.get_docstring(child)
                if doc:
                    yield name, doc
                if isinstance(child, ast.ClassDef):
                    stack.append((name, child))


# ------------------------------------------------------------------------------------------- tokens


@functools.lru_cache(maxsize=4)
def make_token_counter(tokenizer: str | None) -> Callable[[list[str]], np.ndarray]:
    """Per-document token counts: a word/punctuation regex by default, or a Hugging Face tokenizer."""
    if tokenizer is None:
        def count(texts: list[str]) -> np.ndarray:
            return np.fromiter((len(_TOKEN_RE.findall(t)) for t in texts), dtype=np.int64, count=len(texts))

        return count
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise SettingsError("tokenizer", "needs `pip install clusterclip[hf]`", CorpusConfig) from None
    try:
        tok = AutoTokenizer.from_pretrained(tokenizer)
    except OSError as exc:
        raise ClusterClipError(f"cannot load tokenizer {tokenizer!r}: {exc}") from None

    def count_hf(texts: list[str]) -> np.ndarray:
        enc = tok(texts, add_special_tokens=False, return_attention_mask=False, verbose=False)
        return np.fromiter((len(ids) for ids in enc["input_ids"]), dtype=np.int64, count=len(texts))

    return count_hf


# --------------------------------------------------------------------------------------- the stage


@dataclass(frozen=True)
class CorpusConfig(ReadOptions):
    """Options of the corpus stage (part of the stage record): how to read records, how to count
    tokens, and how long a docstring must be to join the default corpus."""

    tokenizer: str | None = setting(None, check=optional(is_text),
                                    help="Hugging Face tokenizer name or path for token counts (default: a "
                                         "word/punctuation regex count)")
    min_words: int = setting(25, check=at_least(1), help="words a docstring needs to join the default corpus")


@dataclass
class _Read:
    """What reading some documents leaves for the stage record."""

    parts: list[str]
    part_sizes: list[int]
    tokens: np.ndarray
    id_hashes: np.ndarray
    groups: Counter[str]
    stats: ReadStats


def write_part(path: Path, table: pa.Table) -> None:
    """Write one corpus part atomically; chunks are combined first so the bytes depend only on the rows."""
    with disk_full_at(path), atomic_path(path) as tmp:
        pq.write_table(table.combine_chunks(), tmp, row_group_size=ROW_GROUP_ROWS)


class PartWriter:
    """Writes documents into parts ``name(0), name(1), ...`` of exactly ``part_rows`` rows (the last one
    fewer), indexed from ``first_index`` (``clusterclip add`` continues after the corpus), and keeps what
    the stage record needs: token counts, id hashes, groups."""

    def __init__(self, root: Path, name: Callable[[int], str], count_tokens: Callable[[list[str]], np.ndarray],
                 part_rows: int, first_index: int = 0) -> None:
        self.root, self.name, self.count_tokens, self.part_rows = root, name, count_tokens, part_rows
        self.first_index = first_index
        self.parts: list[str] = []
        self.part_sizes: list[int] = []
        self.tokens: list[np.ndarray] = []
        self.id_hashes: list[np.ndarray] = []
        self.groups: Counter[str] = Counter()
        self.n = 0
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0

    def add(self, batch: DocBatch) -> None:
        tokens = self.count_tokens(batch.texts)
        start = self.first_index + self.n
        rb = pa.record_batch([pa.array(np.arange(start, start + len(batch), dtype=np.int64)),
                              pa.array(batch.ids, pa.string()), pa.array(batch.texts, pa.string()),
                              pa.array(tokens), pa.array(batch.groups, pa.string())], schema=CORPUS_SCHEMA)
        self.tokens.append(tokens)
        self.id_hashes.append(_hash_ids(batch.ids))
        self.groups.update(g for g in batch.groups if g is not None)
        self.n += len(batch)
        while rb.num_rows:
            take = min(rb.num_rows, self.part_rows - self._pending_rows)
            self._pending.append(rb.slice(0, take))
            self._pending_rows += take
            rb = rb.slice(take)
            if self._pending_rows == self.part_rows:
                self._flush()

    def finish(self, stats: ReadStats) -> _Read:
        """Write the last part; what was read, for the stage record."""
        if self._pending:
            self._flush()
        return _Read(self.parts, self.part_sizes, _concat(self.tokens, np.int64),
                     _concat(self.id_hashes, np.uint64), self.groups, stats)

    def _flush(self) -> None:
        rel = self.name(len(self.parts))
        write_part(self.root / rel, pa.Table.from_batches(self._pending, CORPUS_SCHEMA))
        self.parts.append(rel)
        self.part_sizes.append(self._pending_rows)
        self._pending, self._pending_rows = [], 0


def corpus_stage(
    run: RunDir,
    inputs: Sequence[str | os.PathLike[str]] = (),
    config: CorpusConfig = CorpusConfig(),
    force: bool = False,
    progress: bool = True,
    engine: str = "local",
    command: Sequence[str] = (),
) -> dict[str, Any]:
    """Read ``inputs`` (or the default corpus) into ``corpus/part-*.parquet`` and ``tokens.npy``.

    Skipped when the record shows the same inputs (paths, sizes, mtimes) and options. With
    ``engine="ray"`` the work units (input files, datasets, runs of ``.txt`` files, runs of row groups of
    large Parquet files) are read by Ray tasks
    in parallel and the parts are assembled in document order; the artifacts are byte-identical to the
    local engine's. The run directory must then be on storage every Ray node can reach. The small
    default corpus is always read here. Returns the stage record. The caller holds the run-directory lock.
    """
    if inputs:
        resolved = expand_inputs(inputs)
        fingerprint: Any = inputs_fingerprint(resolved)
    else:
        resolved = []
        fingerprint = {"default": DEFAULT_CORPUS, "python": sys.version,
                       "stdlib": sysconfig.get_paths()["stdlib"]}
    cfg = {**asdict(config), "inputs": [str(Path(p)) for p in inputs] or [DEFAULT_CORPUS]}
    if not inputs:
        cfg["group_field"] = "module"
    stage = Stage(A.CORPUS_STAGE, cfg, config_hash(fingerprint),
                  build=lambda job: _build_corpus(run, inputs, resolved, config, engine, progress, fingerprint),
                  command=command or corpus_command(inputs, config))
    with disk_full_at(run.root):
        return run_stage(run, stage, force)


CORPUS_FIELDS = ("text_field", "id_field", "group_field", "split", "on_bad_record", "tokenizer")
"""The settings of :class:`CorpusConfig` that are options of ``clusterclip embed`` and ``run``."""


def corpus_command(inputs: Sequence[str | os.PathLike[str]], config: CorpusConfig) -> list[str]:
    """The ``clusterclip embed`` command line that reads ``inputs`` with ``config`` (the default corpus
    when ``inputs`` is empty), before any embed option."""
    defaults = {} if inputs else {"group_field": "module"}
    return ["clusterclip", "embed", *map(str, inputs), "--out", RUN,
            *command_flags(CorpusConfig, asdict(config), CORPUS_FIELDS, defaults)]


def _build_corpus(run: RunDir, inputs: Sequence[str | os.PathLike[str]], resolved: Sequence[tuple[Path, str]],
                  config: CorpusConfig, engine: str, progress: bool, fingerprint: Any) -> Built:
    """Read the corpus into its parts and ``tokens.npy``; refuse an empty corpus and duplicate ids. When the
    disk fills up, the parts written so far go too (the record is already gone), freeing their space."""
    try:
        return _write_corpus(run, inputs, resolved, config, engine, progress, fingerprint)
    except DiskFullError:
        for part in run.path(A.CORPUS_DIR).glob(A.CORPUS_PART_GLOB):
            part.unlink(missing_ok=True)
        raise


def _write_corpus(run: RunDir, inputs: Sequence[str | os.PathLike[str]], resolved: Sequence[tuple[Path, str]],
                  config: CorpusConfig, engine: str, progress: bool, fingerprint: Any) -> Built:
    staging = run.path(A.CORPUS_STAGING)
    shutil.rmtree(staging, ignore_errors=True)
    run.path(A.CORPUS_DIR).mkdir(parents=True, exist_ok=True)
    bar = progress_bar("corpus", "docs", enabled=progress)
    try:
        if inputs and check_engine(engine) == "ray":
            read = _read_on_ray(run.root, resolved, config, bar)
        else:
            read = _read_here(run.root, resolved if inputs else None, config, bar)
    finally:
        bar.close()
        shutil.rmtree(staging, ignore_errors=True)
    n, stats = read.tokens.size, read.stats
    if n == 0:
        where = ", ".join(str(p) for p in inputs) or DEFAULT_CORPUS
        raise ClusterClipError(f"{where}: empty corpus: no usable documents"
                               + (f" ({stats.skipped} bad records skipped)" if stats.skipped else ""))
    for stale in sorted(run.path(A.CORPUS_DIR).glob(A.CORPUS_PART_GLOB)):
        if f"{A.CORPUS_DIR}/{stale.name}" not in read.parts:
            stale.unlink()
    duplicates = _count_duplicates(read.id_hashes)
    if duplicates and config.id_field is not None:
        first, second = _first_duplicate(read.id_hashes)
        doc_id = _ids_at(run, read, (first,))[0]
        msg = f"{duplicates} duplicate ids in field {config.id_field!r}"
        if config.on_bad_record == "error":
            where = _document_locations(resolved, config, (first, second)) if inputs else {}
            at = [where.get(i, f"document {i}") for i in (first, second)]
            raise ClusterClipError(f"{', '.join(map(str, inputs)) or DEFAULT_CORPUS}: {msg}, the first {doc_id!r} at "
                                   f"{at[0]} and again at {at[1]}; ids must be unique (or use --on-bad-record skip "
                                   "to keep them, counted)")
        log.warning("corpus: %s, the first %r (kept)", msg, doc_id)
    with disk_full_at(run.path(A.TOKENS)):
        save_npy(run.path(A.TOKENS), read.tokens)
    if stats.skipped:
        log.warning("corpus: skipped %d bad records, e.g. %s", stats.skipped, stats.examples[0])
    return Built([*read.parts, A.TOKENS], dict(
        count=n, tokens=int(read.tokens.sum()), skipped=stats.skipped, skipped_examples=stats.examples,
        duplicate_ids=int(duplicates), groups=dict(sorted(read.groups.items(), key=lambda kv: -kv[1])),
        inputs=fingerprint if inputs else [], engine=engine if inputs else "local",
    ))


def _read_here(root: Path, resolved: Sequence[tuple[Path, str]] | None, config: CorpusConfig,
               bar: Any) -> _Read:
    """Read every document in this process (``resolved=None``: the default corpus) into the final parts."""
    stats = ReadStats()
    batches = iter_documents(resolved, config, stats) if resolved is not None else stdlib_documents(config.min_words)
    writer = PartWriter(root, A.corpus_part, make_token_counter(config.tokenizer), PART_ROWS)
    for batch in batches:
        writer.add(batch)
        bar.update(len(batch))
    return writer.finish(stats)


def _read_unit_task(root: str, unit_no: int, unit: WorkUnit, config: CorpusConfig, part_rows: int) -> _Read:
    """Ray task: read one work unit into staging parts (indexed from 0 within the unit)."""
    stats = ReadStats()
    writer = PartWriter(Path(root), functools.partial(A.corpus_staging_part, unit_no),
                        make_token_counter(config.tokenizer), part_rows)
    for batch in read_unit(unit, config, stats):
        writer.add(batch)
    return writer.finish(stats)


def _assemble_part_task(root: str, rel: str, pieces: list[tuple[str, int, int]], first_index: int) -> None:
    """Ray task: write final part ``rel`` from row ranges ``[start, stop)`` of staging parts, re-indexed."""
    table = pa.concat_tables(pq.read_table(Path(root) / src).slice(start, stop - start)
                             for src, start, stop in pieces)
    index = pa.array(np.arange(first_index, first_index + table.num_rows, dtype=np.int64))
    write_part(Path(root) / rel, table.set_column(0, "index", index))


def _read_on_ray(root: Path, resolved: Sequence[tuple[Path, str]], config: CorpusConfig, bar: Any) -> _Read:
    """Read the inputs' work units with Ray tasks (after counting the lines of split JSONL files), then cut
    their staging parts into final parts of ``PART_ROWS`` rows with global indices: the same parts, byte
    for byte, as :func:`_read_here`."""
    from clusterclip.engines import ray_tasks

    units = work_units(resolved, split=True)
    ranges = [(str(u.path), *u.byte_range) for u in units if u.byte_range is not None]
    units = number_lines(units, ray_tasks(count_newlines, ranges))

    reads: list[_Read] = ray_tasks(
        _read_unit_task, [(str(root), i, unit, config, PART_ROWS) for i, unit in enumerate(units)],
        on_done=lambda r: bar.update(r.tokens.size))
    staged = [(rel, size) for r in reads for rel, size in zip(r.parts, r.part_sizes, strict=True)]
    n = sum(size for _, size in staged)
    calls: list[tuple[str, str, list[tuple[str, int, int]], int]] = []
    parts: list[str] = []
    sizes: list[int] = []
    src, offset = 0, 0
    for first in range(0, n, PART_ROWS):
        rel = A.corpus_part(len(parts))
        pieces, want = [], min(PART_ROWS, n - first)
        while want:
            name, size = staged[src]
            take = min(want, size - offset)
            pieces.append((name, offset, offset + take))
            want -= take
            offset += take
            if offset == size:
                src, offset = src + 1, 0
        calls.append((str(root), rel, pieces, first))
        parts.append(rel)
        sizes.append(min(PART_ROWS, n - first))
    ray_tasks(_assemble_part_task, calls)
    stats = ReadStats()
    groups: Counter[str] = Counter()
    for r in reads:
        stats.merge(r.stats)
        groups.update(r.groups)
    return _Read(parts, sizes, _concat([r.tokens for r in reads], np.int64),
                 _concat([r.id_hashes for r in reads], np.uint64), groups, stats)


def _concat(chunks: Sequence[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(chunks).astype(dtype, copy=False) if chunks else np.zeros(0, dtype)


def check_inputs_unchanged(run: RunDir) -> None:
    """Refuse to go on when the corpus files changed (size or mtime) since the corpus stage read them."""
    rec = run.require(A.CORPUS_STAGE, verify=False)
    for entry in rec.get("inputs", []):
        path = Path(entry["path"])
        if not path.exists():
            raise StaleArtifactError(f"{path}: input of the corpus stage no longer exists; re-run "
                                     f"`clusterclip embed INPUT... --out {run.root}`")
        st = path.stat()
        if st.st_size != entry["size"] or st.st_mtime_ns != entry["mtime_ns"]:
            raise StaleArtifactError(
                f"{path}: changed since the corpus stage read it (size {entry['size']} -> {st.st_size}); "
                f"re-run `clusterclip embed INPUT... --out {run.root}` so every stage uses the same corpus")


def _hash_ids(ids: list[str]) -> np.ndarray:
    return np.fromiter((int.from_bytes(hashlib.blake2b(s.encode(), digest_size=8).digest(), "little")
                        for s in ids), dtype=np.uint64, count=len(ids))


def _count_duplicates(hashes: np.ndarray) -> int:
    return int(hashes.size - np.unique(hashes).size)


def _first_duplicate(hashes: np.ndarray) -> tuple[int, int]:
    """Document indices ``(first, second)`` of the earliest repeat: ``second`` is the smallest index whose
    id hash occurred before, ``first`` where it did."""
    order = np.argsort(hashes, kind="stable")
    sorted_hashes = hashes[order]
    repeat = np.flatnonzero(sorted_hashes[1:] == sorted_hashes[:-1]) + 1
    at = repeat[np.argmin(order[repeat])]
    return int(order[np.searchsorted(sorted_hashes, sorted_hashes[at])]), int(order[at])


def _ids_at(run: RunDir, read: _Read, indices: Sequence[int]) -> list[str]:
    """The ids of documents ``indices`` as written in the corpus parts of ``read``."""
    ends = np.cumsum(read.part_sizes)
    out = []
    for i in indices:
        part = int(np.searchsorted(ends, i, side="right"))
        row = i - (int(ends[part - 1]) if part else 0)
        out.append(pq.read_table(run.path(read.parts[part]), columns=["id"]).column(0)[row].as_py())
    return out


def _document_locations(inputs: Sequence[tuple[Path, str]], opts: ReadOptions,
                        indices: Sequence[int]) -> dict[int, str]:
    """``FILE:LINE`` (or ``FILE:ROW``, or the file) of the documents at ``indices``, found by reading the inputs
    again up to the last of them, under the same bad-record policy: only for error messages, so that the
    reading that writes the corpus keeps no per-document locations."""
    wanted, found, n = set(indices), {}, 0
    last = max(indices)
    for unit in work_units(inputs):
        if unit.fmt in ("parquet", "hf"):
            batches = parquet_batches(unit.path, opts, unit.row_groups) if unit.fmt == "parquet" \
                else hf_batches(unit.path, opts)
            located: Iterable[tuple[Located, ToDocument]] = (
                (rec, record_document) for source, before, cols in batches
                for rec in _column_records(source, cols, before, (opts.text_field,) if unit.fmt == "parquet" else None))
        elif unit.fmt.startswith("jsonl"):
            located = ((rec, json_document) for rec in jsonl_records(unit.path, unit.fmt))
        else:
            files, root = ((unit.path,), unit.path.parent) if unit.fmt == "txt" else (unit.files, unit.path)
            located = ((rec, txt_document) for rec in txt_records(files, root))
        for (source, loc, record), to_document in located:
            try:
                to_document(record, opts, source, loc)
            except BadRecordError:
                continue
            if n in wanted:
                found[n] = source if loc is None else f"{source}:{loc}"
            if n == last:
                return found
            n += 1
    return found


# ------------------------------------------------------------------------------------------ access


def corpus_parts(run: RunDir) -> list[Path]:
    """The corpus parquet parts of a run directory, in index order: those its corpus record lists, or,
    without a record, every ``corpus/part-*.parquet``."""
    artifacts = (run.record(A.CORPUS_STAGE) or {}).get("artifacts", {})
    rels = sorted(r for r in artifacts if fnmatch.fnmatch(r, f"{A.CORPUS_DIR}/{A.CORPUS_PART_GLOB}"))
    if not rels:
        return sorted(run.path(A.CORPUS_DIR).glob(A.CORPUS_PART_GLOB))
    return [run.path(r) for r in rels]


def iter_corpus(run: RunDir, columns: Sequence[str] = ("text",), batch_rows: int = 4096) -> Iterator[pa.RecordBatch]:
    """Stream the corpus of a run directory in index order, only the given columns."""
    for part in corpus_parts(run):
        yield from open_parquet(part).iter_batches(batch_size=batch_rows, columns=list(columns))


def read_column(run: RunDir, column: str) -> list[Any]:
    """One corpus column as a Python list (e.g. ids or groups); O(N) memory."""
    out: list[Any] = []
    for rb in iter_corpus(run, (column,)):
        out.extend(rb.column(0).to_pylist())
    return out
