"""The run-directory contract: paths, atomic writes, stage records, checksums and locking.

Every stage of the pipeline reads the artifacts of the stage before it from one run directory and
writes its own next to them. A stage is *finished* when its record ``<stage>.json`` exists; the record
holds the stage's config, the hash of its inputs and the size, modification time and SHA-256 of every
artifact it wrote. Two checks use it (both documented in ``docs/run-directory.md``):

* the *quick* check (``checksums=False``) compares sizes and modification times, O(files) and no
  artifact bytes read: it decides whether a re-run is a no-op;
* the *full* check compares SHA-256 checksums: it runs before an artifact's content is used and in
  ``clusterclip status --verify``.

Two more rules keep what the directory holds trustworthy. **No links**: :meth:`RunDir.path` refuses a
path with a symbolic link anywhere below the run directory (the directory itself may be one), so no
write, delete or read is redirected outside it. **Staleness**: a stage built from an upstream output that
was rebuilt since is *stale* (:meth:`RunDir.stale_reason`); consumers refuse it
(:meth:`RunDir.require_current`) with the commands that rebuild it (:meth:`RunDir.rebuild_command`).

File names are in :mod:`clusterclip.artifacts`; the stage runner is :mod:`clusterclip.stages`. Arrays are
``.npy`` loaded with ``allow_pickle=False``; metadata is JSON. Nothing is pickled.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import fnmatch
import hashlib
import json
import logging
import os
import re
import shlex
import signal
import stat
import tempfile
import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import EllipsisType
from typing import IO, Any

import numpy as np

from clusterclip import artifacts as A
from clusterclip.errors import ClusterClipError, CorruptFileError

log = logging.getLogger(__name__)

FORMAT_VERSION = 2
"""Version of the stage records: 2 adds ``mtime_ns`` to every artifact (records of version 1, without it,
are still read; their artifacts are then checked by checksum)."""
TMP_PREFIX = ".tmp-"


class StaleArtifactError(ClusterClipError):
    """An artifact is missing, corrupt or was built from different inputs."""


class LinkInRunDirError(ClusterClipError):
    """A path inside a run directory is a symbolic link (clusterclip never writes, deletes or reads through one)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        super().__init__(f"{path}: is a symbolic link inside the run directory; clusterclip does not write, delete "
                         "or read through links there: remove the link (or put a copy of what it points to in "
                         "its place)")


def refuse_links(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> Path:
    """``path``, after checking that no component of it below ``root`` is a symbolic link (``lstat``, so a
    link is found whether or not its target exists); paths outside ``root`` are returned unchecked."""
    root, path = Path(root), Path(path)
    try:
        rel = path.relative_to(root)
    except ValueError:
        return path
    current = root
    for part in rel.parts:
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except (FileNotFoundError, NotADirectoryError):
            break
        if stat.S_ISLNK(mode):
            raise LinkInRunDirError(current)
    return path


FAULT_ENV = "CLUSTERCLIP_FAULT"


def _fault_point(path: Path, when: str) -> None:
    """Fault injection for crash tests: ``CLUSTERCLIP_FAULT="<file glob>:<before|after>"`` SIGKILLs the
    process just before (temp file written, not renamed) or just after an artifact is moved into place.
    """
    spec = os.environ.get(FAULT_ENV)
    if spec:
        pattern, _, point = spec.rpartition(":")
        if point == when and fnmatch.fnmatch(path.name, pattern):
            os.kill(os.getpid(), signal.SIGKILL)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; once the caller has written it, fsync and rename it over
    ``path``. An exception (or a crash) leaves ``path`` untouched and the temp file removed (or, after a
    crash, left under a ``.tmp-`` name that :meth:`RunDir.clean_temp_files` removes).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX + path.name + ".", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        _fault_point(path, "before")
        os.replace(tmp, path)
        _fault_point(path, "after")
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO[Any]]:
    """:func:`atomic_path` for writers that take an open file."""
    with atomic_path(path) as tmp, open(tmp, mode) as fh:
        yield fh


