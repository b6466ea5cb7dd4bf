"""ShareGPT records: ``{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}]}``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clusterclip.contract.record_kinds.base import KindError, RecordKind, Turn, checked

ROLE_OF = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant",
           "bard": "assistant", "bing": "assistant", "system": "system"}
"""ShareGPT's speakers and the chat roles they are."""


class ShareGPT(RecordKind):
    name = "sharegpt"
    SUMMARY = "conversations: a list of {from, value}"
    FIELDS = ("conversations",)

    @classmethod
    def turns(cls, record: Mapping[str, Any], template: str | None) -> list[Turn]:
        conv = record.get("conversations")
        if not isinstance(conv, list):
            raise KindError(f"field 'conversations' is {type(conv).__name__}, expected a list of {{from, value}}")
        turns = []
        for i, m in enumerate(conv):
            if not isinstance(m, Mapping) or "from" not in m or "value" not in m:
                raise KindError(f"conversations[{i}] is not an object with 'from' and 'value'")
            speaker = m["from"]
            if speaker not in ROLE_OF:
                raise KindError(f"conversations[{i}] is from {speaker!r}; speakers are {', '.join(ROLE_OF)}")
            turns.append((ROLE_OF[speaker], m["value"]))
        return checked(turns, "conversations")
