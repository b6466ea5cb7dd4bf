"""Opening a JSON-lines file as a binary stream: plain, gzip, or zstd that fails loudly when truncated."""

from __future__ import annotations

import gzip
import io
from pathlib import Path
from typing import Any


def open_plain(path: Path) -> io.BufferedIOBase:
    """``path`` opened for reading bytes, as is."""
    return open(path, "rb")


def open_gzip(path: Path) -> io.BufferedIOBase:
    """``path`` opened for reading the bytes its gzip members decompress to."""
    return gzip.open(path, "rb")  # type: ignore[return-value]


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
        self._fh = open(path, "rb")  # noqa: SIM115 - closed in close()
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