def save_npy(path: str | os.PathLike[str], array: np.ndarray) -> None:
    """Write ``array`` as ``.npy`` atomically."""
    with atomic_write(path) as fh:
        np.save(fh, np.ascontiguousarray(array), allow_pickle=False)


def load_npy(path: str | os.PathLike[str], mmap: bool = False) -> np.ndarray:
    """Load a ``.npy`` file without ever unpickling; ``mmap`` maps it read-only."""
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except FileNotFoundError:
        raise
    except (ValueError, OSError, EOFError) as exc:
        raise StaleArtifactError(f"{path}: cannot read array ({exc})") from exc


def save_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as pretty JSON atomically."""
    with atomic_write(path, "w") as fh:
        json.dump(obj, fh, indent=2, sort_keys=False, default=_json_default)
        fh.write("\n")


def load_json(path: str | os.PathLike[str]) -> Any:
    """A JSON artifact; :class:`CorruptFileError` (one line, naming the file) when it does not parse."""
    with open(path, encoding="utf-8") as fh:
        try:
            return json.load(fh)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise CorruptFileError(f"{path}: not valid JSON ({exc}); it was damaged or edited: restore it, or "
                                   "re-run the command that wrote it") from exc


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def file_digest(path: str | os.PathLike[str], chunk: int = 1 << 22) -> str:
    """SHA-256 of a file, streamed."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def artifact_checksums(record: Mapping[str, Any]) -> dict[str, str | None]:
    """``{artifact: sha256}`` of a stage record: what its outputs are, whenever they were written."""
    return {rel: meta.get("sha256") if isinstance(meta, Mapping) else None
            for rel, meta in record.get("artifacts", {}).items()}


def config_hash(obj: Any) -> str:
    """Stable SHA-256 of a JSON-serialisable object (keys sorted)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_json_default)
    return hashlib.sha256(text.encode()).hexdigest()


def record_output_hash(rec: Mapping[str, Any]) -> str:
    """Hash that identifies a stage's outputs, from its record (config, inputs, artifact checksums)."""
    return config_hash({"config": rec.get("config_hash"), "inputs": rec.get("inputs_hash"),
                        "artifacts": artifact_checksums(rec)})


def grown_from(rec: Mapping[str, Any]) -> list[str]:
    """The ``grown_from`` field of a record that ``clusterclip add`` rewrites from ``rec``: the output hashes
    of the versions it grew from. What was built on those (a plan) covers fewer documents but stays valid."""
    return [*rec.get("grown_from", []), record_output_hash(rec)]


