"""Typed stage records: the fields every record holds, and a strict reader for each stage's own fields.

A stage's contract (``clusterclip.<stage>.contract``) declares its record as a subclass of :class:`StageRecord`
whose dataclass fields after the bookkeeping ones are the stage's own. :meth:`StageRecord.from_json` accepts
exactly those fields: an unknown field, a missing required one, a value of the wrong type or a
``format_version`` this version does not read is one :class:`RecordError` line naming the record, the field
and the fix (a record written by a newer clusterclip is refused rather than half understood). Fields with a
default are optional (written only by some builds, e.g. after ``clusterclip add``); :meth:`to_json` omits an
optional field that is None, so a record read and written back has the bytes it had.

Models: MosaicML streaming's ``Reader.from_json`` (one reader per format version, unknown keys refused) and
Megatron's ``IndexedDataset``, which owns the layout of its ``.idx`` file.
"""

from __future__ import annotations

import dataclasses
import logging
import types
import typing
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar, Union

from clusterclip.store.files import StaleArtifactError

if typing.TYPE_CHECKING:
    from clusterclip.store.rundir import RunDir

FORMAT_VERSIONS = (1, 2)
"""Record versions this clusterclip reads (:data:`clusterclip.store.rundir.FORMAT_VERSION` is the one it writes):
2 adds ``mtime_ns`` to every artifact."""

R = TypeVar("R", bound="StageRecord")
C = TypeVar("C", bound="RecordedConfig")
log = logging.getLogger(__name__)


class RecordError(StaleArtifactError):
    """A stage record that is not what its stage's contract declares (one line: the record, the field, the fix)."""


