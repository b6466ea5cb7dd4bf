"""Reading a path wherever its bytes are: a local file, or an object that a working-copy path names
(:mod:`clusterclip.store.replica`), streamed from the store without a download first.

The readers of user inputs and of corpus parts open, stat and list through these functions only, so one path type
serves a local file and ``s3://bucket/data/part-0.jsonl.gz``: on disk each is the ``open``/``stat``/``os.walk`` it
replaces, byte for byte.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, NamedTuple

from clusterclip.store import objects as O
from clusterclip.store.replica import local_path, owner

GLOB_CHARS = frozenset("*?[")


def is_remote(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names an object of a store (a URL, or a working-copy path)."""
    return O.is_url(path) or owner(path) is not None


def inputs_of(spec: str | os.PathLike[str]) -> list[Path]:
    """The paths a user's input names: a URL with a glob pattern (``s3://b/data/*.jsonl.gz``, ``**`` for any depth)
    expanded in the store, sorted (none matching is one line), any other input as its one (working-copy) path."""
    if O.is_url(spec) and GLOB_CHARS & set(str(spec)):
        found = O.glob(str(spec))
        if not found:
            raise O.StoreError(f"{spec}: no object matches the pattern")
        return [local_path(url) for url in found]
    return [local_path(spec)]


def name_of(spec: str | os.PathLike[str]) -> str:
    """How an input is recorded: a URL as given (without a trailing slash), a local path normalised."""
    return str(spec).rstrip("/") if O.is_url(spec) else str(Path(spec))


def kind(path: Path) -> str | None:
    """``"file"``, ``"dir"``, ``"other"`` (a FIFO, socket or device) or None (missing); in a store, an object is a
    file and a prefix with objects below it a folder."""
    found = owner(path)
    if found is not None:
        rep, rel = found
        if rep.stat(rel) is not None:
            return "file"
        return "dir" if O.is_prefix(rep.url(rel)) else None
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EBADF):
            return None
        raise
    return "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"


def size_time(path: Path) -> tuple[int, int]:
    """Size and modification time (ns) of a file or object; ``FileNotFoundError`` when it is missing."""
    found = owner(path)
    if found is None:
        st = os.stat(path)
        return st.st_size, st.st_mtime_ns
    info = found[0].stat(found[1])
    if info is None:
        raise FileNotFoundError(2, "no such object", found[0].url(found[1]))
    return info.size, info.mtime_ns


def files_below(path: Path) -> list[Path] | None:
    """Every object below the store prefix ``path``, as working-copy paths, sorted; None for a local folder (whose
    caller walks it itself)."""
    found = owner(path)
    if found is None:
        return None
    rep, rel = found
    return [path / sub for sub in rep.listing(rel)]


def open_bytes(path: str | os.PathLike[str]) -> IO[bytes]:
    """``path`` opened for reading bytes: ``open(path, "rb")``, or the object streamed (the local copy when it is
    current)."""
    found = owner(path)
    if found is None:
        return open(path, "rb")
    source = found[0].source(found[1])
    return open(source, "rb") if isinstance(source, str) else source


def source(path: str | os.PathLike[str]) -> str | os.PathLike[str] | IO[bytes]:
    """What pyarrow reads ``path`` from: the path itself, or for an object a seekable stream of it (footers and
    row groups fetched by range, nothing downloaded first)."""
    found = owner(path)
    return path if found is None else found[0].source(found[1])


def read_bytes(path: Path) -> bytes:
    """The whole content of a (small) file (``Path.read_bytes``) or object."""
    if owner(path) is None:
        return Path(path).read_bytes()
    with open_bytes(path) as fh:
        return fh.read()


def discard(path: str | os.PathLike[str]) -> None:
    """Remove a file (``os.unlink``), or the object a working-copy path names, here and in its store."""
    found = owner(path)
    if found is None:
        os.unlink(path)
    else:
        found[0].remove(found[1])


def for_arrow(paths: list[Path]) -> tuple[list[str], Any]:
    """``paths`` as a reader on another machine opens them (Ray Data's ``read_parquet``, ``read_numpy``): local paths
    as they are with no file system, objects of one store by their keys with that store's file system (as pyarrow
    takes it), so a worker reads from the store, never from this machine's working copy."""
    found = [owner(p) for p in paths]
    if not any(found):
        return [str(p) for p in paths], None
    if not all(found):
        raise O.StoreError(f"{paths[0]}: files of one read are partly local and partly in a store")
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    urls = [O.split(rep.url(rel)) for rep, rel in found]  # type: ignore[misc]
    schemes = {scheme for scheme, _ in urls}
    if len(schemes) > 1:
        raise O.StoreError(f"{paths[0]}: files of one read are in {len(schemes)} stores")
    return [key for _, key in urls], PyFileSystem(FSSpecHandler(O.filesystem(schemes.pop())))


# ------------------------------------------------------------------ what an artifact is now, for the records


class Stamp(NamedTuple):
    """An artifact as it is now: ``size``, ``mtime_ns`` and, in object storage, ``etag`` (None on disk)."""

    size: int
    mtime_ns: int
    etag: str | None = None


def stamp(path: Path) -> Stamp:
    """``path`` now (``FileNotFoundError`` when it is missing): ``os.stat``, or the object a working-copy path
    names, as the store lists it."""
    found = owner(path)
    if found is None:
        st = path.stat()
        return Stamp(st.st_size, st.st_mtime_ns)
    rep, rel = found
    info = rep.stat(rel)
    if info is None:
        raise FileNotFoundError(2, "no such object", rep.url(rel))
    return Stamp(info.size, info.mtime_ns, info.stamp)


def unchanged(meta: Mapping[str, Any], now: Stamp) -> bool:
    """The quick check: ``now`` has the size and the time (in a store: the ETag) that ``meta`` records."""
    if meta.get("size") != now.size:
        return False
    if now.etag is not None:
        return meta.get("etag") == now.etag
    return meta.get("mtime_ns") == now.mtime_ns


def adopt(meta: dict[str, Any], now: Stamp) -> None:
    """Record ``now``'s time (and ETag) in ``meta``, whose size and checksum were found to match."""
    meta["mtime_ns"] = now.mtime_ns
    if now.etag is not None:
        meta["etag"] = now.etag


def artifact_meta(path: Path, known: Mapping[str, Any] | None, digest: Any) -> dict[str, Any]:
    """What a record lists for the artifact at ``path``: size, time and SHA-256 (``digest(path)``), plus the ETag in a
    store; ``known`` (recorded metadata of an artifact left untouched) is kept when it still matches."""
    found = owner(path)
    if found is None:
        st = os.stat(path)
        if known is not None and known.get("size") == st.st_size and known.get("mtime_ns") == st.st_mtime_ns:
            return dict(known)
        return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest(path)}
    rep, rel = found
    info = rep.meta(rel) if known is None else rep.stat(rel)
    if info is None:
        raise FileNotFoundError(2, "no such object", rep.url(rel))
    if known is not None and unchanged(known, Stamp(info.size, info.mtime_ns, info.stamp)):
        return dict(known)
    if info.sha256 is None:
        info = rep.meta(rel)
    return {"size": info.size, "mtime_ns": info.mtime_ns, "sha256": info.sha256, "etag": info.stamp}