class RunDir:
    """A run directory: paths of artifacts, stage records, freshness checks and a writer lock."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.root = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.root)!r})"

    def path(self, *parts: str) -> Path:
        """``ROOT/parts...``; raises :class:`LinkInRunDirError` when a component below the root is a link."""
        return refuse_links(self.root, self.root.joinpath(*parts))

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
                f"{p}: corrupt stage record ({_one_line(exc)}); {self._rerun(stage, None)}") from None
        except OSError as exc:
            raise StaleArtifactError(f"{p}: cannot read the stage record ({exc.strerror})") from None
        if isinstance(rec, dict) and not {"config_hash", "inputs_hash", "artifacts"} & rec.keys():
            return rec  # written by hand (report fixtures): no bookkeeping to check
        if not isinstance(rec, dict) or not all(isinstance(rec.get(f), str) for f in ("config_hash", "inputs_hash")) \
                or not isinstance(rec.get("artifacts", {}), dict):
            raise StaleArtifactError(f"{p}: corrupt stage record (fields missing or of the wrong type); "
                                     f"{self._rerun(stage, None)}")
        return rec

    def previous_record(self, stage: str) -> dict[str, Any] | None:
        """The record a re-run of ``stage`` compares against: a corrupt one counts as not finished (with a
        warning), so re-running the stage rebuilds it instead of failing on it."""
        try:
            return self.record(stage)
        except StaleArtifactError as exc:
            log.warning("%s: rebuilding it", exc)
            return None

    def stages(self) -> list[str]:
        """Names of the finished stages, upstream first: corpus, embed, cluster, every plan, then the report."""
        names = [s for s in A.STAGES if self.record_path(s).is_file()]
        plans = self.path(A.PLANS_DIR)
        if plans.is_dir():
            names += [A.plan_stage_name(p.name) for p in sorted(plans.iterdir())
                      if (p / A.PLAN_RECORD).is_file()]
        if self.record_path(A.REPORT_STAGE).is_file():
            names.append(A.REPORT_STAGE)
        return names

    def require(self, stage: str, verify: bool = True, only: Collection[str] | None = None) -> dict[str, Any]:
        """The record of a finished stage, with its artifacts (or the ``only`` ones) checksum-verified.

        Pass ``verify=False`` only where no artifact content is read (the record alone is used).
        """
        rec = self.record(stage)
        if rec is None:
            raise StaleArtifactError(
                f"{self.root}: stage `{stage}` has not run yet; run `{self.rebuild_command(stage)}` first"
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
            raise StaleArtifactError(problem)

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

    def quick_problems(self) -> dict[str, list[str]]:
        """The quick check (sizes and modification times, no bytes read) of every finished stage, as
        :meth:`audit`; what plain ``clusterclip status`` reports."""
        found: dict[str, list[str]] = {}
        for stage in self.stages():
            try:
                found[stage] = self.problems(stage, checksums=False)
            except StaleArtifactError as exc:
                found[stage] = [str(exc)]
        return found

    def audit(self) -> dict[str, list[str]]:
        """The full check of every finished stage (``clusterclip status --verify``): ``{stage: problems}``,
        an empty list for a stage whose artifacts all match their recorded sizes and checksums."""
        found: dict[str, list[str]] = {}
        for stage in self.stages():
            try:
                found[stage] = self.problems(stage)
            except StaleArtifactError as exc:
                found[stage] = [str(exc)]
        return found

    def _artifact_problem(self, stage: str, rec: Mapping[str, Any], rel: str, meta: Mapping[str, Any],
                          checksums: bool) -> str | None:
        try:
            p = self.path(rel)
            st = p.stat()
        except LinkInRunDirError as exc:
            return f"{exc.path}: a symbolic link replaced an artifact of stage `{stage}`; remove it and " \
                   f"{self._rerun(stage, rec, force=True)}"
        except (FileNotFoundError, NotADirectoryError):
            return f"{self.root / rel}: missing artifact of stage `{stage}`; {self._rerun(stage, rec, force=True)}"
        if not isinstance(meta, Mapping) or not isinstance(meta.get("size"), int) or "sha256" not in meta:
            return f"{p}: the record of stage `{stage}` lists it without size or checksum; " \
                   f"{self._rerun(stage, rec, force=True)}"
        if st.st_size != meta["size"]:
            return (f"{p}: size {st.st_size} does not match the {meta['size']} bytes recorded by stage "
                    f"`{stage}` (truncated or modified); {self._rerun(stage, rec, force=True)}")
        if not checksums and meta.get("mtime_ns") == st.st_mtime_ns:
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

    def invalidate(self, stage: str) -> None:
        """Forget that ``stage`` finished (its record goes; artifacts are overwritten by the re-run).

        First checks that none of the recorded artifacts' paths runs through a symbolic link, so a stage
        about to rewrite them fails (:class:`LinkInRunDirError`) before it has changed anything."""
        try:
            rec = self.record(stage) or {}
        except StaleArtifactError:
            rec = {}
        for rel in rec.get("artifacts", {}):
            self.path(rel)
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

        ``known`` holds recorded metadata of artifacts left untouched (``clusterclip add`` appends to a
        large corpus): an entry whose size and modification time still match is kept, not re-hashed.
        """
        rec: dict[str, Any] = {
            "stage": stage,
            "format_version": FORMAT_VERSION,
            "config": dict(config),
            "config_hash": config_hash(config),
            "inputs_hash": inputs_hash,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "seconds": round(seconds, 3),
            **extra,
            "artifacts": {rel: self._artifact_meta(rel, (known or {}).get(rel)) for rel in artifacts},
        }
        save_json(self.record_path(stage), rec)
        return rec

    def _artifact_meta(self, rel: str, known: Mapping[str, Any] | None = None) -> dict[str, Any]:
        path = self.path(rel)
        st = path.stat()
        if known is not None and known.get("size") == st.st_size and known.get("mtime_ns") == st.st_mtime_ns:
            return dict(known)
        return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": file_digest(path)}

    def output_hash(self, stage: str) -> str:
        """Hash that identifies a finished stage's outputs: the input hash of the stages after it."""
        return record_output_hash(self.require(stage, verify=False))

    def require_current(self, stage: str, upstream: str | None = None, *, verify: bool = False,
                        only: Collection[str] | None = None) -> dict[str, Any]:
        """The record of ``stage``, checked to be built from the current outputs of the stages before it.

        Refuses to mix artifacts: if an upstream stage was rebuilt after ``stage`` (directly, or further
        up), ``stage`` is stale and this raises :class:`StaleArtifactError` with the commands that rebuild
        it. ``upstream`` checks only that one stage's direct input hash. With ``verify`` the artifacts (or
        the ``only`` ones) are checksum-verified too. This is the call for every consumer of a stage's
        artifacts (report, export, sampler).
        """
        rec = self.require(stage, verify=False)
        if upstream is not None:
            if rec.get("inputs_hash") != self.output_hash(upstream):
                raise StaleArtifactError(
                    f"{self.root}: stage `{stage}` was built from an older `{upstream}` output; "
                    f"re-run it: `{self.rebuild_command(stage)}`"
                )
        else:
            why = self.stale_reason(stage)
            if why:
                raise StaleArtifactError(why)
        if verify:
            self.verify(stage, rec, only=only)
        return rec

    def stale_reason(self, stage: str) -> str | None:
        """Why ``stage`` can no longer be used, as one line ending in the commands that rebuild it; None
        when it is current or has not run.

        A stage is stale when an upstream stage it was built from was rebuilt since (its output hash is
        not the one the stage recorded), directly or further up: plans after ``cluster``, ``cluster`` after
        ``embed``, ``embed`` after ``corpus``. A corrupt record (its own or an upstream one) is a reason
        too. Only the records are read. A plan built before ``clusterclip add`` grew the run is not stale
        (its indices are still valid; it covers the documents it was built from): see :meth:`behind_note`.
        """
        found = self._stale(stage, set())
        if found is None:
            return None
        reason, commands = found
        steps = ", then ".join(f"`{c}`" for c in dict.fromkeys(commands))
        return f"{self.root}: stage `{stage}` is stale: {reason}; rebuild: {steps}"

    def behind_note(self, stage: str) -> str | None:
        """A note when ``stage`` (a plan) was built before ``clusterclip add`` grew an upstream stage: still
        usable, over the documents it was built from; None otherwise."""
        try:
            rec = self.record(stage)
            if rec is None or self._stale(stage, set()):
                return None
            for up, h in self._upstream_hashes(stage, rec).items():
                up_rec = self.record(up)
                if up_rec is not None and h != record_output_hash(up_rec) and h in up_rec.get("grown_from", []):
                    return (f"stage `{stage}` was built before `clusterclip add` grew `{up}`: it covers only the "
                            f"documents before the add; `{self.rebuild_command(stage)}` rebuilds it over all of them")
        except StaleArtifactError:
            return None
        return None

    def _stale(self, stage: str, seen: set[str]) -> tuple[str, list[str]] | None:
        """``(reason, commands)`` when ``stage`` is stale, else None (see :meth:`stale_reason`)."""
        if stage in seen:
            return None
        seen.add(stage)
        try:
            rec = self.record(stage)
        except StaleArtifactError:
            return "its record is corrupt", [self.rebuild_command(stage, None, force=True)]
        if rec is None:
            return None
        if stage.startswith(A.PLANS_DIR + "/") and "upstream" not in rec:
            return self._legacy_plan_stale(stage, rec)
        listed = isinstance(rec.get("upstream"), Mapping) and stage not in (A.EMBED_STAGE, A.CLUSTER_STAGE)
        for up, h in self._upstream_hashes(stage, rec).items():
            try:
                up_rec = self.record(up)
            except StaleArtifactError:
                return (f"the record of `{up}`, which it was built from, is corrupt",
                        [self.rebuild_command(up, None, force=True)])
            if up_rec is None:
                if listed:
                    return f"`{up}`, which it was built from, is gone", [self.rebuild_command(stage, rec)]
                continue
            if h != record_output_hash(up_rec) and h not in up_rec.get("grown_from", []):
                return f"`{up}` was rebuilt after it", [self.rebuild_command(stage, rec)]
            found = self._stale(up, seen)
            if found is not None:
                return f"`{up}`, which it was built from, is stale ({found[0]})", \
                    [*found[1], self.rebuild_command(stage, rec)]
        return None

    def _upstream_hashes(self, stage: str, rec: Mapping[str, Any]) -> dict[str, str]:
        """``{upstream stage: its output hash when ``stage`` was built}``."""
        single = {A.EMBED_STAGE: A.CORPUS_STAGE, A.CLUSTER_STAGE: A.EMBED_STAGE}.get(stage)
        if single is not None:
            return {single: rec.get("inputs_hash", "")} if "inputs_hash" in rec else {}
        upstream = rec.get("upstream")
        return dict(upstream) if isinstance(upstream, Mapping) else {}

    def _legacy_plan_stale(self, stage: str, rec: Mapping[str, Any]) -> tuple[str, list[str]] | None:
        """Staleness of a plan record written before records listed their ``upstream`` outputs: its input
        hash is recomputed from the current cluster (and corpus) outputs."""
        if "inputs_hash" not in rec:
            return None
        try:
            cluster, corpus = self.record(A.CLUSTER_STAGE), self.record(A.CORPUS_STAGE)
        except StaleArtifactError:
            return None
        if cluster is None:
            return None
        base: dict[str, Any] = {"cluster": record_output_hash(cluster)}
        if "plan_format" in rec:
            base["plan_format"] = rec["plan_format"]
        if "continues" in rec:
            base["continues"] = rec["continues"]
        candidates = [base] + ([{**base, "corpus": record_output_hash(corpus)}] if corpus else [])
        if rec["inputs_hash"] in {config_hash(c) for c in candidates}:
            return None
        return "`cluster` or `corpus` was rebuilt after it", [self.rebuild_command(stage, rec)]

    @contextlib.contextmanager
    def lock(self, wait: bool = False, timeout: float = 0.0) -> Iterator[None]:
        """Hold an exclusive lock on the run directory for the duration of a writing stage.

        A second writer fails at once with a clear message (or waits up to ``timeout`` seconds when
        ``wait`` is set). The lock is an ``flock`` so it is released if the holder dies.
        """
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise ClusterClipError(f"{self.root}: cannot be a run directory: a file is in its place or in its "
                                   "path; choose another --out") from None
        path = self.path(A.LOCK)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise LinkInRunDirError(path) from None
            raise
        fh = os.fdopen(fd, "r+")
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                    if not wait or time.monotonic() >= deadline:
                        raise ClusterClipError(
                            f"{self.root}: another clusterclip process is writing this run directory "
                            "(lock held on .lock); wait for it to finish or use another --out"
                        ) from None
                    time.sleep(0.2)
            fh.seek(0)
            fh.truncate()
            fh.write(f"{os.getpid()}\n")
            fh.flush()
            yield
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
            fh.close()

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

    # ------------------------------------------------------------------------------ rebuild commands

    def rebuild_command(self, stage: str, rec: Mapping[str, Any] | EllipsisType | None = ...,
                        force: bool = False) -> str:
        """The ``clusterclip`` command line that rebuilds ``stage`` with the settings its record holds.

        ``rec`` defaults to the stage's record (None, or a corrupt one, gives the command without the
        options it cannot know). ``force`` adds ``--force``: needed when an artifact was modified in a way
        the quick check cannot see. Options are rendered from the settings declarations, so they are the
        command-line flags; only those differing from their defaults are written.
        """
        if rec is ...:
            try:
                rec = self.record(stage)
            except StaleArtifactError:
                rec, force = None, True
        try:
            args = self._command_args(stage, rec)
        except Exception:  # a record too odd to render still gets the bare command
            args = None
        if args is None:
            args = self._command_args(stage, None) or ["clusterclip", stage, shlex.quote(str(self.root))]
        if force:
            args.append("--force")
        return " ".join(args)

    def _rerun(self, stage: str, rec: Mapping[str, Any] | EllipsisType | None = ..., force: bool = True) -> str:
        if stage not in (*A.STAGES, A.REPORT_STAGE) and not stage.startswith(A.PLANS_DIR + "/"):
            return f"re-run `{stage}`"
        return f"re-run `{stage}` with `{self.rebuild_command(stage, rec, force=force)}`"

    def _command_args(self, stage: str, rec: Mapping[str, Any] | None) -> list[str] | None:
        root = shlex.quote(str(self.root))
        if stage in (A.CORPUS_STAGE, A.EMBED_STAGE):
            return self._embed_args(root)
        config = (rec or {}).get("config") or {}
        if stage == A.CLUSTER_STAGE:
            from clusterclip.cluster import ClusterConfig

            if rec is None:
                config = {"k": self._summary("cluster", "k")}

            return ["clusterclip", "cluster", root,
                    *_flags(ClusterConfig, config, ("k", *_field_names(ClusterConfig)), {"k": None})]
        if stage.startswith(A.PLANS_DIR + "/"):
            return ["clusterclip", "plan", root, *self._plan_flags(stage, rec)]
        if stage == A.REPORT_STAGE:
            return ["clusterclip", "report", root]
        return None

    def _embed_args(self, root: str) -> list[str]:
        from clusterclip.corpus import DEFAULT_CORPUS, CorpusConfig
        from clusterclip.pipeline import EmbedOptions

        records = {stage: self._readable_record(stage) for stage in (A.CORPUS_STAGE, A.EMBED_STAGE)}
        corpus = records[A.CORPUS_STAGE].get("config") or {}
        inputs = list(corpus.get("inputs") or self._summary("corpus", "inputs") or ["INPUT..."])
        defaults = {}
        if inputs == [DEFAULT_CORPUS]:
            inputs, defaults = [], {"group_field": "module"}
        args = ["clusterclip", "embed", *map(shlex.quote, inputs), "--out", root,
                *_flags(CorpusConfig, corpus, _CORPUS_FLAGS, defaults)]
        embed = records[A.EMBED_STAGE].get("config") or {}
        embedder = embed.get("embedder") if isinstance(embed.get("embedder"), dict) else {}
        options = {"embedder": embedder.get("name") or self._summary("embed", "embedder"),
                   "shard_size": embed.get("shard_size")}
        if embedder.get("name") == "minilm":
            options |= {"batch_size": embedder.get("batch_size"), "device": embedder.get("device")}
        return [*args, *_flags(EmbedOptions, options, list(options), {})]

    def _readable_record(self, stage: str) -> dict[str, Any]:
        """The stage's record as it parses, ``{}`` when missing or unreadable (no message built: the messages
        of :meth:`record` call the rebuild commands, which read records through this)."""
        with contextlib.suppress(Exception):
            rec = load_json(self.path(A.record(stage)))
            return rec if isinstance(rec, dict) else {}
        return {}

    def _summary(self, section: str, key: str) -> Any:
        """``summary.json[section][key]`` (written by ``clusterclip run``): where a corrupt record's settings
        can still be found; None when it is absent or unreadable."""
        with contextlib.suppress(Exception):
            value = load_json(self.path(A.SUMMARY))[section][key]
            if isinstance(value, (str, int)) or (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                return value
        return None

    def _plan_flags(self, stage: str, rec: Mapping[str, Any] | None) -> list[str]:
        from clusterclip.plan import PlanConfig

        name = stage.split("/")[1]
        config: Mapping[str, Any] | None = (rec or {}).get("config")
        if config is None:
            parsed = _plan_config_from_name(name)
            config = parsed.to_json() if parsed is not None else None
        if config is None:
            return ["OPTIONS..."]
        default = PlanConfig(strategy=config.get("strategy", "clusterclip")).to_json()
        values = {k: v for k, v in config.items() if k != "weights"}
        out = _flags(PlanConfig, values, ("strategy", *_PLAN_FLAGS), default, always=("strategy",))
        if config.get("weights") is not None:
            out += ["--weights", "WEIGHTS_FILE"]
        continues = (rec or {}).get("continues")
        if isinstance(continues, Mapping):
            out += ["--continue", shlex.quote(str(continues.get("name"))), "--consumed", str(continues.get("consumed"))]
        return out


_CORPUS_FLAGS = ("text_field", "id_field", "group_field", "split", "on_bad_record", "tokenizer")
_PLAN_FLAGS = ("budget", "budget_unit", "max_repeat", "tau", "seed", "window", "order")
_PLAN_NAME = re.compile(r"^(?P<strategy>[a-z]+)(?:-t(?P<tau>-?[0-9.e+-]+?))?-R(?P<cap>\d+|inf)-(?P<unit>docs|tokens)"
                        r"-B(?P<budget>epoch|\d+)-s(?P<seed>\d+)(?:-win(?P<window>\d+))?(?:-(?P<order>spread))?$")


def _field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if "help" in f.metadata]


