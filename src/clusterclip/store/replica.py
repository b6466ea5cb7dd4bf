"""Working copies of object storage: a store's objects as local files, so that every stage reads and writes plain
paths while the run directory (or the export folder, or an input) lives at a URL.

Every URL ``scheme://netloc/key`` has one local path in this process, ``TMP/clusterclip-remote-XXXX/scheme/netloc/key``
(:func:`local_path`), and every such path, also one of another process or machine, names its URL again
(:func:`url_of`): a path a driver hands to a Ray task on another node names the same object there, and the task
reads and writes it through its own working copy. What a working copy holds is fetched when asked for and sent to
the store when written:

* :meth:`Replica.fetch` downloads a file (or every file below a prefix) that is missing here or whose ETag changed
  since it was fetched; :func:`source` streams one instead, without storing it;
* an atomic write of the floor is uploaded as soon as it is renamed into place (:func:`published`), so files reach
  the store in the order they were written;
* before a JSON file (a stage record, a journal, a list of finished shards) is uploaded, every other change of the
  working copy is sent (:meth:`Replica.sync`): removed JSON files are deleted first, files written another way
  are uploaded (or copied inside the store when they were renamed from a file already there), then the JSON files,
  then the other removed files are deleted. A record therefore never reaches the store before the files it lists,
  which is the guarantee of the run directory on disk (written last, after its artifacts) kept without a rename.

The scratch folder is this process's own (removed when it exits): a killed process leaves nothing half-sent that a
later one would trust, because the store is the only state a later process reads.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, NamedTuple

from clusterclip.store import objects as O

MARK = "clusterclip-remote-"
NO_NETLOC = "_"
TMP_PREFIX = ".tmp-"
LOCK_NAME = ".lock"
_DISPLAY = re.compile(r"(?:[^\s'\"`(]*/)?" + re.escape(MARK) + r"[A-Za-z0-9_-]+/([^/\s'\"`]+)/([^/\s'\"`:]+)")


class Entry(NamedTuple):
    """What this process knows of one file of a working copy: the object (``info``) it matches and the local
    file's size, time and inode when it matched."""

    info: O.ObjectInfo
    size: int
    mtime_ns: int
    ino: int


def _local_key(st: os.stat_result) -> tuple[int, int, int]:
    return st.st_size, st.st_mtime_ns, st.st_ino


