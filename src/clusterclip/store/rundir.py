"""The run-directory contract: paths, stage records, checksums, freshness and the writer lock.

Every stage of the pipeline reads the artifacts of the stage before it from one run directory and
writes its own next to them. A stage is *finished* when its record ``<stage>.json`` exists; the record
holds the stage's config, the hash of its inputs, the command line that builds it and the size,
modification time and SHA-256 of every artifact it wrote. Two checks use it (both documented in
``docs/run-directory.md``):

* the *quick* check (``checksums=False``) compares sizes and modification times, O(files) and no
  artifact bytes read: it decides whether a re-run is a no-op;
* the *full* check compares SHA-256 checksums: it runs before an artifact's content is used and in
  ``clusterclip status --verify``.

Two more rules keep what the directory holds trustworthy. **No links**: :meth:`RunDir.path` refuses a
path with a symbolic link anywhere below the run directory (the directory itself may be one), so no
write, delete or read is redirected outside it. **Staleness** (:mod:`clusterclip.store.lineage`): a
stage built from an upstream output that was rebuilt since is refused with the commands that rebuild it.

This module knows no stage: what a stage is and how it is built lives above it
(:mod:`clusterclip.stages`); a record carries the command that rebuilds it (``command``, with
:data:`RUN` standing for the run directory), written by the stage runner.
"""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import os
import shlex
import shutil
import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import EllipsisType
from typing import Any

from clusterclip.errors import one_line
from clusterclip.store import layout as A
from clusterclip.store.files import (
    TMP_PREFIX,
    LinkInRunDirError,
    StaleArtifactError,
    config_hash,
    file_digest,
    load_json,
    refuse_links,
    save_json,
)
from clusterclip.store.lineage import Lineage
from clusterclip.store.lock import exclusive
from clusterclip.store.replica import local_path, owner, where

log = logging.getLogger(__name__)

FORMAT_VERSION = 2
"""Version of the stage records: 2 adds ``mtime_ns`` to every artifact (records of version 1, without it,
are still read; their artifacts are then checked by checksum)."""
RUN = A.RUN


