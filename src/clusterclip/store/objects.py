"""Object storage, the one file-system layer: URLs (``s3://``, ``gs://``, ``hf://``, ``memory://`` ...) through fsspec.

Everything clusterclip reads or writes at a URL goes through these functions: what an object is
(:class:`ObjectInfo`: size, ETag, time, the SHA-256 clusterclip stored with it), listing and globbing below a
prefix, streaming an object in, downloading and uploading whole files, server-side copies, deletes and the
conditional writes of the writer lock. Credentials and endpoints come from each store's standard environment and
config files (``AWS_PROFILE``, ``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ``~/.aws/config``,
``GOOGLE_APPLICATION_CREDENTIALS``, ``HF_TOKEN`` ...), never from clusterclip options. Every failure is one
:class:`StoreError` line naming the URL and the store's reason.

An object appears whole or not at all: a PUT (or a multipart upload, at its completion) is atomic on S3, GCS and
the Hugging Face Hub, so uploads go straight to the final key; on a store without that promise they go to a
temporary key and are moved into place.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import IO, Any, NamedTuple

from clusterclip.errors import ClusterClipError

URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$")
ATOMIC_PUT = frozenset({"s3", "s3a", "gs", "gcs", "memory", "az", "abfs", "abfss", "hf"})
"""Stores where an upload to the final key is never visible half-written."""
BACKENDS = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "hf": "huggingface_hub", "az": "adlfs",
            "abfs": "adlfs"}
"""The package fsspec needs for each store, named when it is missing."""
BLOCK = 8 << 20
"""Read-ahead of a streamed object: what one range request fetches."""
TMP = ".tmp-"


class StoreError(ClusterClipError, OSError):
    """An object-store operation that failed: one line naming the URL and the store's reason."""


class ObjectInfo(NamedTuple):
    """An object as the store lists it: ``size``, ``etag`` (content tag; empty when the store has none),
    ``mtime_ns`` (last modified) and ``sha256`` (stored with it by clusterclip; None when unknown)."""

    size: int
    etag: str
    mtime_ns: int
    sha256: str | None = None

    @property
    def stamp(self) -> str:
        """What changes when the object is rewritten: its ETag, else its size and time."""
        return self.etag or f"{self.size}:{self.mtime_ns}"


def is_url(spec: object) -> bool:
    """Whether ``spec`` is a URL of a store (``scheme://...``); ``file://`` names a local path, not a store."""
    if not isinstance(spec, str):
        return False
    m = URL.match(spec)
    return m is not None and m.group(1).lower() != "file"


def split(url: str) -> tuple[str, str]:
    """``(scheme, netloc/key)`` of a URL, without trailing slashes."""
    m = URL.match(url)
    if m is None:
        raise StoreError(f"{url}: not a URL")
    return m.group(1).lower(), m.group(2).rstrip("/")


def join(url: str, rel: str) -> str:
    """``url/rel`` (``rel`` empty: ``url``)."""
    return f"{url.rstrip('/')}/{rel}" if rel else url.rstrip("/")


_FS: dict[tuple[Any, ...], Any] = {}
ENVIRONMENT = ("AWS_", "GOOGLE_", "GCS", "HF_", "AZURE_")
"""Environment variables of the stores' own configuration: a client is made again when they change."""


def filesystem(scheme: str, url: str = "") -> Any:
    """The fsspec file system of ``scheme`` in this process (listings never cached: other machines write too),
    configured from the store's standard environment as it is now."""
    key = (os.getpid(), scheme, tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(ENVIRONMENT))))
    if key not in _FS:
        import fsspec

        options = {"use_listings_cache": False, "skip_instance_cache": True} if scheme in ("s3", "s3a") else {}
        try:
            _FS[key] = fsspec.filesystem(scheme, **options)
        except ImportError:
            package = BACKENDS.get(scheme, f"the fsspec backend of {scheme}://")
            raise StoreError(f"{url or scheme + '://'}: reading and writing {scheme}:// needs the {package} package: "
                             f"pip install {package}" + (" (or 'clusterclip[s3]')" if package == "s3fs" else "")
                             ) from None
        except ValueError as exc:
            raise StoreError(f"{url or scheme + '://'}: no store answers to {scheme}:// ({exc})") from None
    return _FS[key]


def _fs(url: str) -> tuple[Any, str, str]:
    scheme, path = split(url)
    return filesystem(scheme, url), scheme, path


