"""The one writer lock of a run directory (or of an export folder): an ``flock`` on its ``.lock`` file.

Every command that writes takes it for as long as it writes; a second writer fails at once with a clear
message (or waits up to a timeout). The lock is re-entrant within a process, so a command that runs
several stages holds it once around all of them and each stage still takes it. It is an ``flock``, so it
is released when its holder dies. A folder in object storage has a lock object with a lease instead (:func:`held`,
described below).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from clusterclip.errors import ClusterClipError
from clusterclip.store import objects as O
from clusterclip.store.files import LinkInRunDirError, refuse_links
from clusterclip.store.layout import LOCK as LOCK_FILE
from clusterclip.store.replica import Replica, owner, url_of

_held: dict[str, int] = {}
_guard = threading.Lock()


@contextlib.contextmanager
def exclusive(root: str | os.PathLike[str], wait: bool = False, timeout: float = 0.0,
              what: str = "run directory") -> Iterator[None]:
    """Hold the writer lock of ``root`` (created if missing) inside the ``with`` block. When the block fails and
    ``root`` was created here and holds nothing but the lock file, ``root`` is removed (with the parents created
    for it), so a command that failed before writing anything leaves no empty run directory behind. In object
    storage the lock is a lock object with a lease (:func:`held`)."""
    root = Path(root)
    remote = owner(root)
    if remote is not None:
        root.mkdir(parents=True, exist_ok=True)
        with _reentrant(str(url_of(root)), lambda: held(*remote, wait, timeout, what)):
            yield
        return
    created = [d for d in (root, *root.parents) if not d.exists()]
    try:
        root.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ClusterClipError(f"{root}: cannot be a {what}: a file is in its place or in its path; move "
                               f"the file or name another {what}") from None
    try:
        with _reentrant(os.path.realpath(root), lambda: _flock(root, wait, timeout, what)):
            yield
    except BaseException:
        if created:
            _remove_unused(created)
        raise


@contextlib.contextmanager
def _reentrant(key: str, take: Callable[[], contextlib.AbstractContextManager[None]]) -> Iterator[None]:
    """The lock ``key`` once per process: ``take()`` by the first holder, a count for the ones inside it."""
    with _guard:
        depth = _held.get(key, 0)
        if depth:
            _held[key] = depth + 1
    if depth:
        try:
            yield
        finally:
            with _guard:
                _held[key] -= 1
        return
    with take():
        with _guard:
            _held[key] = 1
        try:
            yield
        finally:
            with _guard:
                _held.pop(key, None)


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
    if owner(root) is not None:
        return not _held.get(str(url_of(root))) and taken(f"{url_of(root)}/{LOCK_FILE}")
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

# ------------------------------------------------------------------ the lock of a folder in object storage
# A store has no ``flock``, so the lock of ``URL`` is the object ``URL/.lock``: JSON naming its holder (host, pid, a
# random token) and when its lease ends. It is created only if absent (``If-None-Match: *``), renewed every third of
# the lease only if it is still the holder's (``If-Match`` its ETag) and deleted on release. A holder that dies
# leaves it behind: on the same host a dead holder's lock is taken over at once (its pid no longer runs); from
# another machine, once its lease has run out, again by a conditional write, so two processes never both take it.
# A holder that cannot renew (its lease ran out and another process took over) stops writing: every upload after
# that fails with one line.

LEASE_S = 60.0
"""How long a lock stays taken without renewal (renewed every third of it)."""


def _proc_start(pid: int) -> str | None:
    """The start time of process ``pid`` (``/proc/PID/stat`` field 22; None where there is no ``/proc``), which
    tells a live holder from a new process that reuses its pid."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _holder_gone(lock: dict[str, Any], now: float) -> bool:
    """Whether the process that holds ``lock`` is gone: its lease ran out, or it ran on this host and its pid no
    longer runs (or runs another process)."""
    if not isinstance(lock, dict) or float(lock.get("expires", 0)) < now:
        return True
    if lock.get("host") != socket.gethostname() or not isinstance(lock.get("pid"), int):
        return False
    try:
        os.kill(lock["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    started = _proc_start(lock["pid"])
    return started is not None and lock.get("started") not in (None, started)


def taken(url: str) -> bool:
    """Whether the lock object ``url`` is held by a process that still runs (a probe; nothing is written)."""
    try:
        found = O.read_tagged(url)
    except O.StoreError:
        return False
    if found is None:
        return False
    try:
        return not _holder_gone(json.loads(found[0]), time.time())
    except ValueError:
        return False


class Lease:
    """A held lock object (:func:`held`): renewed in a thread until released."""

    def __init__(self, url: str, what: str) -> None:
        self.url, self.what = url, what
        self.token = uuid.uuid4().hex
        self.etag: str | None = None
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def body(self) -> bytes:
        return json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "started": _proc_start(os.getpid()),
                           "token": self.token, "expires": time.time() + LEASE_S, "lease_s": LEASE_S}).encode()

    def take(self, wait: bool, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.etag = O.put_new(self.url, self.body())
            if self.etag is not None:
                return
            found = O.read_tagged(self.url)
            if found is not None:
                try:
                    lock = json.loads(found[0])
                except ValueError:
                    lock = {}
                if _holder_gone(lock, time.time()):
                    self.etag = O.put_matching(self.url, self.body(), found[1])
                    if self.etag is not None:
                        return
                    continue
                if not wait or time.monotonic() >= deadline:
                    raise ClusterClipError(
                        f"{self.url.rsplit('/', 1)[0]}: another clusterclip process is writing this {self.what} (lock "
                        f"{self.url} held by {lock.get('host')} pid {lock.get('pid')}, lease until "
                        f"{time.strftime('%H:%M:%S', time.localtime(float(lock.get('expires', 0))))}); wait for it to "
                        "finish (a holder that died leaves it behind until its lease runs out)")
            time.sleep(0.2)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._renew, name="clusterclip-lease", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        while not self._stop.wait(LEASE_S / 3):
            try:
                etag = O.put_matching(self.url, self.body(), self.etag or "")
            except O.StoreError as exc:
                etag, why = None, str(exc)
            else:
                why = "another process took it over after its lease ran out"
            if etag is None:
                self.lost = why
                return
            self.etag = etag

    def check(self) -> None:
        """Refuse to write on once the lease is lost."""
        if self.lost is not None:
            raise ClusterClipError(f"{self.url}: lost the writer lock of this {self.what} ({self.lost}); nothing more "
                                   "is written: run the command again")

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.lost is None:
            with contextlib.suppress(O.StoreError):
                O.delete([self.url])


@contextlib.contextmanager
def held(rep: Replica, rel: str, wait: bool, timeout: float, what: str) -> Iterator[None]:
    """Hold the lock object of the folder ``rel`` of working copy ``rep`` inside the block; everything written there
    is sent to the store before the lock goes (also when the block fails: what was written stays consistent,
    records last)."""
    lease = Lease(O.join(rep.url(rel), ".lock"), what)
    lease.take(wait, timeout)
    lease.start()
    rep.guards.append(lease.check)
    try:
        rep.hold(rel)
        yield
        rep.sync()
    except BaseException:
        with contextlib.suppress(Exception):
            rep.sync()
        raise
    finally:
        rep.let_go(rel)
        rep.guards.remove(lease.check)
        lease.release()