class RunDir(Lineage):
    """A run directory: paths of artifacts, stage records, freshness checks and a writer lock."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.root = local_path(path)
        self.remote = owner(self.root)
        """For a run directory in object storage (``path`` a URL): its working copy and the key of ``root`` there
        (:mod:`clusterclip.store.replica`); None on disk."""
        if self.remote is not None:
            self.remote[0].prefetch(self.remote[1])

    def __repr__(self) -> str:
        return f"RunDir({self.where!r})"

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return type(self), (self.where if self.remote else str(self.root),)

    @property
    def where(self) -> str:
        """The run directory as the user names it (its URL in object storage) and records keep it."""
        return where(self.root)

    def path(self, *parts: str) -> Path:
        """``ROOT/parts...``; raises :class:`LinkInRunDirError` when a component below the root is a link. In object
        storage the file (or every file below the folder) is fetched into the working copy first."""
        path = self.locate(*parts)
        if self.remote is not None:
            rep, key = self.remote
            rep.fetch("/".join(p for p in (key, *parts) if p))
        return path

    def locate(self, *parts: str) -> Path:
        """:meth:`path` without fetching anything: for a reader that streams the file (``store.source``) or a
        listing (:meth:`files`)."""
        return refuse_links(self.root, self.root.joinpath(*parts))

    def files(self, folder: str, pattern: str = "*") -> list[Path]:
        """The files of ``folder`` (run-relative) whose names match ``pattern``, sorted, without reading or fetching
        them: a local listing, or the store's."""
        base = self.locate(folder)
        if self.remote is None:
            return sorted(p for p in base.glob(pattern) if p.is_file())
        rep, key = self.remote
        found = rep.listing("/".join(p for p in (key, folder) if p))
        return sorted(base / rel for rel in found if "/" not in rel and fnmatch.fnmatch(rel, pattern))

    def remove(self, rel: str) -> None:
        """Remove the file or folder ``rel`` of the run directory (in object storage: at once, there too)."""
        path = self.locate(rel)
        if self.remote is not None:
            rep, key = self.remote
            rep.remove("/".join(p for p in (key, rel) if p))
        elif path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)

    def record_path(self, stage: str) -> Path:
        return self.path(A.record(stage))

    def record(self, stage: str) -> dict[str, Any] | None:
        """The stage's record, or None when the stage has not finished; a corrupt record raises
        :class:`StaleArtifactError` with the command that rebuilds the stage."""
        p = self.record_path(stage)
        if not p.exists():
            return None
        try:
            rec = load_json(p)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise StaleArtifactError(
                f"{p}: corrupt stage record ({one_line(exc)}); {self._rerun(stage, None)}") from None
        except OSError as exc:
            raise StaleArtifactError(f"{p}: cannot read the stage record ({exc.strerror})") from None
        if isinstance(rec, dict) and not {"config_hash", "inputs_hash", "artifacts"} & rec.keys():
            return rec  # written by hand (report fixtures): no bookkeeping to check
        if not isinstance(rec, dict) or not all(isinstance(rec.get(f), str) for f in ("config_hash", "inputs_hash")) \
                or not isinstance(rec.get("artifacts", {}), dict) or not isinstance(rec.get("upstream"), dict):
            raise StaleArtifactError(f"{p}: corrupt stage record (fields missing or of the wrong type); "
                                     f"{self._rerun(stage, None)}")
        if rec.get("stage", stage) != stage:
            raise StaleArtifactError(f"{p}: holds the record of `{rec['stage']}`, not of `{stage}` (copied or "
                                     f"swapped); put that stage's own record back, or {self._rerun(stage, None)}")
        return rec

    def previous_record(self, stage: str) -> dict[str, Any] | None:
        """The record a re-run of ``stage`` compares against: a corrupt one counts as not finished (with a
        warning), so re-running the stage rebuilds it instead of failing on it."""
        try:
            return self.record(stage)
        except StaleArtifactError as exc:
            log.warning("%s: rebuilding it", exc)
            return None

    def require(self, stage: str, verify: bool = True, only: Collection[str] | None = None,
                fallback: Sequence[str] = ()) -> dict[str, Any]:
        """The record of a finished stage, with its artifacts (or the ``only`` ones) checksum-verified.

        Pass ``verify=False`` only where no artifact content is read (the record alone is used). ``fallback``
        is the command that builds the stage, named when it has not run (default :func:`layout.command
        <clusterclip.store.layout.command>`).
        """
        rec = self.record(stage)
        if rec is None:
            raise StaleArtifactError(
                f"{self.root}: stage `{stage}` has not run yet; run `{self.rebuild_command(stage, fallback=fallback)}`"
                " first"
            )
        if verify:
            self.verify(stage, rec, only=only)
        return rec

    def verify(self, stage: str, rec: Mapping[str, Any] | None = None, checksums: bool = True,
               only: Collection[str] | None = None) -> None:
        """Raise :class:`StaleArtifactError` for the first artifact of ``stage`` that fails
        :meth:`problems` (the full check, or the quick one with ``checksums=False``)."""
        problem = next(self._problems(stage, rec, checksums, only), None)
        if problem:
            raise StaleArtifactError(self._unfinished_write() or problem)

    def problems(self, stage: str, rec: Mapping[str, Any] | None = None, checksums: bool = True,
                 only: Collection[str] | None = None) -> list[str]:
        """What is wrong with the artifacts of ``stage`` (those of ``only`` it lists), one message per file.

        The full check compares sizes and SHA-256 checksums. The quick one (``checksums=False``) reads
        no bytes: a file with its recorded size and modification time passes; one whose record has no
        time (written by an older version) or whose time changed is checked by checksum instead.
        """
        return list(self._problems(stage, rec, checksums, only))

    def _problems(self, stage: str, rec: Mapping[str, Any] | None, checksums: bool,
                  only: Collection[str] | None) -> Iterator[str]:
        rec = rec if rec is not None else self.require(stage, verify=False)
        for rel, meta in rec.get("artifacts", {}).items():
            if only is None or rel in only:
                problem = self._artifact_problem(stage, rec, rel, meta, checksums)
                if problem:
                    yield problem

    def quick_problems(self, stages: Iterable[str]) -> dict[str, list[str]]:
        """The quick check (sizes and modification times, no bytes read) of the finished ``stages``, as
        :meth:`audit`; what plain ``clusterclip status`` reports."""
        found: dict[str, list[str]] = {}
        for stage in stages:
            try:
                found[stage] = self.problems(stage, checksums=False)
            except StaleArtifactError as exc:
                found[stage] = [str(exc)]
        return found

    def audit(self, stages: Iterable[str]) -> dict[str, list[str]]:
        """The full check of the finished ``stages`` (``clusterclip status --verify``): ``{stage: problems}``,
        an empty list for a stage whose artifacts all match their recorded sizes and checksums."""
        found: dict[str, list[str]] = {}
        for stage in stages:
            try:
                found[stage] = self.problems(stage)
            except StaleArtifactError as exc:
                found[stage] = [str(exc)]
        return found

    def _artifact_problem(self, stage: str, rec: Mapping[str, Any], rel: str, meta: Mapping[str, Any],
                          checksums: bool) -> str | None:
        from clusterclip.store.paths import stamp, unchanged  # the trainer side imports RunDir, rarely checks

        try:
            p = self.locate(rel)
            st = stamp(p)
        except LinkInRunDirError as exc:
            return f"{exc.path}: a symbolic link replaced an artifact of stage `{stage}`; remove it and " \
                   f"{self._rerun(stage, rec, force=True)}"
        except (FileNotFoundError, NotADirectoryError):
            return f"{self.root / rel}: missing artifact of stage `{stage}`; {self._rerun(stage, rec, force=True)}"
        if not isinstance(meta, Mapping) or not isinstance(meta.get("size"), int) or "sha256" not in meta:
            return f"{p}: the record of stage `{stage}` lists it without size or checksum; " \
                   f"{self._rerun(stage, rec, force=True)}"
        if st.size != meta["size"]:
            return (f"{p}: size {st.size} does not match the {meta['size']} bytes recorded by stage "
                    f"`{stage}` (truncated or modified); {self._rerun(stage, rec, force=True)}")
        if not checksums and unchanged(meta, st):
            return None
        if file_digest(p) != meta["sha256"]:
            return (f"{p}: checksum does not match the one recorded by stage `{stage}` (modified); "
                    f"{self._rerun(stage, rec, force=True)}")
        return None

    def is_fresh(self, stage: str, config: Mapping[str, Any], inputs_hash: str) -> bool:
        """True when ``stage`` finished with this config and inputs and its artifacts pass the quick check."""
        rec = self.previous_record(stage)
        if rec is None or rec.get("config_hash") != config_hash(config) or rec.get("inputs_hash") != inputs_hash:
            return False
        return not self.problems(stage, rec, checksums=False)

    def adopt_times(self, rec: Mapping[str, Any]) -> bool:
        """Record in ``rec`` (a record put back, e.g. by ``add --abort``) the current modification time of each
        artifact whose size and SHA-256 are the recorded ones, so the quick check passes it again; False when one
        is not (or is missing)."""
        from clusterclip.store.paths import adopt, stamp, unchanged

        same = True
        for rel, meta in rec.get("artifacts", {}).items():
            try:
                st = stamp(self.locate(rel))
                if st.size == meta.get("size") and (unchanged(meta, st)
                                                    or file_digest(self.locate(rel)) == meta.get("sha256")):
                    adopt(meta, st)
                    continue
            except OSError:
                pass
            same = False
        return same

    def invalidate(self, stage: str) -> None:
        """Forget that ``stage`` finished (its record goes; artifacts are overwritten by the re-run).

        First checks that none of the recorded artifacts' paths runs through a symbolic link, so a stage
        about to rewrite them fails (:class:`LinkInRunDirError`) before it has changed anything."""
        try:
            rec = self.record(stage) or {}
        except StaleArtifactError:
            rec = {}
        for rel in rec.get("artifacts", {}):
            self.locate(rel)
        if self.remote is not None:
            self.remove(A.record(stage))
        with contextlib.suppress(FileNotFoundError):
            self.record_path(stage).unlink()

    def write_record(
        self,
        stage: str,
        config: Mapping[str, Any],
        inputs_hash: str,
        artifacts: Sequence[str],
        seconds: float,
        known: Mapping[str, Mapping[str, Any]] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """Write the record that marks ``stage`` finished; artifacts are paths relative to the root.

        ``known`` holds recorded metadata of artifacts left untouched (documents appended to a large
        corpus): an entry whose size and modification time still match is kept, not re-hashed. A
        ``command`` in ``extra`` (the argv that rebuilds the stage) is also kept in ``commands.json``, so a
        message about a damaged record can still name it. ``upstream`` (``{stage: output hash}`` of what the
        stage was built from; empty for a first stage) is always written: staleness is decided from it. In object
        storage everything written so far reaches the store before the record is put beside it.
        """
        if self.remote is not None:
            self.remote[0].sync()
        rec: dict[str, Any] = {
            "stage": stage,
            "format_version": FORMAT_VERSION,
            "config": dict(config),
            "config_hash": config_hash(config),
            "inputs_hash": inputs_hash,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "seconds": round(seconds, 3),
            **extra,
            "upstream": dict(extra.get("upstream") or {}),
            "artifacts": {rel: self._artifact_meta(rel, (known or {}).get(rel)) for rel in artifacts},
        }
        save_json(self.record_path(stage), rec)
        if isinstance(extra.get("command"), list):
            save_json(self.path(A.COMMANDS), {**self._commands(), stage: extra["command"]})
        return rec

    def _commands(self) -> dict[str, Any]:
        """``commands.json``: the command that last built each stage; ``{}`` when missing or unreadable (it is
        only ever read to word a message)."""
        with contextlib.suppress(Exception):
            found = load_json(self.path(A.COMMANDS))
            if isinstance(found, dict):
                return found
        return {}

    def _artifact_meta(self, rel: str, known: Mapping[str, Any] | None = None) -> dict[str, Any]:
        from clusterclip.store.paths import artifact_meta

        return artifact_meta(self.locate(rel), known, file_digest)

    def lock(self, wait: bool = False, timeout: float = 0.0) -> contextlib.AbstractContextManager[None]:
        """The writer lock (:func:`clusterclip.store.lock.exclusive`): held by every command that writes
        into the run directory; re-entrant within a process."""
        return exclusive(self.root, wait, timeout)

    def clean_temp_files(self) -> int:
        """Remove temp files a killed run may have left behind; returns how many were removed.

        Walks the run directory without following links (a linked folder is not entered; a temp name
        that is a link is removed as a link, its target untouched)."""
        n = 0
        if self.root.is_dir():
            for folder, dirs, files in os.walk(self.root):
                for name in [*files, *(d for d in dirs if os.path.islink(os.path.join(folder, d)))]:
                    if name.startswith(TMP_PREFIX):
                        with contextlib.suppress(OSError):
                            os.unlink(os.path.join(folder, name))
                            n += 1
        return n

    def rebuild_command(self, stage: str, rec: Mapping[str, Any] | EllipsisType | None = ...,
                        force: bool = False, fallback: Sequence[str] = ()) -> str:
        """The ``clusterclip`` command line that rebuilds ``stage``: the one its record holds (``rec``
        defaults to the stage's record), else the generic one of :func:`clusterclip.store.layout.command`.
        ``force`` adds ``--force``: needed when an artifact was modified in a way the quick check cannot see.
        A corrupt record gives the generic command with ``--force``."""
        if rec is ...:
            try:
                rec = self.record(stage)
            except StaleArtifactError:
                rec, force = None, True
        recorded = (rec or {}).get("command") if isinstance(rec, Mapping) else None
        argv = next((c for c in (recorded, self._commands().get(stage))
                     if isinstance(c, list) and c and all(isinstance(a, str) for a in c)),
                    list(fallback or A.command(stage)))
        root = shlex.quote(self.where)
        return " ".join([*(root if a == RUN else shlex.quote(a) for a in argv), *(["--force"] if force else [])])

    def _rerun(self, stage: str, rec: Mapping[str, Any] | EllipsisType | None = ..., force: bool = True) -> str:
        return f"re-run `{stage}` with `{self.rebuild_command(stage, rec, force=force)}`"