@dataclasses.dataclass(frozen=True)
class StageRecord:
    """The fields :func:`clusterclip.stages.run_stage` writes into every record; subclasses add the stage's own.

    ``config`` is the stage's settings as recorded (hashed into ``config_hash``); ``artifacts`` maps each file
    (relative to the run directory) to its size, modification time and SHA-256; ``upstream`` the output hash
    of every stage it was built from; ``command`` the command line that rebuilds it; ``grown_from`` the output
    hashes of the versions it extends after ``clusterclip add``.
    """

    NAME: ClassVar[str] = ""
    """The stage name (the record is ``<NAME>.json``; plans name each record ``plans/<name>/plan``)."""
    FALLBACK: ClassVar[tuple[str, ...]] = ()
    """The command line that builds the stage, for messages when no record names its own (``{run}`` stands for
    the run directory); empty: ``clusterclip <stage> {run}``."""
    UPSTREAM: ClassVar[tuple[str, ...]] = ()
    """The stages this one is built from (their :attr:`NAME`; one it reads only with some settings counts): the
    table of stages (:mod:`clusterclip.contract.stages`) is ordered by them, upstream first."""
    IN_PIPELINE: ClassVar[bool] = False
    """Built by ``clusterclip run``."""
    GROWN: ClassVar[bool] = False
    """Grown in place by ``clusterclip add`` (its record is kept in the add's journal, restored by ``--abort``)."""
    MANY: ClassVar[bool] = False
    """One stage per instance (a plan per folder, :meth:`instances`) rather than one per run directory."""

    stage: str
    format_version: int
    config: dict[str, Any]
    config_hash: str
    inputs_hash: str
    finished_at: str
    seconds: float
    upstream: dict[str, str]
    artifacts: dict[str, dict[str, Any]]
    command: list[str] | None = None
    grown_from: list[str] | None = None

    @classmethod
    def own_fields(cls) -> tuple[str, ...]:
        """The stage's own fields, in record order (those after the bookkeeping of :class:`StageRecord`)."""
        base = {f.name for f in dataclasses.fields(StageRecord)}
        return tuple(f.name for f in dataclasses.fields(cls) if f.name not in base)

    @classmethod
    def from_json(cls: type[R], obj: Any, where: str = "", fix: str = "rebuild the stage") -> R:
        """The record ``obj`` (a parsed ``<stage>.json``), checked field by field; ``where`` names it and
        ``fix`` says what to do in errors."""
        where = where or f"the {cls.NAME or 'stage'} record"
        if not isinstance(obj, Mapping):
            raise RecordError(f"{where}: not a JSON object; {fix}")
        version = obj.get("format_version")
        if version not in FORMAT_VERSIONS:
            raise RecordError(f"{where}: format_version {version!r} is not one this clusterclip reads "
                              f"({', '.join(map(str, FORMAT_VERSIONS))}; written by another version); {fix}")
        return cls(**checked_fields(cls, obj, where, fix, f"a {cls.NAME or 'stage'} record"))

    @classmethod
    def read(cls: type[R], run: RunDir, stage: str | None = None) -> R | None:
        """The record of ``stage`` (default :attr:`NAME`) in ``run``, or None when it has not finished."""
        stage = stage or cls.NAME
        rec = run.record(stage)
        return None if rec is None else cls._parse(run, stage, rec)

    @classmethod
    def require(cls: type[R], run: RunDir, stage: str | None = None, *, verify: bool = True,
                only: Collection[str] | None = None, current: bool = False) -> R:
        """The record of the finished ``stage`` (default :attr:`NAME`): its artifacts (or the ``only`` ones)
        checksum-verified with ``verify``; with ``current``, refused when it is stale
        (:meth:`RunDir.require_current <clusterclip.store.RunDir.require_current>`)."""
        stage = stage or cls.NAME
        rec = run.require_current(stage, verify=verify, only=only) if current else \
            run.require(stage, verify=verify, only=only, fallback=cls.FALLBACK)
        return cls._parse(run, stage, rec)

    @classmethod
    def previous(cls: type[R], run: RunDir, stage: str | None = None) -> R | None:
        """The record a re-run of ``stage`` compares against (:meth:`RunDir.previous_record
        <clusterclip.store.RunDir.previous_record>`): one that is corrupt or not of this contract counts as not
        finished, with a warning, so re-running the stage rebuilds it."""
        stage = stage or cls.NAME
        rec = run.previous_record(stage)
        if rec is None:
            return None
        try:
            return cls._parse(run, stage, rec)
        except RecordError as exc:
            log.warning("%s: rebuilding it", exc)
            return None

    @classmethod
    def instances(cls, run: RunDir) -> list[str]:
        """The finished stages of this kind in ``run``: ``[NAME]`` when its record is there (plans override:
        one stage per plan folder)."""
        return [cls.NAME] if run.record_path(cls.NAME).is_file() else []

    @classmethod
    def record_paths(cls, run: RunDir) -> list[Path]:
        """Where records of this kind are (or would be), to refuse one that is no regular file."""
        return [run.root / f"{cls.NAME}.json"]

    @classmethod
    def _parse(cls: type[R], run: RunDir, stage: str, rec: Mapping[str, Any]) -> R:
        return cls.from_json(rec, str(run.record_path(stage)),
                             f"rebuild it: `{run.rebuild_command(stage, None, force=True)}`")

    def to_json(self) -> dict[str, Any]:
        """The record as written: every field in declaration order, optional ones only when set."""
        return fields_json(self)

    def own(self) -> dict[str, Any]:
        """The stage's own fields that are set: what its build hands the stage runner (``Built.fields``)."""
        data = self.to_json()
        return {name: data[name] for name in self.own_fields() if name in data}

    def artifact_sha256(self, rel: str) -> str | None:
        """The recorded SHA-256 of artifact ``rel`` (None when it is not listed)."""
        meta = self.artifacts.get(rel)
        return meta.get("sha256") if isinstance(meta, Mapping) else None

    def lists(self, rels: Collection[str]) -> bool:
        """Whether every artifact of ``rels`` is listed in the record."""
        return all(rel in self.artifacts for rel in rels)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecordedConfig:
    """A stage's settings as its record holds them (the record's ``config``), typed: each stage's contract declares
    them in the order the stage writes them (``contract/<stage>.py``: ``PlanSettings``, ``CorpusSettings`` ...).

    The stage's own Config class validates names against registries above the contract floor (strategies,
    embedders, scorers); these do not, so a record is read without importing a stage, and the stage builds its
    Config from them (``PlanConfig.from_recorded``). :meth:`from_json` is as strict as the record (an unknown
    setting, a missing one, a value of the wrong type: one :class:`RecordError` line); :meth:`to_json` gives back
    the JSON the stage wrote, key for key (a setting with a default only when set), so a record read and written
    back keeps its bytes."""

    WHAT: ClassVar[str] = "settings"

    @classmethod
    def from_json(cls: type[C], obj: Any, where: str = "", fix: str = "rebuild the stage") -> C:
        """The settings ``obj`` (a record's parsed ``config``), checked setting by setting."""
        where = f"{where or 'a record'}: config"
        if not isinstance(obj, Mapping):
            raise RecordError(f"{where}: not a JSON object; {fix}")
        return cls(**checked_fields(cls, obj, where, fix, cls.WHAT))

    def to_json(self) -> dict[str, Any]:
        """The settings as the stage wrote them: declaration order, a setting with a default only when set."""
        return fields_json(self)