def failure(url: str, exc: BaseException) -> StoreError:
    """One line for a failed store operation on ``url``: what the store said, and the way out when it is known."""
    name = type(exc).__name__
    text = " ".join(str(exc).split())[:200] or name
    if isinstance(exc, FileNotFoundError):
        why = "no such object or prefix"
    elif isinstance(exc, PermissionError) or "AccessDenied" in text or "Forbidden" in text:
        why = f"access denied ({text}); the store's credentials come from its standard environment and config files"
    elif "NoCredentials" in name or "credentials" in text.lower():
        why = (f"no credentials ({text}); set them the store's usual way (AWS_PROFILE or AWS_ACCESS_KEY_ID, "
               "GOOGLE_APPLICATION_CREDENTIALS, HF_TOKEN)")
    elif "EndpointConnection" in name or "Connect" in name or "connect" in text.lower():
        why = f"cannot reach the store ({text}); check the network and AWS_ENDPOINT_URL"
    else:
        why = text
    return StoreError(f"{url}: {why}")


@contextlib.contextmanager
def _calling(url: str) -> Iterator[None]:
    try:
        yield
    except StoreError:
        raise
    except (OSError, ValueError, RuntimeError) as exc:
        raise failure(url, exc) from None
    except Exception as exc:
        if type(exc).__module__.split(".")[0] in ("botocore", "aiobotocore", "google", "huggingface_hub", "aiohttp"):
            raise failure(url, exc) from None
        raise


def _mtime_ns(meta: dict[str, Any]) -> int:
    for key in ("LastModified", "mtime", "updated", "last_modified", "created"):
        value = meta.get(key)
        if isinstance(value, datetime):
            return int(value.timestamp() * 1e9)
        if isinstance(value, (int, float)) and value:
            return int(value * 1e9)
        if isinstance(value, str) and value:
            with contextlib.suppress(ValueError):
                return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1e9)
    return 0


def _info(meta: dict[str, Any], sha256: str | None = None) -> ObjectInfo:
    etag = meta.get("ETag") or meta.get("etag") or meta.get("md5Hash") or meta.get("blob_id") or ""
    found = (meta.get("metadata") or {}).get("sha256") if isinstance(meta.get("metadata"), dict) else None
    return ObjectInfo(int(meta.get("size") or 0), str(etag).strip('"'), _mtime_ns(meta), sha256 or found)


def info(url: str) -> ObjectInfo | None:
    """The object at ``url`` (None when there is none; a prefix with objects below it is no object), with the
    SHA-256 clusterclip stored beside it when the store keeps user metadata."""
    fs, scheme, path = _fs(url)
    with _calling(url):
        if scheme in ("s3", "s3a"):
            bucket, _, key = path.partition("/")
            if not key:
                return None
            try:
                head = fs.call_s3("head_object", Bucket=bucket, Key=key)
            except FileNotFoundError:
                return None
            return ObjectInfo(int(head["ContentLength"]), str(head.get("ETag", "")).strip('"'),
                              _mtime_ns(head), (head.get("Metadata") or {}).get("sha256"))
        try:
            meta = fs.info(path)
        except FileNotFoundError:
            return None
        return _info(meta) if meta.get("type") == "file" else None


def is_prefix(url: str) -> bool:
    """Whether objects lie below ``url/`` (a "folder" of the store)."""
    fs, _, path = _fs(url)
    with _calling(url):
        try:
            return bool(fs.ls(path, detail=False))
        except FileNotFoundError:
            return False


def listing(url: str) -> dict[str, ObjectInfo]:
    """Every object below ``url/``, by its path relative to ``url`` (empty when there is none)."""
    fs, _, path = _fs(url)
    with _calling(url):
        try:
            found = fs.find(path, detail=True)
        except FileNotFoundError:
            return {}
    base = fs._strip_protocol(path).rstrip("/") + "/"
    return {name[len(base):]: _info(meta) for name, meta in sorted(found.items())
            if name.startswith(base) and meta.get("type", "file") == "file"}


def glob(pattern: str) -> list[str]:
    """The URLs of the objects matching ``pattern`` (``*``, ``?``, ``[...]``, ``**``), sorted."""
    fs, scheme, path = _fs(pattern)
    with _calling(pattern):
        names = fs.glob(path)
    return sorted(f"{scheme}://{fs._strip_protocol(n)}" for n in names)