def _flags(cls: type, values: Mapping[str, Any], names: Iterable[str], defaults: Mapping[str, Any],
           always: Collection[str] = ()) -> list[str]:
    """``--flag value`` for each of ``names`` set in ``values`` to something other than its default
    (``defaults``, else the field's declared one)."""
    from clusterclip.settings import flag_of

    declared = {f.name: f.default for f in dataclasses.fields(cls)}
    out: list[str] = []
    for name in dict.fromkeys(names):
        value = values.get(name)
        default = defaults[name] if name in defaults else declared.get(name)
        if value is None or (value == default and name not in always):
            continue
        if isinstance(value, (list, tuple)):
            shown = ",".join(map(str, value))
        else:
            shown = f"{value:g}" if isinstance(value, float) else str(value)
        out += [flag_of(cls, name), shlex.quote(shown)]
    return out


def _plan_config_from_name(name: str) -> Any:
    """The plan options a plan folder's name encodes (None for weights, continuations or odd names)."""
    from clusterclip.plan import PlanConfig

    m = _PLAN_NAME.match(name)
    if m is None:
        return None
    try:
        cfg = PlanConfig(strategy=m["strategy"], budget=None if m["budget"] == "epoch" else int(m["budget"]),
                         budget_unit=m["unit"], max_repeat=None if m["cap"] == "inf" else int(m["cap"]),
                         tau=float(m["tau"]) if m["tau"] else 0.5, seed=int(m["seed"]),
                         window=int(m["window"]) if m["window"] else None, order=m["order"] or "equal-rate")
    except (ClusterClipError, ValueError):
        return None
    return cfg if cfg.name() == name else None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]
