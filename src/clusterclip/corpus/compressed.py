"""Opening a JSON-lines file as a binary stream: plain, gzip, or zstd that fails loudly when truncated; the bytes come
from :func:`clusterclip.store.paths.open_bytes` (a local file, or an object streamed from its store)."""

from __future__ import annotations

import gzip
import io
from pathlib import Path
from typing import Any

from clusterclip.store.paths import is_remote, open_bytes


def _raw(path: Path) -> io.BufferedIOBase:
    """The bytes of ``path``: the local file, or the object a working-copy path names, streamed."""
    return open_bytes(path) if is_remote(path) else open(path, "rb")  # type: ignore[return-value]


def open_plain(path: Path) -> io.BufferedIOBase:
    """``path`` opened for reading bytes, as is."""
    return _raw(path)


class _Gzip(gzip.GzipFile):
    """A gzip stream that closes the file it reads (``gzip.open`` of a name does; of a file object it does not)."""

    def close(self) -> None:
        raw = self.fileobj
        try:
            super().close()
        finally:
            if raw is not None:
                raw.close()


def open_gzip(path: Path) -> io.BufferedIOBase:
    """``path`` opened for reading the bytes its gzip members decompress to."""
    return _Gzip(fileobj=_raw(path), mode="rb")  # type: ignore[return-value]


def open_zstd(path: Path) -> io.BufferedIOBase:
    """``path`` opened for reading the bytes its zstd frames decompress to (:class:`ZstdStream`)."""
    return io.BufferedReader(ZstdStream(path), buffer_size=1 << 20)


class ZstdStream(io.RawIOBase):
    """Decompress every zstd frame of a file and fail loudly on a truncated last frame.

    ``zstandard``'s stream reader ends silently at a truncated frame, which would drop documents
    without a word; here a frame that has not reached its end when the file does is an error.
    """

    def __init__(self, path: Path, chunk: int = 1 << 20) -> None:
        import zstandard

        self._zstd = zstandard
        self._fh = _raw(path)
        self._chunk = chunk
        self._dobj = zstandard.ZstdDecompressor().decompressobj()
        self._pending = b""
        self._in_frame = False

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        while not self._pending:
            data = self._fh.read(self._chunk)
            if not data:
                if self._in_frame:
                    raise EOFError("zstd stream ends inside a frame")
                return 0
            while data:
                self._in_frame = True
                self._pending += self._dobj.decompress(data)
                if not self._dobj.eof:
                    break
                data = self._dobj.unused_data
                self._dobj = self._zstd.ZstdDecompressor().decompressobj()
                self._in_frame = False
        n = min(len(buf), len(self._pending))
        buf[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def close(self) -> None:
        self._fh.close()
        super().close()
