"""The run-directory contract: paths, atomic writes, stage records, checksums and locking.

Every stage of the pipeline reads the artifacts of the stage before it from one run directory and
writes its own next to them. A stage is *finished* when its record ``<stage>.json`` exists; the record
holds the stage's config, the hash of its inputs and the size and SHA-256 of every artifact it wrote,
so a re-run with the same config and inputs is a no-op, a changed option re-runs the stage, and a
truncated or edited artifact is detected before it is used. Layout (documented in
``docs/run-directory.md``)::

    corpus.json  corpus/part-*.parquet  tokens.npy
    embed.json   embeddings/shard-*.npy
    cluster.json centroids.npy labels.npy scores.npy sizes.npy
    plans/<name>/plan.json plans/<name>/plan.npy ...

Arrays are ``.npy`` loaded with ``allow_pickle=False``; metadata is JSON. Nothing is pickled.
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
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from clusterclip.errors import ClusterClipError

FORMAT_VERSION = 1
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
        return self.root / f"{stage}.json"

    def record(self, stage: str) -> dict[str, Any] | None:
        """The stage's record, or None when the stage has not finished."""
        p = self.record_path(stage)
        if not p.exists():
            return None
        try:
            return load_json(p)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StaleArtifactError(f"{p}: corrupt stage record ({exc}); re-run `{stage}`") from exc

    def require(self, stage: str, verify: bool = True) -> dict[str, Any]:
        """The record of a finished stage, with its artifacts verified; a clear error otherwise."""
        rec = self.record(stage)
        if rec is None:
            raise StaleArtifactError(
                f"{self.root}: stage `{stage}` has not run yet; run `clusterclip {_cli_of(stage)}` first"
            )
        if verify:
            self.verify(stage, rec)
        return rec

    def verify(self, stage: str, rec: Mapping[str, Any] | None = None, checksums: bool = True) -> None:
        """Check every artifact of ``stage`` against the size and SHA-256 in its record."""
        rec = rec if rec is not None else self.require(stage, verify=False)
        for rel, meta in rec.get("artifacts", {}).items():
            p = self.root / rel
            if not p.exists():
                raise StaleArtifactError(f"{p}: missing artifact of stage `{stage}`; re-run `{stage}`")
            size = p.stat().st_size
            if size != meta["size"]:
                raise StaleArtifactError(
                    f"{p}: size {size} does not match the {meta['size']} bytes recorded by stage "
                    f"`{stage}` (truncated or modified); re-run `{stage}`"
                )
            if checksums and file_digest(p) != meta["sha256"]:
                raise StaleArtifactError(
                    f"{p}: checksum does not match the one recorded by stage `{stage}` (modified); "
                    f"re-run `{stage}`"
                )

    def is_fresh(self, stage: str, config: Mapping[str, Any], inputs_hash: str) -> bool:
        """True when ``stage`` finished with this config and inputs and its artifacts are intact."""
        rec = self.record(stage)
        if rec is None or rec.get("config_hash") != config_hash(config) or rec.get("inputs_hash") != inputs_hash:
            return False
        try:
            self.verify(stage, rec)
        except StaleArtifactError:
            return False
        return True

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
        **extra: Any,
    ) -> dict[str, Any]:
        """Write the record that marks ``stage`` finished; artifacts are paths relative to the root."""
        rec: dict[str, Any] = {
            "stage": stage,
            "format_version": FORMAT_VERSION,
            "config": dict(config),
            "config_hash": config_hash(config),
            "inputs_hash": inputs_hash,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "seconds": round(seconds, 3),
            **extra,
            "artifacts": {
                rel: {"size": (self.root / rel).stat().st_size, "sha256": file_digest(self.root / rel)}
                for rel in artifacts
            },
        }
        save_json(self.record_path(stage), rec)
        return rec

    def output_hash(self, stage: str) -> str:
        """Hash that identifies a finished stage's outputs: the input hash of the stages after it."""
        rec = self.require(stage, verify=False)
        return config_hash({"config": rec["config_hash"], "inputs": rec["inputs_hash"],
                            "artifacts": {k: v["sha256"] for k, v in rec["artifacts"].items()}})

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
        fh = open(self.root / ".lock", "a+")  # noqa: SIM115 - held for the whole context
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
    if stage.startswith("plan"):
        return "plan RUN_DIR"
    return {"corpus": "embed INPUT... --out RUN_DIR", "embed": "embed INPUT... --out RUN_DIR",
            "cluster": "cluster RUN_DIR"}.get(stage, stage)
