"""The export's contract: its files and record (``export.json``), and what an export is, read back on the
trainer's side: its plan identity, in ``export.json`` and in the
format's own metadata, and the check that refuses an export of another plan than a training state expects.

Each export carries a **stream identity**: the identity of the sequence of rows it holds. Unpacked, row
``i`` is plan position ``i``, so it is the plan's identity (the one ``ClusterClipSampler`` states carry: a
state saved while reading the corpus through the plan resumes on the export and back). Packed
(``--seq-len``), rows are samples cut from the token stream, so it is a hash of the plan's identity, the
tokenizer, ``--append-eos``, ``--seq-len`` and ``--pad-to-multiple`` (the pad rows are part of the stream).
A ``--blend`` export holds no stream (one source per cluster, blended by the trainer): its identity is a hash
of the plan's identity, the tokenizer and ``blend``, so no training state of a stream matches it.

The identity is written into each format's own metadata, so a folder copied without its ``export.json``
still says what it holds: Parquet (schema metadata key ``clusterclip``), ``hf`` (``dataset_info.json``: key
``clusterclip``, and the ``description``), litdata and MDS (``index.json``: key ``clusterclip``). JSONL and
Megatron's ``.bin``/``.idx`` have no metadata: ``export.json`` is their record.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from clusterclip.errors import ClusterClipError
from clusterclip.store import config_hash, load_json
from clusterclip.store.record import RecordedConfig, RecordError, StageRecord, later
from clusterclip.store.replica import local_path

EXPORT_STAGE = "export"
"""The one stage of an export folder (a run directory of its own); its record is :data:`EXPORT_MANIFEST`."""
EXPORT_MANIFEST = "export.json"
"""Written last by ``clusterclip export`` into its output folder (not the run directory): identity and files."""
EXPORT_STAGING = ".partial"
"""Where ``clusterclip export`` writes before moving the files into its output folder (a killed export's)."""
EXPORT_IDENTITY = "identity.json"
"""In ``EXPORT_STAGING``: the identity (plan, hash, format, tokenizer) of the export being written."""
META_KEY = "clusterclip"
"""The key of the export's identity in each format's own metadata."""
SCHEMA_METADATA = "(schema)"
"""Where a format of shards with a schema (Parquet) writes the identity: into each shard's schema metadata."""
FORMAT_METADATA = {"parquet": SCHEMA_METADATA, "hf": "dataset_info.json", "litdata": "index.json",
                   "mds": "index.json"}
"""Where each format writes the identity under :data:`META_KEY` (a JSON file of the folder, or
:data:`SCHEMA_METADATA`); a format not listed writes none. The fact is the writer's (each ``Writer`` class declares
it as ``METADATA`` and writes there); this copy is what the reader needs without importing the writers, which stand
above this floor (trainers read exports with the light contract only), and a test checks it against every writer
of the registry."""


def export_shard(i: int, fmt: str) -> str:
    """The ``i``-th shard of ``clusterclip export`` in format ``fmt`` (``jsonl`` or ``parquet``)."""
    return f"part-{i:05d}.{fmt}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExportSettings(RecordedConfig):
    """``export.json``'s ``config``: the export's settings as ``clusterclip export`` writes them (its ``ExportConfig``
    without ``workers``, which changes how, not what), then the tokenizer file's SHA-256. Settings added after the
    first typed export (2026-12-05) are optional, with the value exports written before them had; the stage writes
    ``keep_record``, ``assistant_only_loss`` and ``blend`` only when on, so an export that does not use them keeps
    the settings (and the record) it had. ``ExportConfig.from_recorded`` builds the exporter's settings from
    them."""

    WHAT: ClassVar[str] = "the export settings"

    fmt: str
    shard_size: int
    memory_mb: int
    tokenizer: str | None
    append_eos: bool
    seq_len: int | None
    pad_to_multiple: int | None = later(None, always=True)
    """Added 2026-12-05 (``--pad-to-multiple``): None in earlier exports (no pad rows; :func:`stream_identity`
    assumes the same of an identity without it). Written every time since, null when unset."""
    keep_record: bool = later(False)
    """Added 2026-12-07 (``--keep-record``): written (True) only when the export keeps each input record's fields.
    Written after ``blend`` when it was implied (a corpus of conversations, no ``--keep-record``), so such a
    record written back from these settings names it earlier (the hash, over sorted keys, is the same)."""
    assistant_only_loss: bool = later(False)
    """Added 2026-12-07 (``--assistant-only-loss``): written (True) only when on."""
    blend: bool = later(False)
    """Added 2026-12-05 (``--blend``): written (True) only for a blend export."""
    tokenizer_sha256: str | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExportRecord(StageRecord):
    """``export.json``. ``identity`` names the plan (its name, SHA-256 and identity), the format and the
    tokenizer; ``stream_identity`` the rows (see the module docstring); ``files`` every file written, in
    order; the counts say what went in. ``blend`` holds the sources and weights of a ``--blend`` export."""

    NAME: ClassVar[str] = EXPORT_STAGE

    config: ExportSettings
    identity: dict[str, Any]
    stream_identity: str
    run_dir: str
    rows: int
    columns: list[str]
    documents: int
    dropped_tokens: int
    pad_rows: int
    corpus_reads: int
    buckets: int
    files: list[str]
    blend: dict[str, Any] | None = None
    content_hash: str | None = None
    tiers: list[str] | None = None
    """A plan over strata: the label of each value of the ``tier`` column."""

    def edited(self) -> bool:
        """Whether the fields that say what the export holds were changed since it was written (exports written
        before ``content_hash`` existed cannot tell)."""
        return self.content_hash is not None and self.content_hash != content_hash(dataclasses.asdict(self))


CONTENT_FIELDS = ("identity", "stream_identity", "rows", "columns", "documents", "dropped_tokens", "pad_rows", "files",
                  "blend")
"""What ``content_hash`` covers: the fields a trainer trusts (an edited row count or identity is refused)."""


def content_hash(fields: Mapping[str, Any]) -> str:
    """The ``content_hash`` of an export record with these fields (:data:`CONTENT_FIELDS`)."""
    return config_hash({name: fields.get(name) for name in CONTENT_FIELDS})


class ExportMismatchError(ClusterClipError):
    """An export that is not the one a training state or a caller expects (another plan, damaged metadata)."""


def stream_identity(identity: Mapping[str, Any]) -> str:
    """The identity of the rows an export of ``identity`` holds (see the module docstring)."""
    plan = str(identity["plan_identity"])
    blend = bool(identity.get("blend"))
    if identity.get("seq_len") is None and identity.get("pad_to_multiple") is None and not blend:
        return plan
    tokenizer = identity.get("tokenizer") or {}
    key = {"plan_identity": plan, "tokenizer": tokenizer.get("sha256"), "eos_id": tokenizer.get("eos_id"),
           "append_eos": bool(identity.get("append_eos")), "seq_len": identity.get("seq_len"),
           "pad_to_multiple": identity.get("pad_to_multiple"), **({"blend": True} if blend else {})}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]


