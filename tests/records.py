"""Stage records for hand-made run directories in tests: the fields (and settings) a test gives, every other field
(and setting) its stage's contract requires filled with an empty value of its type, so the records pass the strict
readers."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from typing import Any

from clusterclip.contract.stages import contract_of
from clusterclip.store import RunDir

EMPTY = {int: 0, float: 0.0, str: "", bool: False, list: [], dict: {}}


def _empty(hint: Any) -> Any:
    origin = typing.get_origin(hint) or hint
    return EMPTY.get(origin)


def contract_fields(stage: str, given: dict[str, Any]) -> dict[str, Any]:
    """``given`` plus every required own field of ``stage``'s contract that it lacks (empty values)."""
    try:
        cls = contract_of(stage)
    except KeyError:
        return given
    hints = typing.get_type_hints(cls)
    base = {f.name for f in dataclasses.fields(cls.__mro__[-2])}
    missing = {f.name: _empty(hints[f.name]) for f in dataclasses.fields(cls)
               if f.name not in base and f.name not in given and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING}
    return {**missing, **given}


def contract_settings(stage: str, given: dict[str, Any]) -> dict[str, Any]:
    """``given`` plus every required setting of ``stage``'s recorded settings that it lacks (empty values), in the
    order the contract declares them."""
    try:
        settings = typing.get_type_hints(contract_of(stage))["config"]
    except KeyError:
        return given
    if not dataclasses.is_dataclass(settings):
        return given
    hints = typing.get_type_hints(settings)
    required = [f.name for f in dataclasses.fields(settings) if f.default is dataclasses.MISSING]
    filled = {**{n: _empty(hints[n]) for n in required if n not in given}, **given}
    order = [f.name for f in dataclasses.fields(settings)]
    return dict(sorted(filled.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))


def write_record(run: RunDir, stage: str, config: dict[str, Any], inputs_hash: str, artifacts: Sequence[str],
                 seconds: float = 0.0, **fields: Any) -> dict[str, Any]:
    """:meth:`RunDir.write_record` with the contract's required fields and settings filled in."""
    return run.write_record(stage, contract_settings(stage, config), inputs_hash, artifacts, seconds,
                            **contract_fields(stage, fields))
