"""Plan integrity at training time: per-block checksums written with the plan, verified on first read.

``build_plan`` computes one CRC-32 per block of ``BLOCK_ENTRIES`` (2^20) entries of the order while it
writes them; the plan stage stores them as ``plans/<name>/blocks.npy`` (uint32 ``[ceil(length / 2^20)]``)
and records, in ``plan.json`` under ``"blocks"``, the block size, the checksum and the valid index range
``[0, n_docs)``. :class:`PlanReader` is how every consumer reads a plan (the sampler, ``load_plan``,
``reorder_dataset``, ``export``):

* opening it is O(1) in the plan's length: ``plan.npy``'s size is compared with the record (a truncated
  plan is an error here, not a raw ``ValueError`` from ``mmap``) and ``blocks.npy`` is checked against
  the SHA-256 the record holds for it (a few KB even for 10^9 draws);
* a block is verified the first time any of its positions is read: its CRC-32 against ``blocks.npy`` and
  every index against ``[0, n_docs)``, vectorised, once per reader;
* plans of the previous format (no ``blocks.npy``) are verified whole, once, against the SHA-256 of
  ``plan.npy`` in the record, on the first read; a ``plan.npy`` without a record and an array are checked
  for the index range only (``[0, n_docs)`` when the caller knows the corpus size, else ``[0, 2^40)``; the
  sampler refuses a ``plan.npy`` with neither a record nor a known corpus size).

CRC-32 rather than SHA-256: it runs at several GB/s (``zlib``, GIL released), so even a rank that reads
one position in ``world_size`` of every block keeps the sampler's speed; it detects any change of one
index and truncation, which is what a checksum here is for (the record's SHA-256 of every file remains
the cryptographic check, ``clusterclip status --verify``).
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.contract.plan import PLAN_BLOCKS, PLAN_ORDER, PLANS_DIR, PlanRecord, plan_path, plan_stage_name
from clusterclip.contract.plan_locate import (
    PlanIntegrityError,
    plan_command,
    read_record,
    resolve_plan_path,
)
from clusterclip.errors import one_line

__all__ = ["BLOCK_ENTRIES", "CHECKSUM", "MAX_DOCS", "BlockChecksums", "PlanReader", "block_checksums", "open_plan"]

BLOCK_ENTRIES = 1 << 20
"""Plan entries per checksum block (8 MiB of int64)."""
CHECKSUM = "crc32"
MAX_DOCS = 1 << 40
"""Index bound of a plan whose corpus size is unknown (an array, or a ``plan.npy`` without a record)."""


class BlockChecksums:
    """CRC-32 of each block of ``entries`` plan entries, fed chunk by chunk in plan order."""

    def __init__(self, entries: int = BLOCK_ENTRIES) -> None:
        self.entries = entries
        self._done: list[int] = []
        self._crc = 0
        self._fill = 0

    def add(self, chunk: np.ndarray) -> None:
        data = np.ascontiguousarray(chunk, dtype="<i8")
        i = 0
        while i < data.size:
            take = min(self.entries - self._fill, data.size - i)
            self._crc = zlib.crc32(data[i:i + take].data, self._crc)
            self._fill += take
            i += take
            if self._fill == self.entries:
                self._done.append(self._crc)
                self._crc = self._fill = 0

    def finish(self) -> np.ndarray:
        """The checksums, uint32 ``[ceil(length / entries)]`` (the last block may be short)."""
        out = self._done + ([self._crc] if self._fill else [])
        return np.array(out, dtype=np.uint32)


def block_checksums(order: Any, entries: int = BLOCK_ENTRIES) -> np.ndarray:
    """The checksums of an order held as an array (what ``build_plan`` computes while writing)."""
    arr = np.asarray(order)
    h = BlockChecksums(entries)
    for i in range(0, arr.shape[0], entries):
        h.add(arr[i:i + entries])
    return h.finish()


class PlanReader:
    """A plan's order, read with every block verified the first time it is read (see the module docstring).

    ``array`` is the raw order (a read-only memory map for a file); read through :meth:`check`,
    :meth:`read`, :meth:`take` or :meth:`verified`. ``n_docs`` bounds the indices; ``checksums`` (uint32
    per block) and ``sha256`` (of the whole ``plan.npy``, previous format) are what blocks are checked
    against; ``rebuild`` is the command that rebuilds the plan, for messages.
    """

    def __init__(self, array: np.ndarray, *, n_docs: int | None = None, checksums: np.ndarray | None = None,
                 sha256: str | None = None, rebuild: str | None = None, path: Path | None = None,
                 record: PlanRecord | None = None,
                 entries: int = BLOCK_ENTRIES) -> None:
        where = str(path) if path is not None else "plan array"
        if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
            raise PlanIntegrityError(f"{where}: a plan is a 1-D integer array of document indices, got "
                                     f"{array.dtype} {array.shape}")
        self.array = array
        self.length = int(array.shape[0])
        self.n_docs = n_docs
        self.checksums = checksums
        self.sha256 = sha256
        self.where = where
        self.rebuild = rebuild
        self.path = path
        self.record = record
        self.entries = entries
        self._ok = np.zeros(-(-self.length // entries), dtype=bool)
        self._all = self.length == 0

    # -- opening

    @classmethod
    def open(cls, plan: str | os.PathLike[str], plan_name: str | None = None) -> PlanReader:
        """Open ``plan.npy`` (or a plan folder, or a run directory) in O(1): size, record and ``blocks.npy``."""
        path = resolve_plan_path(plan, plan_name)
        rec = read_record(path)
        where = str(path)
        rebuild = None
        meta: Mapping[str, Any] = {}
        if rec is not None:
            name = rec.name or path.parent.name
            _require_current(path, rec)
            rebuild = plan_command(path.parent.parent.parent, name, rec)
            meta = rec.artifacts.get(plan_path(name, PLAN_ORDER)) or {}
        fix = f"; rebuild it with `{rebuild}`" if rebuild else ""
        size = path.stat().st_size
        if meta.get("size") is not None and size != meta["size"]:
            raise PlanIntegrityError(f"{where}: {size} bytes but its record says {meta['size']} (truncated or "
                                     f"modified){fix}")
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise PlanIntegrityError(f"{where}: not a readable plan (not an int64 .npy: truncated, zeroed or "
                                     f"replaced){fix}") from exc
        if arr.ndim != 1 or arr.dtype != np.dtype("<i8"):
            raise PlanIntegrityError(f"{where}: a plan is a 1-D int64 array, got {arr.dtype} {arr.shape}{fix}")
        if rec is None:
            return cls(arr, path=path)
        blocks = rec.blocks
        n_docs = _n_docs(rec)
        if blocks is None:
            return cls(arr, n_docs=n_docs, sha256=meta.get("sha256"), rebuild=rebuild, path=path,
                       record=rec)
        checksums = _load_checksums(path.parent, rec, blocks, -(-arr.shape[0] // int(blocks["entries"])), fix)
        return cls(arr, n_docs=n_docs, checksums=checksums, rebuild=rebuild, path=path, record=rec,
                   entries=int(blocks["entries"]))

    @classmethod
    def of_array(cls, plan: Any, n_docs: int | None = None) -> PlanReader:
        """An order given as an array (or a ``Plan``). In-memory arrays are range-checked whole at once;
        memory maps block by block as they are read."""
        if hasattr(plan, "order") and not isinstance(plan, np.ndarray):
            if n_docs is None and isinstance(getattr(plan, "stats", None), Mapping):
                n_docs = plan.stats.get("n_docs")
            plan = plan.order
        arr = np.asarray(plan)
        reader = cls(arr, n_docs=n_docs)
        if not isinstance(arr, np.memmap):
            reader.check(0, reader.length)
        return reader

    # -- reading

    def check(self, start: int, stop: int) -> None:
        """Verify every block holding a position in ``[start, stop)`` that was not verified yet."""
        if self._all or stop <= start:
            return
        b0, b1 = max(start, 0) // self.entries, -(-min(stop, self.length) // self.entries)
        if self._ok[b0:b1].all():
            return
        if self.sha256 is not None:
            self._verify_whole()
        for b in range(b0, b1):
            if not self._ok[b]:
                self._verify_block(b)
        self._all = bool(self._ok.all())

    def read(self, start: int, stop: int) -> np.ndarray:
        """The verified entries ``[start, stop)``."""
        self.check(start, stop)
        return np.asarray(self.array[start:stop])

    def take(self, pos: np.ndarray) -> np.ndarray:
        """The verified entries at positions ``pos`` (any order)."""
        pos = np.asarray(pos)
        if pos.size and not self._all:
            for b in np.unique(pos // self.entries).tolist():
                self.check(b * self.entries, b * self.entries + 1)
        return np.asarray(self.array[pos])

    def verified(self) -> np.ndarray:
        """The whole order, every block verified (O(length) once): for consumers that read all of it."""
        self.check(0, self.length)
        return self.array

    def _fail(self, what: str) -> PlanIntegrityError:
        fix = f"; rebuild it with `{self.rebuild}`" if self.rebuild else ""
        return PlanIntegrityError(f"{self.where}: {what}{fix}")

    def _verify_whole(self) -> None:
        from clusterclip.store import file_digest

        assert self.path is not None and self.sha256 is not None
        if file_digest(self.path) != self.sha256:
            raise self._fail("does not match the SHA-256 in its record (modified or corrupt)")
        self.sha256 = None  # verified: from now on only the index range is checked per block

    def _verify_block(self, b: int) -> None:
        lo, hi = b * self.entries, min((b + 1) * self.entries, self.length)
        block = np.asarray(self.array[lo:hi])
        span = f"block {b} (positions {lo}..{hi - 1})"
        if self.checksums is not None and zlib.crc32(np.ascontiguousarray(block).data) != int(self.checksums[b]):
            raise self._fail(f"{span} does not match its checksum in blocks.npy (modified or corrupt)")
        bound = self.n_docs if self.n_docs is not None else MAX_DOCS
        if block.size and _out_of_range(block, bound):
            low, high = int(block.min()), int(block.max())
            bad = low if low < 0 else high
            corpus = f"the corpus has {bound} documents" if self.n_docs is not None else \
                f"indices must be in 0..{bound - 1}"
            raise self._fail(f"{span} holds document index {bad} but {corpus}")
        self._ok[b] = True


def _out_of_range(block: np.ndarray, bound: int) -> bool:
    """Any index outside ``[0, bound)``; for int64 one pass (viewed unsigned, negatives are >= 2^63)."""
    if block.dtype.kind == "i" and block.dtype.itemsize == 8:
        return int(block.view(block.dtype.str.replace("i", "u")).max()) >= bound
    return int(block.min()) < 0 or int(block.max()) >= bound


def _n_docs(rec: PlanRecord) -> int | None:
    if rec.blocks is not None and isinstance(rec.blocks.get("index_range"), list):
        return int(rec.blocks["index_range"][1])
    n = rec.stats.get("n_docs")
    return int(n) if n is not None else None


def _load_checksums(folder: Path, rec: PlanRecord, blocks: Mapping[str, Any], count: int,
                    fix: str) -> np.ndarray:
    from clusterclip.store import file_digest

    path = folder / str(blocks.get("file", PLAN_BLOCKS))
    meta = rec.artifacts.get(plan_path(rec.name or folder.name, PLAN_BLOCKS)) or {}
    if blocks.get("checksum") != CHECKSUM:
        raise PlanIntegrityError(f"{path}: unknown block checksum {blocks.get('checksum')!r} (expected {CHECKSUM})")
    try:
        digest = file_digest(path) if meta.get("sha256") else None
        sums = np.load(path, allow_pickle=False) if digest == meta.get("sha256") else None
    except FileNotFoundError as exc:
        raise PlanIntegrityError(f"{path}: missing (the plan's block checksums){fix}") from exc
    except (ValueError, OSError, EOFError) as exc:
        raise PlanIntegrityError(f"{path}: unreadable block checksums ({one_line(exc)}){fix}") from exc
    if sums is None:
        raise PlanIntegrityError(f"{path}: does not match the SHA-256 in its record (modified){fix}")
    if sums.shape != (count,) or sums.dtype != np.uint32:
        raise PlanIntegrityError(f"{path}: expected {count} uint32 block checksums, got {sums.dtype} {sums.shape}{fix}")
    return sums


def _require_current(path: Path, rec: PlanRecord) -> None:
    """Refuse a plan of a run directory whose clusters (or anything upstream) were rebuilt after it: its
    indices would point at documents of another clustering (the error names the rebuild commands). A plan
    folder without the records it was built from (copied out of its run) is not checked."""
    from clusterclip.store import RunDir
    from clusterclip.store.layout import record

    root = path.parent.parent.parent
    if path.parent.parent.name == PLANS_DIR and any((root / record(up)).exists() for up in rec.upstream):
        RunDir(root).require_current(plan_stage_name(path.parent.name))  # the folder's: a swapped record is refused


def open_plan(plan: Any, plan_name: str | None = None, n_docs: int | None = None) -> PlanReader:
    """A :class:`PlanReader` for a plan given as a path (file, plan folder, run directory) or an array/``Plan``.

    For ``export``: ``open_plan(plan_path).verified()`` is the whole order with every block verified.
    ``n_docs`` (an array's corpus size, when known) narrows the index range; for a path it may only narrow
    the recorded one.
    """
    if isinstance(plan, (str, os.PathLike)):
        reader = PlanReader.open(plan, plan_name)
        if n_docs is not None and (reader.n_docs is None or n_docs < reader.n_docs):
            reader.n_docs = int(n_docs)
        return reader
    return PlanReader.of_array(plan, n_docs)
