"""Duplicate document ids without holding every id hash: an external hash partition.

The corpus stage hashes every id (64 bits) to refuse or count duplicates. Held in memory, with the sort that
finds the repeats, that is about 24 bytes per document on the driver: 24 GB at 10^9 documents. Here the
``(hash, key)`` pairs go to ``2**bucket_bits`` scratch files by the hash's top bits (in flushes of
``flush_rows`` pairs), and the repeats are found one file at a time: memory is one flush plus one bucket
(16 bytes x N / 256 by default, 63 MB at 10^9), disk 16 bytes per document until the check ends.

A *key* orders documents like their corpus index: the index itself, or (Ray engine) ``unit << UNIT_SHIFT |
row in unit``, mapped to the index once the units' sizes are known.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

BUCKET_BITS = 8
FLUSH_ROWS = 1 << 20
UNIT_SHIFT = 40
"""Bits of the row within a work unit in a Ray key (units of up to 2**40 documents)."""


class IdSpill:
    """Id hashes spilled to ``folder`` by their top bits; :meth:`duplicates` counts the repeats."""

    def __init__(self, folder: Path, bucket_bits: int = BUCKET_BITS, flush_rows: int = FLUSH_ROWS) -> None:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        self.folder, self.bucket_bits, self.flush_rows = folder, bucket_bits, flush_rows
        self.n = 0
        self.unit_starts: np.ndarray | None = None
        self._pending: list[np.ndarray] = []
        self._held = 0

    def units(self, sizes: list[int]) -> None:
        """The documents per work unit, in order: keys are then ``unit << UNIT_SHIFT | row`` (Ray engine)."""
        self.unit_starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])

    def index(self, key: int) -> int:
        """The corpus index of a key."""
        if self.unit_starts is None:
            return key
        return int(self.unit_starts[key >> UNIT_SHIFT]) + (key & ((1 << UNIT_SHIFT) - 1))

    def add(self, hashes: np.ndarray, first_key: int) -> None:
        """The hashes of consecutive documents whose first has key ``first_key``."""
        keys = np.arange(first_key, first_key + hashes.size, dtype=np.uint64)
        self._pending.append(np.stack([np.asarray(hashes, np.uint64), keys], axis=1))
        self._held += hashes.size
        self.n += hashes.size
        if self._held >= self.flush_rows:
            self.flush()

    def flush(self) -> None:
        """Write the pending pairs to their bucket files."""
        if not self._pending:
            return
        pairs = np.concatenate(self._pending)
        self._pending, self._held = [], 0
        shift = np.uint64(64 - self.bucket_bits) if self.bucket_bits else None
        bucket = np.zeros(len(pairs), np.int64) if shift is None else (pairs[:, 0] >> shift).astype(np.int64)
        order = np.argsort(bucket, kind="stable")
        pairs, bucket = pairs[order], bucket[order]
        cuts = np.flatnonzero(np.diff(bucket, prepend=-1, append=1 << self.bucket_bits))
        for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
            with open(self.folder / f"bucket-{int(bucket[a]):04d}.bin", "ab") as f:
                f.write(pairs[a:b].tobytes())

    def duplicates(self) -> tuple[int, tuple[int, int] | None]:
        """The number of repeated ids (documents whose id hash occurred before) and the earliest repeat
        ``(first, second)``: ``second`` the smallest index whose hash occurred before, ``first`` where it did.
        The scratch files are removed."""
        self.flush()
        count, best = 0, None
        try:
            for path in sorted(self.folder.glob("bucket-*.bin")):
                pairs = np.fromfile(path, dtype=np.uint64).reshape(-1, 2)
                order = np.lexsort((pairs[:, 1], pairs[:, 0]))
                h, k = pairs[order, 0], pairs[order, 1]
                repeat = np.flatnonzero(h[1:] == h[:-1]) + 1
                count += int(repeat.size)
                if repeat.size:
                    at = repeat[np.argmin(k[repeat])]
                    found = (int(k[np.searchsorted(h, h[at])]), int(k[at]))
                    best = found if best is None or found[1] < best[1] else best
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
        return count, None if best is None else (self.index(best[0]), self.index(best[1]))
