"""Files of a run directory, one at a time: atomic writes, arrays and JSON without pickling, digests,
and the refusal of symbolic links below the run directory.

Every write goes to a temporary file beside its target, is fsynced and renamed over it, so a killed
process leaves either the old file or the new one, never a half-written one. New files get the mode the
user's umask allows for a regular file (``0o666 & ~umask``), so a training job running as another user
can read a plan on a shared filesystem.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import hashlib
import json
import os
import signal
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from clusterclip.errors import ClusterClipError, CorruptFileError
from clusterclip.store import objects
from clusterclip.store.replica import ensure_local, local_path, owner, published

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


_UMASK: list[int] = []


def file_mode() -> int:
    """The mode of a new regular file under this process' umask (read once; ``mkstemp`` alone gives 0600)."""
    if not _UMASK:
        mask = os.umask(0o022)
        os.umask(mask)
        _UMASK.append(mask)
    return 0o666 & ~_UMASK[0]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; once the caller has written it, fsync and rename it over
    ``path``. An exception (or a crash) leaves ``path`` untouched and the temp file removed (or, after a
    crash, left under a ``.tmp-`` name that :meth:`RunDir.clean_temp_files` removes). A file of a working copy of
    object storage (:mod:`clusterclip.store.replica`) is sent to the store once it is in place.
    """
    path = local_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX + path.name + ".", dir=path.parent)
    os.fchmod(fd, file_mode())
    os.close(fd)
    try:
        try:
            yield Path(tmp)
        except OSError as exc:
            if exc.errno is not None:
                raise
            # NumPy's tofile (np.save into a file) reports a short write, a full disk, with no errno
            raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (a write stopped short: {exc})",
                          str(path)) from exc
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        _fault_point(path, "before")
        try:
            os.replace(tmp, path)
        except OSError as exc:  # an immutable or protected artifact: name it, not the temp file
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        published(path)
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
    path = ensure_local(path)
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
    with open(ensure_local(path), encoding="utf-8") as fh:
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
    """SHA-256 of a file (or of an object at a URL, or of the object a working-copy path names), streamed."""
    if objects.is_url(path):
        return objects.digest(str(path))
    found = owner(path)
    if found is not None:
        return found[0].digest(found[1])
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def config_hash(obj: Any) -> str:
    """Stable SHA-256 of a JSON-serialisable object (keys sorted)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_json_default)
    return hashlib.sha256(text.encode()).hexdigest()


