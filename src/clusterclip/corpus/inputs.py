"""What the user's inputs are: files and formats in document order, their fingerprint, and work units.

A work unit is a piece of the input that one worker reads on its own (:class:`WorkUnit`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clusterclip.corpus.format_base import Folder, WorkUnit, files_under
from clusterclip.corpus.formats import FORMATS, expected_inputs, file_format, folder_format, folder_problem
from clusterclip.corpus.records import is_unicode, unreadable
from clusterclip.errors import ClusterClipError
from clusterclip.store import file_digest
from clusterclip.store.paths import inputs_of, is_remote, kind, size_time
from clusterclip.store.replica import where


@dataclasses.dataclass(frozen=True)
class Inputs:
    """The user's inputs resolved once (:func:`resolve_inputs`): the names given, the files and formats in document
    order (:func:`expand_inputs`) and their fingerprint (:func:`inputs_fingerprint`), with what is derived from
    them (the content hashes, the work units), so a reader takes them in one direction, from here."""

    given: tuple[str | os.PathLike[str], ...]
    files: tuple[tuple[Path, str], ...]
    fingerprint: list[dict[str, Any]]

    def hashed(self, known: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
        """The fingerprint with each file's SHA-256 (:func:`content_hashes`; ``known`` entries lend theirs)."""
        return content_hashes(self.fingerprint, known)


def resolve_inputs(inputs: Sequence[str | os.PathLike[str]]) -> Inputs:
    """The inputs ``inputs`` resolved into files and formats, with their fingerprint (the files are not read)."""
    files = expand_inputs(inputs)
    return Inputs(tuple(inputs), tuple(files), inputs_fingerprint(files))


def format_of(path: Path) -> str:
    """The format of an input file by its name: the first of :data:`~clusterclip.corpus.formats.FORMATS`
    that reads it (``jsonl``, ``jsonl+gzip``, ``jsonl+zstd``, ``parquet``, ``txt``); any other name raises."""
    fmt = file_format(path)
    if fmt is None:
        raise ClusterClipError(f"{path}: unknown input format; expected {expected_inputs()}")
    return fmt


def expand_inputs(inputs: Sequence[str | os.PathLike[str]]) -> list[tuple[Path, str]]:
    """Resolve user inputs into ``(path, format)`` pairs in a deterministic order.

    A folder that a folder format reads (a Hugging Face dataset ``save_to_disk`` wrote, a folder of ``.txt``
    files, at any depth) is one input; any other folder's JSONL and Parquet files are read.
    """
    out: list[tuple[Path, str]] = []
    for path in (p for raw in inputs for p in inputs_of(raw)):
        found = kind(path)
        if found is None:
            raise ClusterClipError(f"{path}: no such file or directory")
        if not is_unicode(str(path)):
            raise ClusterClipError(f"{os.fsencode(path)!r}: path is not valid UTF-8; rename it")
        if found == "dir":
            folder = Folder(path)
            fmt = folder_format(folder)
            out.extend([(path, fmt)] if fmt is not None else _folder_inputs(folder))
        elif found != "file":
            raise ClusterClipError(f"{path}: not a regular file (a pipe, socket or device): inputs are read more than "
                                   "once (checksums, then documents); write it to a file first")
        else:
            out.append((path, format_of(path)))
    _refuse_repeats(out)
    return out


def _refuse_repeats(inputs: Sequence[tuple[Path, str]]) -> None:
    """One input file (or dataset folder) reached twice, by the same name, another name or a folder that holds it,
    would be read twice: every document in the corpus twice and drawable twice the cap. Refused in one line."""
    seen: dict[str, Path] = {}
    for path, _ in inputs:
        key = os.path.realpath(path)
        if key in seen:
            also = "" if seen[key] == path else f" (also as {seen[key]})"
            raise ClusterClipError(f"{path}: given twice{also}: its documents would be read twice; give each input "
                                   "once")
        seen[key] = path


def _folder_inputs(folder: Folder) -> list[tuple[Path, str]]:
    """The input files of a folder that no folder format reads: those of its files a format reads."""
    problem = folder_problem(folder)
    if problem is not None:
        raise ClusterClipError(problem)
    data = []
    for p in folder.files:
        try:
            data.append((p, format_of(p)))
        except ClusterClipError:
            continue
    if not data:
        raise ClusterClipError(f"{folder.path}: folder holds no .txt, .jsonl or .parquet files")
    return data


def inputs_fingerprint(inputs: Sequence[tuple[Path, str]]) -> list[dict[str, Any]]:
    """Path (a URL for an object of a store), size and modification time of every input file: what staleness
    checks compare."""
    entries = []
    for path, fmt in inputs:
        files = files_under(path) if kind(path) == "dir" else [path]
        for p in files:
            size, mtime_ns = size_time(p)
            entries.append({"path": where(p) if is_remote(p) else str(p.resolve()), "format": fmt, "size": size,
                            "mtime_ns": mtime_ns})
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


def work_units(inputs: Sequence[tuple[Path, str]], split: bool = False) -> list[WorkUnit]:
    """Split resolved inputs into work units, in document order, as each one's format cuts it (a folder of
    ``.txt`` files: runs of files). With ``split``, into pieces that workers read on their own: a Parquet file
    of more than ``limits.PARQUET_ROWS_PER_UNIT`` rows becomes one unit per run of row groups holding about
    that many, and a plain JSONL file of more than ``limits.JSONL_BYTES_PER_UNIT`` bytes one unit per byte
    range of that size, whose ``lines_before`` :func:`number_lines` fills in."""
    units: list[WorkUnit] = []
    for path, fmt in inputs:
        cls = FORMATS.get(fmt)
        units.extend(cls.units(path, split) if cls is not None else [WorkUnit(path, fmt)])
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
