"""A user's template: ``--text-template "{question}\\n{response}"`` fills the record's fields into one text."""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Any

from clusterclip.contract.record_kinds.base import KindError, RecordKind, Turn


def template_fields(template: str) -> list[str]:
    """The field names a template fills in (``{name}``), refusing a template that does not parse or names none."""
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as exc:
        raise KindError(f"template {template!r} does not parse ({exc}); write fields as {{name}}, braces as "
                        "{{ and }}") from None
    if not names or any(not n.isidentifier() for n in names):
        raise KindError(f"template {template!r} must name fields as {{name}} (at least one, no format specs)")
    return names


class Template(RecordKind):
    name = "template"
    SUMMARY = "--text-template over the record's fields (plain text)"

    @classmethod
    def turns(cls, record: Mapping[str, Any], template: str | None) -> list[Turn]:
        if template is None:
            raise KindError("--record-kind template needs --text-template")
        values = {}
        for name in template_fields(template):
            value = record.get(name)
            if value is None or isinstance(value, (dict, list)):
                raise KindError(f"template field {name!r} is {'missing' if value is None else type(value).__name__}")
            values[name] = value
        text = template.format_map(values)
        if not text.strip():
            raise KindError("the template's text is empty")
        return [("document", text)]
