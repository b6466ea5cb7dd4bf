"""Records into documents, once for every format: reader options, the bad-record policy and batching.

A format only reads (see :mod:`clusterclip.corpus.jsonl` and its siblings). A row format (JSON lines,
``.txt`` files) yields located records ``(source, location, record)``, the location being the 1-based line
(None: the whole file is the record), and names the function that turns a record into a document; a column
format (Parquet, Hugging Face datasets) yields ``(source, rows before, columns)`` batches. Field extraction,
the bad-record policy (stop at the first bad record, or skip it and count it) and batching live here.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Callable, Container, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from clusterclip.contract.record_kinds import KINDS, RECORD_KINDS, KindError, kind_of, template_fields, text_of
from clusterclip.corpus import limits
from clusterclip.errors import BadRecordError, ClusterClipError
from clusterclip.settings import Settings, is_text, option, optional, setting

FIELD_KINDS = ("auto", "num", "cat")
"""How a kept field is typed: from its values (numbers: numeric, anything else: categorical), or as declared."""


def field_spec(item: str) -> tuple[str, str]:
    """``NAME`` or ``NAME:num`` / ``NAME:cat`` of ``--keep-fields`` as ``(name, kind)``."""
    name, _, kind = item.partition(":")
    return name, kind or "auto"


def _keep_fields(x: Any) -> str | None:
    if not isinstance(x, (tuple, list)):
        return f"must be a list of field names, got {x!r}"
    names = []
    for item in x:
        name, kind = field_spec(item) if isinstance(item, str) else ("", "")
        if not name or kind not in FIELD_KINDS or any(c in name for c in ",;=/"):
            return f"items are FIELD, FIELD:num or FIELD:cat, got {item!r}"
        names.append(name)
    twice = sorted({n for n in names if names.count(n) > 1})
    return f"names {', '.join(twice)} more than once" if twice else None


def _template(x: Any) -> str | None:
    if x is None:
        return None
    if not isinstance(x, str):
        return f"must be a string, got {x!r}"
    try:
        template_fields(x)
    except KindError:
        return f"must name at least one record field in braces (a Python format string), got {x!r}"
    return None


def _names(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in text.split(",") if t.strip())


@dataclass(frozen=True)
class ReadOptions(Settings):
    """How records are turned into documents; validated on construction."""

    API_ARGUMENT = "read"

    text_field: str = setting("text", check=is_text, help="field or column holding the document text")
    id_field: str | None = setting(None, check=optional(is_text),
                                   help="field holding a unique document id (default: FILE:LINE of each record)")
    group_field: str | None = setting("domain", check=optional(is_text),
                                      help="optional ground-truth field kept for reports and experiments "
                                           "(never used to cluster)")
    on_bad_record: str = setting("error", choices=("error", "skip"),
                                 help="stop at the first bad record, or skip bad records and count them")
    split: str = setting("train", check=is_text, help="split to read from a Hugging Face DatasetDict")
    keep_fields: tuple[str, ...] = setting(
        (), check=_keep_fields, parse=_names,
        help="per-document fields to keep, comma-separated FIELD[:num|:cat] (e.g. quality,source,lang): stored as "
             "typed arrays (numbers: numeric, anything else: categorical; null or absent: missing) for "
             "`plan --strata` and the exports")

    record_kind: str = setting(
        "auto", choices=RECORD_KINDS,
        help="how a record becomes a document: text (--text-field), " + "; ".join(
            f"{k.name} ({k.SUMMARY})" for k in KINDS.values()) + "; auto: text when the record has --text-field, "
        "else the first of these whose fields it has (a template only with --text-template)")
    text_template: str | None = setting(
        None, check=_template,
        help='a template over the record\'s fields, e.g. "{question}\\n{response}" (Python format fields; implies '
             "--record-kind template under auto) (default: none)")

    @property
    def kind(self) -> str:
        """The record kind in force: ``record_kind``, with ``auto`` under a template meaning ``template``."""
        return "template" if self.record_kind == "auto" and self.text_template is not None else self.record_kind

    def read_all_columns(self, names: Container[str]) -> bool:
        """Whether a column format reads every column of a file with columns ``names``: records of a conversation
        kind (kept whole for the exports), not plain text."""
        if self.kind == "auto":
            return self.text_field not in names and any(k.detect(names) for k in KINDS.values())
        return self.kind != "text"

    @property
    def field_names(self) -> tuple[str, ...]:
        """The names of the kept fields, in order."""
        return tuple(field_spec(f)[0] for f in self.keep_fields)

    def read_columns(self) -> list[str]:
        """The fields a column format reads (those present): text, id, group and the kept fields."""
        return list(dict.fromkeys(c for c in (self.text_field, self.id_field, self.group_field, *self.field_names)
                                  if c))


@dataclass
class ReadStats:
    """Counts kept while reading; ``examples`` holds the first few skipped-record messages, ``kinds`` the
    documents read of each record kind."""

    read: int = 0
    skipped: int = 0
    examples: list[str] = field(default_factory=list)
    kinds: Counter[str] = field(default_factory=Counter)

    max_examples: ClassVar[int] = 10

    def skip(self, err: BadRecordError) -> None:
        self.skipped += 1
        if len(self.examples) < self.max_examples:
            self.examples.append(str(err))

    def merge(self, later: ReadStats) -> None:
        """Add the counts of documents read after these (examples stay the first few in order)."""
        self.read += later.read
        self.skipped += later.skipped
        self.kinds.update(later.kinds)
        self.examples.extend(later.examples[: self.max_examples - len(self.examples)])


@dataclass
class DocBatch:
    """Documents as parallel columns: ids, texts, (optional) ground-truth groups and, when the reader keeps
    fields, each document's kept field values (``fields``: one tuple per document, as text; None: missing)."""

    ids: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    groups: list[str | None] = field(default_factory=list)
    fields: list[tuple[str | None, ...]] = field(default_factory=list)
    records: list[str | None] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.texts)

    def add(self, doc_id: str, text: str, group: str | None, kept: tuple[str | None, ...] = (),
            record: str | None = None, kind: str = "text") -> None:
        self.ids.append(doc_id)
        self.texts.append(text)
        self.groups.append(group)
        self.fields.append(kept)
        self.records.append(record)
        self.kinds.append(kind)