def _sha256(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


class Replica:
    """The working copy of one store root (``scheme://netloc``) in this process, under ``root``."""

    def __init__(self, base: str, root: Path) -> None:
        self.base, self.root = base, root
        self.known: dict[str, Entry] = {}
        self.guards: list[Callable[[], None]] = []
        """Called before anything is written to the store (the writer lock refuses to go on once its lease is lost)."""
        self.held: set[str] = set()
        """Folders whose writer lock this process holds (:meth:`hold`)."""
        self._lock = threading.RLock()

    def url(self, rel: str) -> str:
        return O.join(self.base, rel)

    def local(self, rel: str) -> Path:
        return self.root / rel if rel else self.root

    # ---------------------------------------------------------------- reading
    def fetch(self, rel: str) -> Path:
        """The local copy of object ``rel``, or of every object below prefix ``rel``, brought up to date (downloaded
        when missing here or changed in the store; a local change not yet sent is kept)."""
        with self._lock:
            if self._trusted(rel):
                return self.local(rel)
            found = O.info(self.url(rel)) if rel else None
            if found is not None:
                self._fetch_file(rel, found)
            else:
                for sub, meta in O.listing(self.url(rel)).items():
                    self._fetch_file(f"{rel}/{sub}" if rel else sub, meta)
            return self.local(rel)

    def prefetch(self, rel: str) -> None:
        """Open the folder ``rel``: its local folder made when the store holds objects below it, and every JSON file
        below it (the records, small) fetched, so that a check for a record finds it; the rest waits for
        :meth:`fetch`."""
        with self._lock:
            found = O.listing(self.url(rel))
            if found:
                self.local(rel).mkdir(parents=True, exist_ok=True)
            for sub, meta in found.items():
                if sub.endswith(".json"):
                    self._fetch_file(f"{rel}/{sub}" if rel else sub, meta)

    def hold(self, rel: str) -> None:
        """This process took the writer lock of folder ``rel``: its JSON files (records, journals: only the lock's
        holder writes them) are brought up to date from one listing, and from then on until :meth:`let_go` read
        here without a request (what this process knows of them is what the store holds, or newer)."""
        with self._lock:
            found = O.listing(self.url(rel))
            for sub, meta in found.items():
                if sub.endswith(".json"):
                    self._fetch_file(f"{rel}/{sub}" if rel else sub, meta)
            prefix = f"{rel}/" if rel else ""
            for known in [r for r, e in self.known.items() if r.endswith(".json") and r.startswith(prefix)
                          and r[len(prefix):] not in found]:
                with contextlib.suppress(FileNotFoundError):
                    if _local_key(os.stat(self.local(known))) == self.known[known][1:]:
                        os.unlink(self.local(known))  # removed from the store since it was fetched
                del self.known[known]
            self.held.add(rel)

    def let_go(self, rel: str) -> None:
        """The writer lock of folder ``rel`` is released: its JSON files are asked for again."""
        with self._lock:
            self.held.discard(rel)

    def _trusted(self, rel: str) -> bool:
        return rel.endswith(".json") and any(not h or rel.startswith(h + "/") for h in self.held)

    def _fetch_file(self, rel: str, found: O.ObjectInfo) -> None:
        path, entry = self.local(rel), self.known.get(rel)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            st = None
        if st is not None and (entry is None or entry.info.stamp == found.stamp):
            if entry is None or _local_key(st) != (entry.size, entry.mtime_ns, entry.ino):
                return  # written here and not sent yet: the local file is the newer one
            return  # up to date
        if path.is_dir():
            raise O.StoreError(f"{self.url(rel)}: an object and a prefix of the same name; rename one of them")
        O.download(self.url(rel), path)
        st = os.stat(path)
        self.known[rel] = Entry(found, *_local_key(st))

    def current(self, rel: str) -> bool:
        """Whether the local copy of ``rel`` is what the store holds now (one request)."""
        entry = self.known.get(rel)
        if entry is None:
            return False
        try:
            st = os.stat(self.local(rel))
        except FileNotFoundError:
            return False
        found = O.info(self.url(rel))
        return found is not None and found.stamp == entry.info.stamp and _local_key(st) == entry[1:]

    def here(self, rel: str) -> bool:
        """Whether ``rel`` is read from the local copy: written here and not sent yet, or current (one request)."""
        return (rel not in self.known and self.local(rel).is_file()) or self.current(rel)

    def source(self, rel: str) -> str | IO[bytes]:
        """Where to read ``rel`` from: the local copy when :meth:`here`, else a stream of the object (nothing
        downloaded first)."""
        return str(self.local(rel)) if self.here(rel) else O.open_read(self.url(rel))

    def stat(self, rel: str) -> O.ObjectInfo | None:
        """The object ``rel`` as the store lists it now (with its stored SHA-256, if any)."""
        return O.info(self.url(rel))

    def listing(self, rel: str) -> dict[str, O.ObjectInfo]:
        """Every object below prefix ``rel`` (keys relative to it)."""
        return O.listing(self.url(rel))

    def meta(self, rel: str) -> O.ObjectInfo:
        """The object ``rel`` with its SHA-256 (what this process sent, what the store keeps beside it, or, for
        an object another process wrote into a store without user metadata, its bytes hashed as they stream)."""
        found = O.info(self.url(rel))
        if found is None:
            raise FileNotFoundError(2, "no such object", self.url(rel))
        entry = self.known.get(rel)
        if found.sha256 is None and entry is not None and entry.info.stamp == found.stamp and entry.info.sha256:
            found = found._replace(sha256=entry.info.sha256)
        return found if found.sha256 else found._replace(sha256=O.digest(self.url(rel)))

    def digest(self, rel: str) -> str:
        """SHA-256 of the object's bytes as the store holds them (the local copy when it is current)."""
        return _sha256(self.local(rel)) if self.here(rel) else O.digest(self.url(rel))

    # ---------------------------------------------------------------- writing
    def published(self, rel: str) -> None:
        """``rel`` was just renamed into place here: send it (a JSON file after every other change, :meth:`sync`)."""
        with self._lock:
            if rel.endswith(".json"):
                self.sync()
            else:
                self._guard()
                self._put(rel, os.stat(self.local(rel)))

    def sync(self) -> None:
        """Send every change of the working copy to the store, in the order that keeps records last."""
        with self._lock:
            present = dict(self._walk())
            gone = [rel for rel in self.known if rel not in present]
            changed = [rel for rel, st in present.items() if self._changed(rel, st)]
            if not gone and not changed:
                return
            self._guard()
            vanished = {self.known[rel][1:]: rel for rel in gone}
            moves = {rel: vanished.get(_local_key(present[rel])) for rel in changed if rel not in self.known}
            sources = set(moves.values())
            self._delete([rel for rel in gone if rel.endswith(".json") and rel not in sources])
            for rel in sorted(changed, key=lambda r: r.endswith(".json")):
                self._put(rel, present[rel], moves.get(rel))
            self._delete([rel for rel in gone if rel in self.known])

    def remove(self, rel: str) -> None:
        """Remove ``rel`` (a file, or everything below a prefix) here and in the store, now."""
        with self._lock:
            path = self.local(rel)
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            self._guard()
            found = O.info(self.url(rel))
            below = [] if found is not None else [f"{rel}/{sub}" for sub in O.listing(self.url(rel))]
            O.delete([self.url(r) for r in ([rel] if found is not None else below)])
            for r in [r for r in self.known if r == rel or r.startswith(rel + "/")]:
                del self.known[r]

    def _guard(self) -> None:
        for guard in self.guards:
            guard()

    def _walk(self) -> Iterator[tuple[str, os.stat_result]]:
        if not self.root.is_dir():
            return
        for folder, dirs, files in os.walk(self.root):
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
            for name in files:
                if name.startswith(TMP_PREFIX) or name == LOCK_NAME:
                    continue
                full = os.path.join(folder, name)
                with contextlib.suppress(FileNotFoundError):
                    yield os.path.relpath(full, self.root).replace(os.sep, "/"), os.stat(full)

    def _changed(self, rel: str, st: os.stat_result) -> bool:
        entry = self.known.get(rel)
        return entry is None or _local_key(st) != entry[1:]

    def _put(self, rel: str, st: os.stat_result, copied_from: str | None = None) -> None:
        path = self.local(rel)
        if copied_from is not None:
            O.copy(self.url(copied_from), self.url(rel))
            found = O.info(self.url(rel))
            sha = self.known[copied_from].info.sha256
            info = (found or self.known[copied_from].info)._replace(sha256=sha)
        else:
            info = O.upload(path, self.url(rel), _sha256(path))
        self.known[rel] = Entry(info, *_local_key(st))

    def _delete(self, rels: list[str]) -> None:
        O.delete([self.url(r) for r in rels])
        for r in rels:
            self.known.pop(r, None)


class _Registry:
    """This process's working copies and their scratch folder (a forked child starts its own)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.base: Path | None = None
        self.replicas: dict[str, Replica] = {}
        self.lock = threading.Lock()

    def scratch(self) -> Path:
        if self.base is None:
            from clusterclip.store.scratch import scratch_folder  # only a process that reaches a store needs one

            self.base = scratch_folder(MARK)
        return self.base


_REG = _Registry()


def _registry() -> _Registry:
    global _REG
    if _REG.pid != os.getpid():
        _REG = _Registry()
    return _REG


def replica(base: str) -> Replica:
    """The working copy of store root ``base`` (``scheme://netloc``) in this process."""
    reg = _registry()
    with reg.lock:
        if base not in reg.replicas:
            scheme, netloc = O.split(base)
            reg.replicas[base] = Replica(base, reg.scratch() / scheme / (netloc or NO_NETLOC))
        return reg.replicas[base]


def _parse(path: str | os.PathLike[str]) -> tuple[str, str] | None:
    """``(store root, key)`` of a working-copy path (of any process), or None for any other path."""
    text = os.fspath(path)
    if MARK not in text:
        return None
    parts = Path(os.path.abspath(text)).parts
    for i, part in enumerate(parts):
        if part.startswith(MARK) and len(parts) > i + 2:
            netloc = "" if parts[i + 2] == NO_NETLOC else parts[i + 2]
            return f"{parts[i + 1]}://{netloc}", "/".join(parts[i + 3:])
    return None


def owner(path: str | os.PathLike[str]) -> tuple[Replica, str] | None:
    """The working copy of this process that ``path`` (a working-copy path of any process) belongs to, and the
    object's key in it; None for a path outside every working copy."""
    found = _parse(path)
    return None if found is None else (replica(found[0]), found[1])


def local_path(spec: str | os.PathLike[str]) -> Path:
    """The local path of ``spec``: a URL's place in this process's working copy, a working-copy path of another
    process translated to this one's, any other path as is."""
    if O.is_url(spec):
        scheme, rest = O.split(str(spec))
        netloc, _, key = rest.partition("/")
        return replica(f"{scheme}://{netloc}").local(key)
    found = owner(spec)
    if found is None:
        return Path(spec)
    return found[0].local(found[1])


def url_of(path: str | os.PathLike[str]) -> str | None:
    """The URL a working-copy path names (None for any other path)."""
    found = _parse(path)
    return None if found is None else O.join(found[0], found[1])


def where(path: str | os.PathLike[str]) -> str:
    """How ``path`` is named to the user and in records: its URL, or the path itself."""
    return url_of(path) or os.fspath(path)


def display(text: str) -> str:
    """``text`` with every working-copy path written as its URL (messages name what the user gave)."""
    if MARK not in text:
        return text
    return _DISPLAY.sub(lambda m: f"{m.group(1)}://{'' if m.group(2) == NO_NETLOC else m.group(2)}", text)


def published(path: str | os.PathLike[str]) -> None:
    """``path`` was just written into place: send it to the store when it belongs to a working copy."""
    found = owner(path)
    if found is not None:
        found[0].published(found[1])


def sync(path: str | os.PathLike[str]) -> None:
    """Send every change of the working copy ``path`` belongs to (nothing for a plain path)."""
    found = owner(path)
    if found is not None:
        found[0].sync()


def ensure_local(path: str | os.PathLike[str]) -> Path:
    """``path`` as a local file that can be memory-mapped: a working-copy file fetched first when needed."""
    found = owner(path)
    if found is None:
        return Path(path)
    rep, rel = found
    if not (rel not in rep.known and rep.local(rel).exists()):
        rep.fetch(rel)
    return rep.local(rel)
