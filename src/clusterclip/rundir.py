"""The run-directory contract: paths, atomic writes, stage records, checksums and locking.

Every stage of the pipeline reads the artifacts of the stage before it from one run directory and
writes its own next to them. A stage is *finished* when its record ``<stage>.json`` exists; the record
holds the stage's config, the hash of its inputs and the size, modification time and SHA-256 of every
artifact it wrote. Two checks use it (both documented in ``docs/run-directory.md``):

* the *quick* check (``checksums=False``) compares sizes and modification times, O(files) and no
  artifact bytes read: it decides whether a re-run is a no-op;
* the *full* check compares SHA-256 checksums: it runs before an artifact's content is used and in
  ``clusterclip status --verify``.

File names are in :mod:`clusterclip.artifacts`; the stage runner is :mod:`clusterclip.stages`. Arrays are
``.npy`` loaded with ``allow_pickle=False``; metadata is JSON. Nothing is pickled.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import fnmatch
import hashlib
import json
import os
import signal
import tempfile
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from clusterclip import artifacts as A
from clusterclip.errors import ClusterClipError

FORMAT_VERSION = 2
"""Version of the stage records: 2 adds ``mtime_ns`` to every artifact (records of version 1, without it,
are still read; their artifacts are then checked by checksum)."""
TMP_PREFIX = ".tmp-"


class StaleArtifactError(ClusterClipError):
    """An artifact is missing, corrupt or was built from different inputs."""


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
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


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


def artifact_checksums(record: Mapping[str, Any]) -> dict[str, str]:
    """``{artifact: sha256}`` of a stage record: what its outputs are, whenever they were written."""
    return {rel: meta["sha256"] for rel, meta in record.get("artifacts", {}).items()}


def config_hash(obj: Any) -> str:
    """Stable SHA-256 of a JSON-serialisable object (keys sorted)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_json_default)
    return hashlib.sha256(text.encode()).hexdigest()


class RunDir:
    """A run directory: paths of artifacts, stage records, freshness checks and a writer lock."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.root = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.root)!r})"

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    def record_path(self, stage: str) -> Path:
        return self.root / A.record(stage)

    def record(self, stage: str) -> dict[str, Any] | None:
        """The stage's record, or None when the stage has not finished."""
        p = self.record_path(stage)
        if not p.exists():
            return None
        try:
            return load_json(p)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StaleArtifactError(f"{p}: corrupt stage record ({exc}); re-run `{stage}`") from exc

    def stages(self) -> list[str]:
        """Names of the finished stages, upstream first: corpus, embed, cluster, then every plan."""
        names = [s for s in A.STAGES if self.record_path(s).is_file()]
        plans = self.root / A.PLANS_DIR
        if plans.is_dir():
            names += [A.plan_stage_name(p.name) for p in sorted(plans.iterdir())
                      if (p / A.PLAN_RECORD).is_file()]
        return names

    def require(self, stage: str, verify: bool = True, only: Collection[str] | None = None) -> dict[str, Any]:
        """The record of a finished stage, with its artifacts (or the ``only`` ones) checksum-verified.

        Pass ``verify=False`` only where no artifact content is read (the record alone is used).
        """
        rec = self.record(stage)
        if rec is None:
            raise StaleArtifactError(
                f"{self.root}: stage `{stage}` has not run yet; run `clusterclip {_cli_of(stage)}` first"
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
                problem = self._artifact_problem(stage, rel, meta, checksums)
                if problem:
                    yield problem

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

    def _artifact_problem(self, stage: str, rel: str, meta: Mapping[str, Any], checksums: bool) -> str | None:
        p = self.root / rel
        try:
            st = p.stat()
        except FileNotFoundError:
            return f"{p}: missing artifact of stage `{stage}`; re-run `{stage}`"
        if st.st_size != meta["size"]:
            return (f"{p}: size {st.st_size} does not match the {meta['size']} bytes recorded by stage "
                    f"`{stage}` (truncated or modified); re-run `{stage}`")
        if not checksums and meta.get("mtime_ns") == st.st_mtime_ns:
            return None
        if file_digest(p) != meta["sha256"]:
            return f"{p}: checksum does not match the one recorded by stage `{stage}` (modified); re-run `{stage}`"
        return None

    def is_fresh(self, stage: str, config: Mapping[str, Any], inputs_hash: str) -> bool:
        """True when ``stage`` finished with this config and inputs and its artifacts pass the quick check."""
        rec = self.record(stage)
        if rec is None or rec.get("config_hash") != config_hash(config) or rec.get("inputs_hash") != inputs_hash:
            return False
        return not self.problems(stage, rec, checksums=False)

    def invalidate(self, stage: str) -> None:
        """Forget that ``stage`` finished (its record goes; artifacts are overwritten by the re-run)."""
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
        st = (self.root / rel).stat()
        if known is not None and known.get("size") == st.st_size and known.get("mtime_ns") == st.st_mtime_ns:
            return dict(known)
        return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": file_digest(self.root / rel)}

    def output_hash(self, stage: str) -> str:
        """Hash that identifies a finished stage's outputs: the input hash of the stages after it."""
        rec = self.require(stage, verify=False)
        return config_hash({"config": rec["config_hash"], "inputs": rec["inputs_hash"],
                            "artifacts": artifact_checksums(rec)})

    def require_current(self, stage: str, upstream: str) -> dict[str, Any]:
        """The record of ``stage``, checked to be built from the current outputs of ``upstream``.

        Refuses to mix artifacts: if ``upstream`` was re-run after ``stage``, ``stage`` must be re-run too.
        """
        rec = self.require(stage, verify=False)
        if rec["inputs_hash"] != self.output_hash(upstream):
            raise StaleArtifactError(
                f"{self.root}: stage `{stage}` was built from an older `{upstream}` output; "
                f"re-run `clusterclip {_cli_of(stage)}`"
            )
        return rec

    @contextlib.contextmanager
    def lock(self, wait: bool = False, timeout: float = 0.0) -> Iterator[None]:
        """Hold an exclusive lock on the run directory for the duration of a writing stage.

        A second writer fails at once with a clear message (or waits up to ``timeout`` seconds when
        ``wait`` is set). The lock is an ``flock`` so it is released if the holder dies.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        fh = open(self.root / A.LOCK, "a+")  # noqa: SIM115 - held for the whole context
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
        """Remove temp files a killed run may have left behind; returns how many were removed."""
        n = 0
        if self.root.exists():
            for p in self.root.rglob(TMP_PREFIX + "*"):
                with contextlib.suppress(OSError):
                    p.unlink()
                    n += 1
        return n


def _cli_of(stage: str) -> str:
    if stage.startswith(A.PLANS_DIR):
        return "plan RUN_DIR"
    return {A.CORPUS_STAGE: "embed INPUT... --out RUN_DIR", A.EMBED_STAGE: "embed INPUT... --out RUN_DIR",
            A.CLUSTER_STAGE: "cluster RUN_DIR"}.get(stage, stage)
