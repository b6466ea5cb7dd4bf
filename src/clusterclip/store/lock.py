"""The one writer lock of a run directory (or of an export folder): an ``flock`` on its ``.lock`` file.

Every command that writes takes it for as long as it writes; a second writer fails at once with a clear
message (or waits up to a timeout). The lock is re-entrant within a process, so a command that runs
several stages holds it once around all of them and each stage still takes it. It is an ``flock``, so it
is released when its holder dies.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from clusterclip.errors import ClusterClipError
from clusterclip.store.files import LinkInRunDirError, refuse_links
from clusterclip.store.layout import LOCK as LOCK_FILE

_held: dict[str, int] = {}
_guard = threading.Lock()


@contextlib.contextmanager
def exclusive(root: str | os.PathLike[str], wait: bool = False, timeout: float = 0.0,
              what: str = "run directory") -> Iterator[None]:
    """Hold the writer lock of ``root`` (created if missing) inside the ``with`` block. When the block fails and
    ``root`` was created here and holds nothing but the lock file, ``root`` is removed (with the parents created
    for it), so a command that failed before writing anything leaves no empty run directory behind."""
    root = Path(root)
    created = [d for d in (root, *root.parents) if not d.exists()]
    try:
        root.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ClusterClipError(f"{root}: cannot be a {what}: a file is in its place or in its path; move "
                               f"the file or name another {what}") from None
    key = os.path.realpath(root)
    with _guard:
        if _held.get(key):
            _held[key] += 1
            reentered = True
        else:
            reentered = False
    if reentered:
        try:
            yield
        finally:
            with _guard:
                _held[key] -= 1
        return
    try:
        with _flock(root, wait, timeout, what):
            with _guard:
                _held[key] = 1
            try:
                yield
            finally:
                with _guard:
                    _held.pop(key, None)
    except BaseException:
        if created:
            _remove_unused(created)
        raise


def _remove_unused(created: list[Path]) -> None:
    """Remove ``created[0]`` (a directory this process created) if it holds only the lock file and empty folders,
    then the parents in ``created[1:]`` that are left empty."""
    root = created[0]
    for path in root.rglob("*"):
        if path.is_symlink() or not (path.is_dir() or path == root / LOCK_FILE):
            return
    shutil.rmtree(root, ignore_errors=True)
    for parent in created[1:]:
        try:
            parent.rmdir()
        except OSError:
            return


@contextlib.contextmanager
def _flock(root: Path, wait: bool, timeout: float, what: str) -> Iterator[None]:
    path = refuse_links(root, root / LOCK_FILE)
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
                        f"{root}: another clusterclip process is writing this {what} (lock held on {LOCK_FILE}); "
                        "wait for it to finish") from None
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


def held_elsewhere(root: str | os.PathLike[str]) -> bool:
    """Whether another process holds the writer lock of ``root`` now (a probe: nothing is created or kept)."""
    if _held.get(os.path.realpath(root)):
        return False
    try:
        fd = os.open(Path(root) / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False
