"""Record kinds: how a record of named fields becomes a document (``--record-kind``), one module per layout.

``text`` (one string field, ``--text-field``) is read by :mod:`clusterclip.corpus.records` itself; the others
are conversations (:data:`KINDS`). Adding a kind is its module plus one line in :data:`KINDS`; ``auto`` (the
default) takes plain text when the text field is there, else the first kind whose fields the record has.
"""

from __future__ import annotations

from collections.abc import Container

from clusterclip.contract.record_kinds.base import PARTS, KindError, RecordKind, part_of, text_of
from clusterclip.contract.record_kinds.chat import Chat
from clusterclip.contract.record_kinds.instruction import Alpaca, OpenOrca
from clusterclip.contract.record_kinds.sharegpt import ShareGPT
from clusterclip.contract.record_kinds.template import Template, template_fields

KINDS: dict[str, type[RecordKind]] = {cls.name: cls for cls in (Chat, ShareGPT, Alpaca, OpenOrca, Template)}
"""Every conversation kind by name, in the order ``auto`` tries them (``template`` only when asked for)."""
RECORD_KINDS = ("auto", "text", *KINDS)
"""What ``--record-kind`` takes."""



def kind_of(record: Container[str], kind: str, text_field: str) -> type[RecordKind] | None:
    """The conversation kind of ``record`` under ``--record-kind kind`` (None: plain text, ``text_field``)."""
    if kind == "text" or (kind == "auto" and text_field in record):
        return None
    if kind != "auto":
        return KINDS[kind]
    return next((k for k in KINDS.values() if k.detect(record)), None)


__all__ = ["KINDS", "PARTS", "RECORD_KINDS", "KindError", "RecordKind", "kind_of", "part_of", "template_fields",
           "text_of"]
