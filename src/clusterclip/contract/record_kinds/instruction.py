"""Instruction records: Alpaca's ``instruction``/``input``/``output`` and OpenOrca's
``system_prompt``/``question``/``response``, each read as a conversation (system, user, assistant)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clusterclip.contract.record_kinds.base import RecordKind, Turn, checked, field_text


class Alpaca(RecordKind):
    name = "alpaca"
    SUMMARY = "instruction, input (optional), output"
    FIELDS = ("instruction", "output")

    @classmethod
    def turns(cls, record: Mapping[str, Any], template: str | None) -> list[Turn]:
        prompt = field_text(record, "instruction")
        extra = field_text(record, "input", required=False)
        return checked([("user", f"{prompt}\n\n{extra}" if extra.strip() else prompt),
                        ("assistant", field_text(record, "output"))], "the record")


class OpenOrca(RecordKind):
    name = "openorca"
    SUMMARY = "system_prompt (optional), question, response"
    FIELDS = ("question", "response")

    @classmethod
    def turns(cls, record: Mapping[str, Any], template: str | None) -> list[Turn]:
        system = field_text(record, "system_prompt", required=False)
        turns = [("system", system)] if system.strip() else []
        turns += [("user", field_text(record, "question")), ("assistant", field_text(record, "response"))]
        return checked(turns, "the record")