def later(default: Any, *, always: bool = False) -> Any:
    """A setting added after a record's first version: optional, ``default`` when a record lacks it (the value the
    code assumes for records written before it existed). Written back only when it is not ``default``, unless
    ``always`` (the stage now writes it every time, even as ``default``)."""
    return dataclasses.field(default=default, metadata={"unset": default, "always": always})


def _unset(f: dataclasses.Field[Any], value: Any) -> bool:
    """Whether an optional field holding ``value`` is left out of its JSON."""
    if _required(f) or f.metadata.get("always"):
        return False
    return value is None or ("unset" in f.metadata and type(value) is type(f.metadata["unset"])
                             and value == f.metadata["unset"])


def fields_json(obj: Any) -> dict[str, Any]:
    """The dataclass instance ``obj`` (a record, a record's settings) as its JSON: every field in declaration order,
    one with a default only when set (not None, nor its :func:`later` default), a typed piece (with a ``to_json``)
    as its JSON."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if _unset(f, value):
            continue
        out[f.name] = value.to_json() if hasattr(value, "to_json") else value
    return out


def checked_fields(cls: type, obj: Mapping[str, Any], where: str, fix: str, what: str) -> dict[str, Any]:
    """The fields of the dataclass ``cls`` that ``obj`` holds, in declaration order, once each is checked: an
    unknown field, a missing required one or a value of the wrong type (containers one level deep) is one
    :class:`RecordError` line naming ``where``, the field, ``what`` it is not and ``fix``. A field typed as a class
    with a ``from_json`` (a stage's recorded settings) is read through it."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(obj) - set(fields))
    missing = [n for n, f in fields.items() if n not in obj and _required(f)]
    if unknown or missing:
        found = "; ".join(p for p in (unknown and f"unknown field(s) {', '.join(unknown)}",
                                      missing and f"missing field(s) {', '.join(missing)}") if p)
        raise RecordError(f"{where}: {found}: not {what} of this clusterclip; {fix}")
    hints = _hints(cls)
    out: dict[str, Any] = {}
    for name, value in obj.items():
        read = getattr(hints[name], "from_json", None)
        if read is not None and isinstance(hints[name], type):
            value = read(value, where, fix)  # a typed piece (a record's settings) reads itself
        elif not _conforms(value, hints[name]):
            raise RecordError(f"{where}: field {name!r} is {type(value).__name__} {_short(value)}, not "
                              f"{_type_name(hints[name])}; {fix}")
        out[name] = value
    return {n: out[n] for n in fields if n in out}


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _conforms(value: Any, hint: Any) -> bool:
    """Whether a JSON value fits a field's annotation (containers checked one level deep)."""
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return any(_conforms(value, arm) for arm in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin in (list, tuple):
        args = typing.get_args(hint)
        # a tuple is a list not yet written (a record a build hands back before it is read from its JSON)
        return isinstance(value, (list, tuple)) and (not args or all(_conforms(v, args[0]) for v in value))
    if origin in (dict, Mapping):
        args = typing.get_args(hint)
        return isinstance(value, dict) and (not args or all(_conforms(v, args[1]) for v in value.values()))
    return isinstance(value, hint)


def _type_name(hint: Any) -> str:
    return str(hint).replace("typing.", "") if typing.get_origin(hint) else getattr(hint, "__name__", str(hint))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
