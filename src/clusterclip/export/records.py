"""Exports that keep the record (``--keep-record``): each planned document's input record, its own fields, beside
``index`` and ``cluster``, so the stream is a dataset an SFT trainer (TRL, axolotl, LLaMA-Factory) reads as it is.

The stream carries each document's record as compact JSON (the corpus parts' ``record`` column; a plain-text
document of a mixed corpus as ``{"text": ...}``). ``jsonl`` writes it back with the export's own fields added, so
every value is the input's, as JSON; ``parquet`` and ``hf`` need one schema for every row: :class:`RecordFields`
infers it from every record of the corpus once (a field a record lacks is null there, as Arrow has no absent
value), and a field whose values have no common Arrow type (a list mixing strings and numbers, a field that is
text in one record and a number in another) is written as its JSON text, which the record says.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from clusterclip.contract.corpus import CorpusRecord, iter_corpus
from clusterclip.errors import ClusterClipError
from clusterclip.export.chat import ChatEncoder
from clusterclip.export.tokenizer import Tokenizer
from clusterclip.store import RunDir

RECORD = "record"
OWN_COLUMNS = ("index", "cluster", "tier")
"""The export's fields beside a record's: a record field of one of these names is refused."""


def has_conversations(corpus: CorpusRecord) -> bool:
    """Whether the corpus holds documents of a conversation kind (their records are kept whole)."""
    return bool(set(corpus.kinds or {}) - {"text"})


def record_column(texts: pa.ChunkedArray | pa.Array, records: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Each document's record as JSON: its kept record, or for plain text ``{"text": ...}``."""
    return pa.array([r if r is not None else json.dumps({"text": t}, ensure_ascii=False)
                     for t, r in zip(texts.to_pylist(), records.to_pylist(), strict=True)], pa.string())


def _refuse_own(fields: Sequence[str]) -> None:
    clash = [f for f in fields if f in OWN_COLUMNS]
    if clash:
        raise ClusterClipError(f"record field {clash[0]!r} has the name of a column the export writes itself "
                               f"({', '.join(OWN_COLUMNS)}): rename it in the input, or export with --no-keep-record")


def _own(batch: pa.Table) -> list[str]:
    """The export's columns of a batch of records: all but the record and the corpus id (a record has its own)."""
    return [c for c in batch.column_names if c not in (RECORD, "id")]


def json_rows(batch: pa.Table, seen: dict[str, None] | None = None) -> Iterator[dict[str, Any]]:
    """The rows of a batch whose ``record`` column holds JSON: each record's fields, then the export's own
    (``seen`` gathers the names of the records' fields, in the order they appear)."""
    own = _own(batch)
    columns = [batch.column(c).to_pylist() for c in own]
    for i, record in enumerate(batch.column(RECORD).to_pylist()):
        fields = json.loads(record)
        _refuse_own([k for k in fields if k in OWN_COLUMNS])
        if seen is not None:
            seen.update(dict.fromkeys(fields))
        yield {**fields, **{c: col[i] for c, col in zip(own, columns, strict=True)}}


class RecordFields:
    """One Arrow type per record field, inferred from every record of the run's corpus (:meth:`table` turns the
    ``record`` column of a batch into those columns); ``as_json`` names the fields written as JSON text."""

    def __init__(self, run: RunDir, batch_rows: int = 8192) -> None:
        types: dict[str, pa.DataType] = {}
        self.as_json: set[str] = set()
        for rb in iter_corpus(run, ("text", RECORD), batch_rows=batch_rows):
            rows = [json.loads(r) for r in record_column(rb.column(0), rb.column(1)).to_pylist()]
            for name in dict.fromkeys(k for row in rows for k in row):
                if name not in self.as_json:
                    self._merge(types, name, [row.get(name) for row in rows])
        _refuse_own(list(types))
        self.types = {n: (pa.string() if n in self.as_json else t) for n, t in types.items()}

    def _merge(self, types: dict[str, pa.DataType], name: str, values: list[Any]) -> None:
        try:
            found = pa.array(values).type
            types[name] = found if name not in types else pa.unify_schemas(
                [pa.schema([(name, types[name])]), pa.schema([(name, found)])], promote_options="permissive"
            ).field(name).type
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            types.setdefault(name, pa.string())
            self.as_json.add(name)

    @property
    def names(self) -> list[str]:
        return list(self.types)

    def table(self, batch: pa.Table) -> pa.Table:
        """``batch`` with its ``record`` column replaced by the records' fields, typed, first."""
        rows = [json.loads(r) for r in batch.column(RECORD).to_pylist()]
        columns = {}
        for name, kind in self.types.items():
            values = [row.get(name) for row in rows]
            if name in self.as_json:
                values = [None if v is None else json.dumps(v, ensure_ascii=False) for v in values]
            columns[name] = pa.array(values, kind)
        return pa.table({**columns, **{c: batch.column(c) for c in _own(batch)}})


def body_columns(rows: pa.Table, encoder: Tokenizer | ChatEncoder | None) -> dict[str, pa.ChunkedArray]:
    """What the stream holds of ``rows`` (``text``, ``id`` and, when read, ``record``) before its own columns:
    ``tokens`` (and ``loss_mask``) with an encoder, else the records as JSON (``--keep-record``: the rows have a
    ``record`` column) or the text."""
    text = rows.column("text")
    if isinstance(encoder, ChatEncoder):
        return encoder.encode(text, rows.column(RECORD))
    if encoder is not None:
        return {"tokens": encoder.encode(text)}
    if RECORD in rows.column_names:
        return {RECORD: pa.chunked_array([record_column(text, rows.column(RECORD))])}
    return {"text": text}
