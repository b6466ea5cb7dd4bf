"""Typed JSON records that are no stage record (the results of ``experiment`` and ``tune``, ``drift.json``): a
dataclass per file, read as strictly as a stage record.

:meth:`JsonRecord.from_json` checks the version first (a file written by a newer clusterclip is refused rather
than half understood; a file without the version field is :attr:`~JsonRecord.UNVERSIONED`), then every field
(:func:`clusterclip.store.record.checked_fields`: an unknown field, a missing required one or a value of the
wrong type is one :class:`~clusterclip.store.record.RecordError` line naming the file, the field and the fix).
Fields with a default are optional. :meth:`JsonRecord.write` saves a writer's dictionary as it is (its bytes
stay the writer's) and reads it back as the record, so a writer and its readers cannot drift apart.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from clusterclip.store import load_json, save_json
from clusterclip.store.record import RecordError, checked_fields, fields_json

J = TypeVar("J", bound="JsonRecord")


@dataclasses.dataclass(frozen=True, kw_only=True)
class JsonRecord:
    """A JSON file's fields; subclasses declare them (in the order the writer writes them) and the class facts."""

    WHAT: ClassVar[str] = "record"
    """What the file is, for messages (``"the drift report"``)."""
    VERSION_FIELD: ClassVar[str] = "version"
    VERSIONS: ClassVar[tuple[int, ...]] = (1,)
    """The versions this clusterclip reads."""
    UNVERSIONED: ClassVar[int | None] = None
    """The version of a file without :attr:`VERSION_FIELD` (None: such a file is refused)."""
    FIX: ClassVar[str] = "rebuild it"

    @classmethod
    def from_json(cls: type[J], obj: Any, where: str = "", fix: str = "") -> J:
        """The record ``obj`` (a parsed file), checked field by field; ``where`` names it, ``fix`` says what to do."""
        where, fix = where or cls.WHAT, fix or cls.FIX
        if not isinstance(obj, Mapping):
            raise RecordError(f"{where}: not a JSON object; {fix}")
        version = obj.get(cls.VERSION_FIELD, cls.UNVERSIONED)
        if version not in cls.VERSIONS or isinstance(version, bool):
            raise RecordError(f"{where}: {cls.VERSION_FIELD} {version!r} is not one this clusterclip reads "
                              f"({', '.join(map(str, cls.VERSIONS))}; written by another version); {fix}")
        return cls(**checked_fields(cls, obj, where, fix, cls.WHAT))

    @classmethod
    def read(cls: type[J], path: Path, fix: str = "") -> J:
        """The record in the file ``path`` (an unreadable file is the same one line as a wrong field)."""
        try:
            obj = load_json(path)
        except (OSError, ValueError) as exc:
            raise RecordError(f"{path}: unreadable ({exc}); {fix or cls.FIX}") from None
        return cls.from_json(obj, str(path), fix)

    @classmethod
    def write(cls: type[J], path: Path, obj: Mapping[str, Any]) -> J:
        """Save the writer's ``obj`` at ``path`` (atomically, as it is) and read it back as this record, so that
        a writer that drifts from its readers fails where it writes."""
        save_json(path, obj)
        return cls.read(path, "a bug in its writer: report it")

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON object: every field in declaration order, optional ones only when set."""
        return fields_json(self)