Document = tuple[Any, ...]
"""``(id, text, group)``, or with the kept field values, the record as JSON (a conversation kind) and its kind."""
Located = tuple[str, int | None, Any]
ToDocument = Callable[[Any, ReadOptions, str, int | None], Document]
ColumnBatch = tuple[str, int, dict[str, list]]


def read_documents(records: Iterable[Located], to_document: ToDocument, opts: ReadOptions,
                   stats: ReadStats) -> Iterator[DocBatch]:
    """Documents of located records in batches of ``limits.BATCH_ROWS``, under the bad-record policy: a record
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
        stats.kinds[batch.kinds[-1]] += 1
        if len(batch.texts) >= limits.BATCH_ROWS:
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
            yield from read_documents(column_records(source, cols, before, null_absent), record_document,
                                      opts, stats)
        elif batch:
            stats.read += len(batch)
            stats.kinds["text"] += len(batch)
            yield batch


def column_documents(cols: dict[str, list], opts: ReadOptions, source: str, before: int) -> DocBatch | None:
    """What :func:`record_document` makes of every row of a column batch (rows numbered from
    ``before + 1``), computed a column at a time; None when some row is bad."""
    texts = cols.get(opts.text_field)
    if texts is None or opts.kind not in ("text", "auto") or not all(isinstance(t, str) and t.strip() for t in texts):
        return None
    if opts.id_field is None:
        ids = [_default_id(source, row) for row in range(before + 1, before + len(texts) + 1)]
    elif opts.id_field in cols and all(v is not None and not isinstance(v, (dict, list)) for v in cols[opts.id_field]):
        ids = [str(v) for v in cols[opts.id_field]]
    else:
        return None
    groups = cols.get(opts.group_field) if opts.group_field else None
    kept: list[tuple[str | None, ...]] = [()] * len(texts)
    if opts.keep_fields:
        columns = [cols.get(name) or [None] * len(texts) for name in opts.field_names]
        try:
            kept = [tuple(field_text(v, "", "", None) for v in row) for row in zip(*columns, strict=True)]
        except BadRecordError:
            return None
    return DocBatch(ids, texts, [_group_value(v) for v in groups] if groups else [None] * len(texts), kept)


def column_records(source: str, cols: dict[str, list], before: int,
                   null_absent: Container[str] | None) -> Iterator[Located]:
    """The rows of a column batch as records numbered from ``before + 1``: a null in a ``null_absent``
    column (None: any) is an absent field, elsewhere it stays ``None``."""
    names = list(cols)
    for row, values in enumerate(zip(*cols.values(), strict=True), before + 1):
        yield source, row, {c: v for c, v in zip(names, values, strict=True)
                            if v is not None or (null_absent is not None and c not in null_absent)}


def record_document(record: dict[str, Any], opts: ReadOptions, source: str, loc: int | None) -> Document:
    """``(id, text, group)`` of a record of named fields, as ``opts`` names them."""
    kind = kind_of(record, opts.kind, opts.text_field)
    kept = tuple(field_text(record.get(name), name, source, loc) for name in opts.field_names)
    if kind is None:
        text = _text_of(record, opts, source, loc)
        return _id_of(record, opts, source, loc), text, _group_of(record, opts), kept
    try:
        text = text_of(kind.turns(record, opts.text_template))
    except KindError as exc:
        raise BadRecordError(source, loc, f"{kind.name} record: {exc}") from None
    whole = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)
    return _id_of(record, opts, source, loc), text, _group_of(record, opts), kept, whole, kind.name


def field_text(value: Any, name: str, source: str, loc: int | None) -> str | None:
    """A kept field's value as text (numbers as Python writes them, booleans ``true``/``false``; None: missing);
    a list or object is a bad record (only scalar fields are kept)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    raise BadRecordError(source, loc, f"field {name!r} is {type(value).__name__}; only numbers, strings and booleans "
                         "can be kept (--keep-fields)")