def open_read(url: str) -> IO[bytes]:
    """``url`` opened for streaming its bytes (seekable; range requests of :data:`BLOCK` bytes)."""
    fs, _, path = _fs(url)
    with _calling(url):
        return fs.open(path, "rb", block_size=BLOCK)


def digest(url: str, chunk: int = 1 << 22) -> str:
    """SHA-256 of the object's bytes, streamed (nothing stored)."""
    h = hashlib.sha256()
    with open_read(url) as fh, _calling(url):
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def download(url: str, dest: Path) -> None:
    """Stream ``url`` into the local file ``dest`` (through a temp file beside it, renamed into place)."""
    fs, _, path = _fs(url)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{TMP}{dest.name}.{os.getpid()}")
    try:
        with _calling(url):
            fs.get_file(path, str(tmp))
        os.replace(tmp, dest)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def upload(src: Path, url: str, sha256: str | None = None) -> ObjectInfo:
    """Put the local file ``src`` at ``url`` (its ``sha256`` stored with it where the store keeps user metadata);
    the object as the store then lists it."""
    fs, scheme, path = _fs(url)
    extra = {"Metadata": {"sha256": sha256}} if sha256 and scheme in ("s3", "s3a") else {}
    with _calling(url):
        if scheme in ATOMIC_PUT:
            fs.put_file(str(src), path, **extra)
        else:
            tmp = f"{path.rsplit('/', 1)[0]}/{TMP}{path.rsplit('/', 1)[-1]}.{os.getpid()}"
            fs.put_file(str(src), tmp, **extra)
            fs.mv(tmp, path)
    found = info(url)
    if found is None:
        raise StoreError(f"{url}: the upload finished but the store does not list the object")
    return found._replace(sha256=sha256 or found.sha256)


def copy(src: str, dst: str) -> None:
    """Copy object ``src`` to ``dst`` inside the store (no bytes through this machine where the store can)."""
    fs, _, a = _fs(src)
    _, _, b = _fs(dst)
    with _calling(dst):
        fs.copy(a, b)


def delete(urls: list[str]) -> None:
    """Delete the objects ``urls`` (those already gone are fine)."""
    if not urls:
        return
    fs, _, _ = _fs(urls[0])
    for url in urls:
        with _calling(url), contextlib.suppress(FileNotFoundError):
            fs.rm_file(split(url)[1])


def read_tagged(url: str) -> tuple[bytes, str] | None:
    """The object's bytes and ETag from one request (None when missing): what a conditional write then matches."""
    fs, scheme, path = _fs(url)
    with _calling(url):
        try:
            if scheme in ("s3", "s3a"):
                from fsspec.asyn import sync

                bucket, _, key = path.partition("/")
                return sync(fs.loop, _get_tagged, fs, bucket, key)
            data = fs.cat_file(path)
        except FileNotFoundError:
            return None
    found = info(url)
    return data, found.stamp if found else ""


async def _get_tagged(fs: Any, bucket: str, key: str) -> tuple[bytes, str]:
    got = await fs._call_s3("get_object", Bucket=bucket, Key=key)
    try:
        data = await got["Body"].read()
    finally:
        got["Body"].close()
    return data, str(got.get("ETag", "")).strip('"')


def put_new(url: str, data: bytes) -> str | None:
    """Write ``data`` at ``url`` only if no object is there; its ETag, or None when one was there already."""
    fs, _, path = _fs(url)
    with _calling(url):
        try:
            fs.pipe_file(path, data, mode="create")
        except FileExistsError:
            return None
        except (TypeError, NotImplementedError):  # no conditional writes: checked, then written
            if fs.exists(path):
                return None
            fs.pipe_file(path, data)
    found = info(url)
    return found.stamp if found else ""


def put_matching(url: str, data: bytes, etag: str) -> str | None:
    """Overwrite ``url`` with ``data`` only if its ETag is still ``etag``; the new ETag, or None when it changed."""
    fs, scheme, path = _fs(url)
    with _calling(url):
        if scheme in ("s3", "s3a"):
            try:
                fs.pipe_file(path, data, IfMatch=f'"{etag}"')
            except (FileExistsError, FileNotFoundError):
                return None
            except OSError as exc:
                if "pre-condition" in str(exc) or "PreconditionFailed" in str(exc):
                    return None
                raise
        else:
            now = info(url)
            if now is None or now.stamp != etag:
                return None
            fs.pipe_file(path, data)
    found = info(url)
    return found.stamp if found else ""
