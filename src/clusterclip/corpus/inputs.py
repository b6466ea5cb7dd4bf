"""What the user's inputs are: files and formats in document order, their fingerprint, and work units.

A work unit is a piece of the input that one worker reads on its own (:class:`WorkUnit`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterclip.corpus import limits
from clusterclip.corpus.hf import has_hf_metadata, is_hf_dataset_dir
from clusterclip.corpus.parquet import row_group_runs
from clusterclip.corpus.records import is_unicode, unreadable
from clusterclip.errors import ClusterClipError
from clusterclip.store import file_digest

JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
COMPRESSED = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}


def files_under(path: Path) -> list[Path]:
    """Every file below folder ``path`` (symbolic links to folders not followed), sorted; a folder that
    cannot be listed raises instead of being skipped, so no document goes missing without a word."""
    def fail(exc: OSError) -> None:
        raise unreadable(Path(exc.filename or path), exc)

    files = [Path(root, name) for root, _, names in os.walk(path, onerror=fail) for name in names]
    return sorted(p for p in files if p.is_file())


def format_of(path: Path) -> str:
    """The format of an input file by its name: ``jsonl``, ``jsonl+gzip``, ``jsonl+zstd``, ``parquet`` or
    ``txt``; any other name raises."""
    name = path.name.lower()
    for suffix, codec in COMPRESSED.items():
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            if any(name.endswith(s) for s in JSONL_SUFFIXES):
                return f"jsonl+{codec}"
            raise ClusterClipError(f"{path}: compressed input must be JSON lines (.jsonl{suffix})")
    if any(name.endswith(s) for s in JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith(".txt"):
        return "txt"
    raise ClusterClipError(
        f"{path}: unknown input format; expected .jsonl[.gz|.zst], .parquet, .txt, a folder of .txt "
        "files or a Hugging Face dataset folder (save_to_disk)"
    )


def expand_inputs(inputs: Sequence[str | os.PathLike[str]]) -> list[tuple[Path, str]]:
    """Resolve user inputs into ``(path, format)`` pairs in a deterministic order.

    A folder is a Hugging Face dataset when it holds ``save_to_disk`` metadata; otherwise its ``.txt``
    files (recursively) are documents, or, lacking those, its JSONL/Parquet files are read.
    """
    out: list[tuple[Path, str]] = []
    for raw in inputs:
        path = Path(raw)
        if not path.exists():
            raise ClusterClipError(f"{path}: no such file or directory")
        if not is_unicode(str(path)):
            raise ClusterClipError(f"{os.fsencode(path)!r}: path is not valid UTF-8; rename it")
        if path.is_dir() and is_hf_dataset_dir(path):
            out.append((path, "hf"))
        elif path.is_dir():
            out.extend(_folder_inputs(path))
        else:
            out.append((path, format_of(path)))
    return out


def _folder_inputs(path: Path) -> list[tuple[Path, str]]:
    """A folder that is no Hugging Face dataset: itself when it holds ``.txt`` files (recursively), else its
    JSONL and Parquet files."""
    files = [p for p in files_under(path) if not p.name.startswith(".")]
    if any(p.suffix.lower() == ".txt" for p in files):
        return [(path, "txtdir")]
    if has_hf_metadata(path):
        raise ClusterClipError(f"{path}: looks like a Hugging Face dataset folder (save_to_disk metadata) "
                               "but holds no .arrow data files; save it again with save_to_disk")
    data = []
    for p in files:
        try:
            data.append((p, format_of(p)))
        except ClusterClipError:
            continue
    if not data:
        raise ClusterClipError(f"{path}: folder holds no .txt, .jsonl or .parquet files")
    return data


def inputs_fingerprint(inputs: Sequence[tuple[Path, str]]) -> list[dict[str, Any]]:
    """Path, size and modification time of every input file: what staleness checks compare."""
    entries = []
    for path, fmt in inputs:
        files = files_under(path) if path.is_dir() else [path]
        for p in files:
            st = p.stat()
            entries.append({"path": str(p.resolve()), "format": fmt, "size": st.st_size,
                            "mtime_ns": st.st_mtime_ns})
    return entries


def content_hashes(fingerprint: Sequence[dict[str, Any]],
                   known: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """The fingerprint entries with the SHA-256 of each file's bytes (``sha256``, streamed): what identifies
    an input whatever its name or modification time. A ``known`` entry (a record's) with the same path,
    size and modification time lends its hash, so unchanged inputs are not read again."""
    seen = {(k.get("path"), k.get("size"), k.get("mtime_ns")): k["sha256"] for k in known if k.get("sha256")}
    out = []
    for entry in fingerprint:
        digest = seen.get((entry["path"], entry["size"], entry["mtime_ns"]))
        if digest is None:
            try:
                digest = file_digest(entry["path"])
            except OSError as exc:
                raise unreadable(Path(entry["path"]), exc) from None
        out.append({**entry, "sha256": digest})
    return out


@dataclass(frozen=True)
class WorkUnit:
    """A piece of the input that one worker reads on its own: a file, a Hugging Face dataset, a run of
    up to ``limits.TXT_FILES_PER_UNIT`` files of a ``.txt`` folder (``files``, ids relative to ``path``), the
    row groups ``[first, stop)`` of a large Parquet file (``row_groups``), or the lines starting in a
    byte range of a large plain JSONL file (``byte_range``; ``lines_before``: newlines before it)."""

    path: Path
    fmt: str
    files: tuple[Path, ...] = ()
    row_groups: tuple[int, int] | None = None
    byte_range: tuple[int, int] | None = None
    lines_before: int = 0


def work_units(inputs: Sequence[tuple[Path, str]], split: bool = False) -> list[WorkUnit]:
    """Split resolved inputs into work units, in document order. With ``split``, a Parquet file of more
    than ``limits.PARQUET_ROWS_PER_UNIT`` rows becomes one unit per run of row groups holding about that many
    (reading its footer here; a file whose footer cannot be read stays whole, for the reader to report),
    and a plain JSONL file of more than ``limits.JSONL_BYTES_PER_UNIT`` bytes one unit per byte range of that
    size, whose ``lines_before`` :func:`number_lines` fills in."""
    units: list[WorkUnit] = []
    per_txt, per_jsonl = limits.TXT_FILES_PER_UNIT, limits.JSONL_BYTES_PER_UNIT
    for path, fmt in inputs:
        if fmt == "txtdir":
            files = [p for p in files_under(path) if p.name.endswith(".txt")]
            units.extend(WorkUnit(path, fmt, tuple(files[i:i + per_txt])) for i in range(0, len(files), per_txt))
        elif fmt == "parquet" and split:
            units.extend(WorkUnit(path, fmt, row_groups=r)
                         for r in row_group_runs(path, limits.PARQUET_ROWS_PER_UNIT))
        elif fmt == "jsonl" and split and (size := path.stat().st_size) > per_jsonl:
            units.extend(WorkUnit(path, fmt, byte_range=(a, min(a + per_jsonl, size)))
                         for a in range(0, size, per_jsonl))
        else:
            units.append(WorkUnit(path, fmt))
    return units


def number_lines(units: Sequence[WorkUnit], newline_counts: Sequence[int]) -> list[WorkUnit]:
    """Set ``lines_before`` of byte-range units from the newlines in each range (``newline_counts``, one
    per byte-range unit, in order), so ids and error locations keep the file's line numbers."""
    out: list[WorkUnit] = []
    counts = iter(newline_counts)
    seen: dict[Path, int] = {}
    for unit in units:
        if unit.byte_range is not None:
            before = seen.get(unit.path, 0)
            unit = dataclasses.replace(unit, lines_before=before)
            seen[unit.path] = before + next(counts)
        out.append(unit)
    return out