def _text_of(record: dict[str, Any], opts: ReadOptions, source: str, loc: int | None) -> str:
    if opts.text_field not in record:
        keys = ", ".join(sorted(map(str, record))[:8]) or "none"
        hint = f"; choose another with {option(type(opts), 'text_field')}" + (
            f", or a {option(type(opts), 'record_kind')} ("
            + ", ".join(f"{k.name}: {'/'.join(k.FIELDS)}" for k in KINDS.values() if k.FIELDS)
            + ")" if opts.kind == "auto" else "")
        raise BadRecordError(source, loc, f"missing text field {opts.text_field!r} (fields: {keys}){hint}")
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


def _default_id(source: str, loc: int | None) -> str:
    return f"{_file_name(source)}:{loc}"


@functools.lru_cache(maxsize=256)
def _file_name(source: str) -> str:
    return Path(source).name


def is_unicode(text: str) -> bool:
    """False for a string holding a lone surrogate (from a JSON escape or an undecodable file name),
    which no UTF-8 column can store."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def not_utf8(source: str, loc: int | None, exc: UnicodeDecodeError) -> BadRecordError:
    """The bad-record error of bytes that do not decode as UTF-8."""
    return BadRecordError(source, loc, f"not valid UTF-8 (byte {exc.start})")


def unreadable(path: Path, exc: OSError) -> ClusterClipError:
    """The one-line error of an input that cannot be listed or read (permission denied, I/O error)."""
    return ClusterClipError(f"{path}: cannot read: {exc.strerror or exc}")