def metadata(identity: Mapping[str, Any]) -> dict[str, Any]:
    """What goes into the format's own metadata under :data:`META_KEY`."""
    return {"plan": identity["plan"], "plan_identity": identity["plan_identity"],
            "stream_identity": stream_identity(identity), "format": identity["format"],
            "seq_len": identity.get("seq_len"), "pad_to_multiple": identity.get("pad_to_multiple")}


@dataclass(frozen=True)
class ExportInfo:
    """An export folder as its ``export.json`` describes it (checked against the format's own metadata)."""

    folder: Path
    plan: str
    plan_identity: str
    stream_identity: str
    format: str
    rows: int
    pad_rows: int
    seq_len: int | None
    record: ExportRecord
    blend: bool = False
    """A ``--blend`` export: one source per cluster and the blend files, no stream (``record["blend"]``)."""


def _format_metadata(folder: Path, fmt: str, files: list[str]) -> dict[str, Any] | None:
    """The identity stored in the format's own files, or None for formats without metadata."""
    where = FORMAT_METADATA.get(fmt)
    if where == SCHEMA_METADATA:
        import pyarrow.parquet as pq

        from clusterclip.store.paths import source

        first = sorted(f for f in files if f.endswith(".parquet"))[:1]
        raw = (pq.read_schema(source(folder / first[0])).metadata or {}).get(META_KEY.encode()) if first else None
        return json.loads(raw) if raw else {}
    if where is None:
        return None
    found = load_json(folder / where)
    return found.get(META_KEY, {}) if isinstance(found, dict) else {}


