"""Rows of 1-d ``.npy`` files, streamed: read in chunks through a memory map, and appended by an atomic
rewrite that never holds the whole array (for runs that grow: ``clusterclip add``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from clusterclip.errors import ClusterClipError
from clusterclip.store.files import atomic_path, load_npy

COPY_ROWS = 1 << 16


def npy_rows(path: Path, stop: int, chunk: int = COPY_ROWS) -> Iterator[np.ndarray]:
    """Rows ``[0, stop)`` of a 1-d ``.npy`` file in chunks, through a read-only memory map (file pages,
    never a copy of the whole array)."""
    arr = load_npy(path, mmap=True)
    if arr.ndim != 1 or arr.shape[0] < stop:
        raise ClusterClipError(f"{path}: expected a 1-d array of at least {stop} rows, got shape {arr.shape}")
    for start in range(0, stop, chunk):
        yield np.array(arr[start:min(start + chunk, stop)])


def append_npy(path: Path, keep: int, new: np.ndarray) -> None:
    """Replace the 1-d array at ``path`` by its first ``keep`` rows followed by ``new``, atomically and
    streamed; the bytes are those ``np.save`` writes for the whole array. ``path`` may already hold the
    result (a re-run after a kill): its first ``keep`` rows are the same either way."""
    new = np.ascontiguousarray(new)
    header = {"descr": np.lib.format.dtype_to_descr(new.dtype), "fortran_order": False,
              "shape": (keep + len(new),)}
    with atomic_path(path) as tmp, open(tmp, "wb") as out:
        np.lib.format.write_array_header_1_0(out, header)
        for block in npy_rows(path, keep):
            out.write(np.ascontiguousarray(block, dtype=new.dtype).tobytes())
        out.write(new.tobytes())
