"""What every record kind shares: a conversation as ``(role, content)`` turns, its text, and its parts.

A record kind says how a record of named fields becomes a document: plain text (one string field), or a
conversation in one of the instruction/chat layouts (:mod:`clusterclip.contract.record_kinds`). A kind only parses; the
bad-record policy is :mod:`clusterclip.corpus.records`', which turns a :class:`KindError` into the one-line error
naming the file and line (or skips and counts the record).
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from typing import Any, ClassVar

ROLES = ("system", "user", "assistant")
"""The roles of a turn, as the OpenAI/Hugging Face chat format names them (tool turns are refused)."""
PARTS = ("all", "prompt", "response", "last-user")
"""What of a conversation a consumer may take: every turn, the turns before the assistant's (system and user),
the assistant's turns, or the last user turn."""
Turn = tuple[str, str]


class KindError(ValueError):
    """A record that its kind cannot read: the message says what is wrong (no file or line: the caller adds them)."""


class RecordKind:
    """A record kind. Subclasses set ``name`` (``--record-kind``), ``SUMMARY`` (its help) and ``FIELDS`` (the
    fields that identify it for ``--record-kind auto``), and define :meth:`turns`. Kinds are never instantiated."""

    name: ClassVar[str]
    SUMMARY: ClassVar[str] = ""
    FIELDS: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def detect(cls, record: Container[str]) -> bool:
        """Whether ``record`` (a record, or the column names of a file) has this kind's fields (``auto`` takes the first
        kind that does)."""
        return bool(cls.FIELDS) and all(f in record for f in cls.FIELDS)

    @classmethod
    def turns(cls, record: Mapping[str, Any], template: str | None) -> list[Turn]:
        """The record as turns; raises :class:`KindError` for a record of this kind that is not valid."""
        raise NotImplementedError


def text_of(turns: Sequence[Turn]) -> str:
    """The document text of a conversation: its turns' contents, a blank line apart (what is embedded with
    ``--embed-part all``, as the ClusterClip authors embed prompt and output)."""
    return "\n\n".join(content for _, content in turns)


def part_of(turns: Sequence[Turn], part: str) -> str:
    """One part of a conversation (:data:`PARTS`); empty when it has none (a conversation without a system or
    user turn has no prompt)."""
    if part == "all":
        return text_of(turns)
    if part == "prompt":
        return text_of([t for t in turns if t[0] != "assistant"])
    if part == "response":
        return text_of([t for t in turns if t[0] == "assistant"])
    if part == "last-user":
        users = [t for t in turns if t[0] == "user"]
        return users[-1][1] if users else ""
    raise KindError(f"no part {part!r}; parts are {', '.join(PARTS)}")


def checked(turns: list[Turn], where: str) -> list[Turn]:
    """``turns`` once every role is known and every content a non-empty string, with an assistant turn."""
    if not turns:
        raise KindError(f"{where} holds no turn")
    for i, (role, content) in enumerate(turns):
        if role not in ROLES:
            raise KindError(f"{where} turn {i} has role {role!r}; roles are {', '.join(ROLES)}")
        if not isinstance(content, str):
            raise KindError(f"{where} turn {i} ({role}) has {type(content).__name__} content, expected a string")
        if not content.strip():
            raise KindError(f"{where} turn {i} ({role}) is empty")
    if not any(role == "assistant" for role, _ in turns):
        raise KindError(f"{where} has no assistant turn: nothing to learn from")
    return turns


def field_text(record: Mapping[str, Any], name: str, required: bool = True) -> str:
    """A string field of the record (absent or null: empty unless ``required``)."""
    value = record.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        what = "missing" if value is None else f"{type(value).__name__}, expected a string"
        raise KindError(f"field {name!r} is {what}")
    return value