def read_export(folder: str | os.PathLike[str]) -> ExportInfo:
    """The export in ``folder``: its ``export.json``, checked against the format's own metadata.

    Refused (:class:`ExportMismatchError`, one line): a folder without ``export.json`` (not an export, or a
    killed one: run the export again), a record without a plan identity (an older version's export), and
    metadata that names another stream than ``export.json`` (files of two exports mixed). ``folder`` may be the
    ``export.json`` itself, or a link to it: the export is the folder the record really lies in. It may be a URL of
    object storage: then only ``export.json`` and the format's metadata are fetched, sizes are the store's.
    """
    from clusterclip.store.paths import is_remote, kind

    folder = local_path(folder)
    if kind(folder) == "file":
        folder = folder.parent if is_remote(folder) else folder.resolve().parent
    path = folder / EXPORT_MANIFEST
    if kind(path) != "file":
        killed = kind(folder / EXPORT_STAGING) is not None
        partial = " (a killed export: run the same `clusterclip export` again)" if killed else ""
        raise ExportMismatchError(f"{folder}: no {EXPORT_MANIFEST}, not a finished clusterclip export{partial}")
    raw = load_json(path)
    identity = raw.get("identity") if isinstance(raw, dict) else None
    if not isinstance(identity, dict) or not identity.get("plan_identity"):
        raise ExportMismatchError(f"{path}: records no plan identity (an export of an older version); export the "
                                  "plan again with `clusterclip export`")
    try:
        record = ExportRecord.from_json(raw, str(path), "export the plan again with `clusterclip export`")
    except RecordError as exc:
        raise ExportMismatchError(str(exc)) from None
    if record.edited():
        raise ExportMismatchError(edited_message(path))
    info = ExportInfo(folder, str(identity["plan"]), str(identity["plan_identity"]), stream_identity(identity),
                      str(identity["format"]), record.rows, record.pad_rows,
                      identity.get("seq_len"), record, bool(identity.get("blend")))
    _check_sizes(folder, record)
    meta = _format_metadata(folder, info.format, record.files)
    if meta is not None and meta.get("stream_identity") != info.stream_identity:
        raise ExportMismatchError(
            f"{folder}: the {info.format} metadata names stream {meta.get('stream_identity')!r} (plan "
            f"{meta.get('plan')!r}) but {EXPORT_MANIFEST} names {info.stream_identity!r} (plan {info.plan!r}): "
            "files of two exports are mixed; export the plan again into an empty folder")
    return info


def file_sizes(folder: Path, record: ExportRecord,
               rels: Iterable[str]) -> Iterator[tuple[Path, int | None, int | None]]:
    """For each exported file ``rels`` of ``folder``: its path, its size now (None: missing) and the size
    ``export.json`` records (None: none recorded). A stat each, no reading."""
    for rel in rels:
        path = folder / rel
        yield path, _size(path), (record.artifacts.get(rel) or {}).get("size")


def _size(path: Path) -> int | None:
    """The size of a file (or object), None when there is none."""
    from clusterclip.store.paths import kind, size_time

    if kind(path) != "file":
        return None
    return size_time(path)[0]


def edited_message(path: Path) -> str:
    return (f"{path}: its rows, identity or files were changed since the export (its content_hash does not match "
            "them); export the plan again")


def _check_sizes(folder: Path, record: ExportRecord) -> None:
    """Every exported file still has the size ``export.json`` records: a row appended to a part, a truncated shard
    or a missing file is refused before a trainer reads it, not found mid-epoch."""
    for path, got, want in file_sizes(folder, record, record.files):
        if want is not None and got != want:
            found = "is missing" if got is None else f"has {got:,} bytes"
            raise ExportMismatchError(f"{path} {found}, {EXPORT_MANIFEST} records {want:,}: it changed since the "
                                      "export; export the plan again")


def planned_stream(folder: str | os.PathLike[str]) -> ExportInfo:
    """The export in ``folder`` (:func:`read_export`), refused when it is a ``--blend`` export: one source per
    cluster, blended by the trainer, holds no planned stream to sample or resume on."""
    info = read_export(folder)
    if info.blend:
        raise ExportMismatchError(f"{folder} is a --blend export (one source per cluster, blended by the trainer): "
                                  "it holds no planned stream to sample or resume on; export the plan without "
                                  "--blend")
    return info


def check_export(folder: str | os.PathLike[str], state: Mapping[str, Any] | str) -> ExportInfo:
    """The export in ``folder``, refused unless it holds the stream ``state`` was saved on.

    ``state``: a ``ClusterClipSampler`` state (its ``plan_identity``) or an identity string. A state saved
    while reading the corpus through the plan matches an unpacked export of that plan.
    """
    info = planned_stream(folder)
    expected = state if isinstance(state, str) else state.get("plan_identity")
    if not isinstance(expected, str) or not expected:
        raise ExportMismatchError("the training state names no plan identity (saved by an older version?); "
                                  "cannot check which export it belongs to")
    if expected != info.stream_identity:
        plan = "" if isinstance(state, str) else f" of plan {state.get('plan')!r}"
        raise ExportMismatchError(
            f"{folder} holds the stream {info.stream_identity[:12]} of plan {info.plan!r}, but the training state "
            f"was saved on stream {expected[:12]}{plan}: resume on the export of the plan it was saved with")
    return info


__all__ = ["EXPORT_IDENTITY", "EXPORT_MANIFEST", "EXPORT_STAGE", "EXPORT_STAGING", "META_KEY", "ExportInfo",
           "ExportMismatchError", "ExportRecord", "ExportSettings", "check_export", "export_shard", "file_sizes",
           "metadata", "planned_stream", "read_export", "stream_identity"]
