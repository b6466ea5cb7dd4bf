"""Chat records: ``{"messages": [{"role": "user", "content": ...}, {"role": "assistant", ...}]}`` (OpenAI and
Hugging Face chat format; a content given as a list of ``{"type": "text", "text": ...}`` parts is joined)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clusterclip.contract.record_kinds.base import KindError, RecordKind, Turn, checked


def _content(value: Any) -> Any:
    if isinstance(value, list):
        texts = [p.get("text") for p in value if isinstance(p, Mapping) and p.get("type") == "text"]
        if len(texts) != len(value) or not all(isinstance(t, str) for t in texts):
            raise KindError("a message's content list holds parts other than {'type': 'text', 'text': ...}")
        return "".join(texts)
    return value


class Chat(RecordKind):
    name = "chat"
    SUMMARY = "messages: a list of {role, content}"
    FIELDS = ("messages",)

    @classmethod
    def turns(cls, record: Mapping[str, Any], template: str | None) -> list[Turn]:
        messages = record.get("messages")
        if not isinstance(messages, list):
            raise KindError(f"field 'messages' is {type(messages).__name__}, expected a list of {{role, content}}")
        turns = []
        for i, m in enumerate(messages):
            if not isinstance(m, Mapping) or "role" not in m or "content" not in m:
                raise KindError(f"messages[{i}] is not an object with 'role' and 'content'")
            turns.append((m["role"], _content(m["content"])))
        return checked(turns, "messages")
