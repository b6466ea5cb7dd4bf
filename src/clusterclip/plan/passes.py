"""Within-cluster passes: each cluster's draws are pass after pass of fresh seeded permutations.

So repeat counts inside a cluster differ by at most one and no document exceeds the cap. The passes
are generated in independent seeded blocks, so the sequence does not depend on how it is requested.
"""

from __future__ import annotations

import os
from itertools import pairwise
from typing import Any

import numpy as np

BLOCK = 1024
_SALT_BLOCK = 0xB10C
_SALT_PCG = 0x5851F42D4C957F2D
_PCG_INC = 0xDA3E39CB94B95BDB5851F42D4C957F2D  # odd: one PCG64 stream; blocks start at hashed states


def seg_arange(lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(l)`` for every ``l`` in ``lengths``."""
    total = int(lengths.sum())
    starts = np.cumsum(lengths) - lengths
    return np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)


_M64 = (1 << 64) - 1


def _mix64(x: int) -> int:
    """splitmix64's finaliser: a bijection of 64-bit integers with good avalanche."""
    x &= _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


class Passes:
    """Each cluster's infinite draw sequence: pass after pass, each a fresh seeded permutation.

    Passes are generated in blocks of ``P_c = max(1, min(passes, BLOCK // n_c))`` passes, block ``b``
    of cluster ``c`` from a PCG64 stream whose 128-bit state and increment are a hash of
    (seed, c, b), so any block can be produced on its own and the sequence does not depend on how the
    caller chunks its requests (setting a state costs ~1 us; building a seeded ``Generator`` per block
    cost ~35 us and dominated small clusters). Every cluster holds its current block in one int64 slot
    of ``buf``; a request that leaves the block is assembled in a scratch region at the end of
    ``buf``, so every request is one contiguous slice of ``buf`` and the caller gathers the whole
    chunk with one ``np.take`` straight into the int64 output. Memory: 8 bytes per slot entry
    (about N + K * BLOCK) plus the scratch (one chunk) plus the cluster-sorted members (4 bytes/doc).
    """

    def __init__(self, labels: np.ndarray, sizes: np.ndarray, passes_needed: np.ndarray, seed: int,
                 scratch: int) -> None:
        n, k = labels.shape[0], sizes.size
        self.sizes = sizes
        self.offsets = np.concatenate(([0], np.cumsum(self.sizes)[:-1])).astype(np.int64)
        key = labels.astype(np.uint16) if k <= 1 << 16 else labels  # 16-bit keys get a radix sort
        self.members = np.argsort(key, kind="stable").astype(np.int32 if n < 2**31 else np.int64)
        self.seed = seed
        ckey = np.arange(k, dtype=np.uint64) ^ np.uint64(_mix64(_mix64(seed ^ _SALT_BLOCK) + 1))
        for shift, mult in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB), (31, 0)):  # _mix64, vectorised
            ckey ^= ckey >> np.uint64(shift)
            if mult:
                ckey *= np.uint64(mult)
        self._ckey = ckey.tolist()
        per_block = np.maximum(1, BLOCK // np.maximum(self.sizes, 1))
        need = np.maximum(passes_needed, 1)
        self.block_passes = np.where(self.sizes > 0, np.minimum(per_block, need), 0)
        self.block_len = self.block_passes * self.sizes
        self.seg = np.concatenate(([0], np.cumsum(self.block_len)[:-1])).astype(np.int64)
        self.scratch0 = int(self.block_len.sum())
        self.buf = np.empty(self.scratch0 + max(int(scratch), 0), dtype=np.int64)
        self.block = np.full(k, -1, dtype=np.int64)
        self._lists = (self.sizes.tolist(), self.block_passes.tolist(), self.offsets.tolist())
        """Per-cluster sizes, passes per block and member offsets as Python ints: a block's bookkeeping then costs
        no NumPy scalar (small groups, such as strata, make tens of thousands of blocks)."""
        self.threads = min(4, os.cpu_count() or 1)
        self._pool: Any = None
        self._rngs = [np.random.Generator(np.random.PCG64(0)) for _ in range(self.threads)]

    def __enter__(self) -> Passes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker threads (the passes stay usable single-threaded)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def map(self, fn: Any, parts: list[Any]) -> None:
        """Run ``fn(i, part)`` for every part, on the thread pool when there is more than one (NumPy releases the GIL
        in the large array operations the parts do)."""
        if len(parts) <= 1:
            for i, part in enumerate(parts):
                fn(i, part)
            return
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(self.threads - 1)
        futures = [self._pool.submit(fn, i, part) for i, part in enumerate(parts[1:], start=1)]
        fn(0, parts[0])
        for f in futures:
            f.result()

    def make_block(self, rng: np.random.Generator, c: int, b: int, out: np.ndarray) -> None:
        """Write block ``b`` of cluster ``c`` (``P_c`` permutations of its documents) into ``out``."""
        sizes, block_passes, offsets = self._lists
        n, p, o = sizes[c], block_passes[c], offsets[c]
        h = _mix64(self._ckey[c] ^ b)
        rng.bit_generator.state = {"bit_generator": "PCG64", "state": {"state": (h << 64) | _mix64(h ^ _SALT_PCG),
                                   "inc": _PCG_INC}, "has_uint32": 0, "uinteger": 0}
        if p == 1:
            out[...] = self.members[o:o + n]
            rng.shuffle(out)
        else:
            rows = out.reshape(p, n)
            rows[...] = self.members[o:o + n]
            rng.permuted(rows, axis=1, out=rows)

    def take(self, index: np.ndarray) -> np.ndarray:
        """``buf[index]``: the draws :meth:`starts` laid out (what the timed merge gathers)."""
        return self.buf[index]

    def pass_row(self, c: int, p: int) -> np.ndarray:
        """The permutation of pass ``p`` of cluster ``c`` (generated on its own, not cached)."""
        bp = int(self.block_passes[c])
        out = np.empty(int(self.block_len[c]), np.int64)
        self.make_block(self._rngs[0], c, p // bp, out)
        return out.reshape(bp, -1)[p % bp]

    def sequence(self, c: int, d: int) -> np.ndarray:
        """The first ``d`` draws of cluster ``c``, pass by pass (for the reference order; small inputs)."""
        n = int(self.sizes[c])
        rows = [self.pass_row(c, i) for i in range(-(-d // n))] if d > 0 else []
        return np.concatenate(rows)[:d] if rows else np.zeros(0, np.int64)

    def starts(self, cl: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Offsets in ``buf`` where draws ``a..b-1`` of each cluster in ``cl`` lie contiguously.

        Loads the blocks needed; a request that spans blocks is copied into the scratch region, which
        is reused by the next call (so gather each chunk before asking for the next).
        """
        lb = self.block_len[cl]
        first, last = a // lb, (b - 1) // lb
        start = self.seg[cl] + a - first * lb
        cur = self.block[cl]
        span = last > first
        todo = np.flatnonzero(span | (cur != first))
        if todo.size == 0:
            return start
        sp = np.flatnonzero(span)
        if sp.size:
            lens = b[sp] - a[sp]
            offs = self.scratch0 + np.cumsum(lens) - lens
            end = int(offs[-1] + lens[-1])
            if end > self.buf.size:  # the caller sizes the scratch for a chunk; grow if ever short
                grown = np.empty(end, dtype=np.int64)
                grown[:self.scratch0] = self.buf[:self.scratch0]
                self.buf = grown
            start[sp] = offs
        jobs = list(zip(cl[todo].tolist(), a[todo].tolist(), b[todo].tolist(), start[todo].tolist(),
                        span[todo].tolist(), lb[todo].tolist(), self.seg[cl[todo]].tolist(),
                        self.block[cl[todo]].tolist(), strict=True))
        work = (np.minimum(last[todo] - first[todo] + 1, 2) * lb[todo]).cumsum()
        parts = 1
        if self.threads > 1 and int(work[-1]) >= 1 << 16 and len(jobs) > 1:
            parts = self.threads
        cuts = np.searchsorted(work, np.arange(1, parts) * (int(work[-1]) / parts)).tolist()
        groups = [jobs[i:j] for i, j in zip([0, *cuts], [*cuts, len(jobs)], strict=True)]
        self.map(self._run_jobs, [g for g in groups if g])
        self.block[cl[todo]] = last[todo]
        return start

    def _run_jobs(self, i: int, jobs: list[tuple[int, int, int, int, bool, int, int, int]]) -> None:
        """Load the blocks of ``jobs`` (cluster, draws ``a..b-1``, scratch offset, spans blocks, block length, slot
        offset, block held), copying a request that spans blocks into the scratch."""
        rng = self._rngs[i]
        buf = self.buf
        for c, a, b, dst, span, lb, s, cur in jobs:
            slot = buf[s:s + lb]
            first = a // lb
            if not span:
                self.make_block(rng, c, first, slot)
                continue
            for blk in range(first, (b - 1) // lb + 1):
                if blk != cur:
                    self.make_block(rng, c, blk, slot)
                lo, hi = max(a, blk * lb), min(b, (blk + 1) * lb)
                buf[dst:dst + hi - lo] = slot[lo - blk * lb:hi - blk * lb]
                dst += hi - lo

    def gather_rounds(self, start: np.ndarray, out: np.ndarray) -> None:
        """``out[r, j] = buf[start[j] + r]``: rounds of draws straight into the (int64) output rows.

        Indexes a sliding-window view of ``buf`` (no index array); split over the threads by rows when
        large (the fancy-index copy releases the GIL).
        """
        rows = out.shape[0]
        win = np.lib.stride_tricks.as_strided(self.buf, shape=(rows, self.buf.size - rows + 1),
                                              strides=(8, 8), writeable=False)
        parts = self.threads if self.threads > 1 and out.size >= 1 << 18 and rows > 1 else 1
        cuts = np.linspace(0, rows, parts + 1).astype(int).tolist()

        def piece(_: int, r: tuple[int, int]) -> None:
            out[r[0]:r[1]] = win[r[0]:r[1], start]

        self.map(piece, [(i, j) for i, j in pairwise(cuts) if j > i])


def passes_needed(quota: np.ndarray, unit_sizes: np.ndarray) -> np.ndarray:
    """Passes each group starts to fill its quota (documents or tokens): ``ceil(quota / size)``."""
    return -(-quota // np.maximum(unit_sizes, 1))


def draws_for_tokens(passes: Passes, quota: np.ndarray, unit_sizes: np.ndarray, tokens: np.ndarray,
                     rank: np.ndarray | None = None) -> np.ndarray:
    """Token mode: draws per group to reach its token quota: whole passes, then the shortest prefix of the next
    pass whose tokens reach the remainder (so a group overshoots by less than one document).

    With ``rank`` (the groups in seeded order) the plan's total is then fitted to the budget: the overshoots add up
    over the groups, so groups in ``rank`` order give back their last draw while the total stays at or above the
    budget. The plan then holds the budget plus less than one document, whatever the number of groups (and each
    group is within one document of its quota)."""
    full, rem = np.divmod(quota, np.maximum(unit_sizes, 1))
    draws = full * passes.sizes
    over = np.zeros(quota.size, np.int64)
    last = np.zeros(quota.size, np.int64)
    for c in np.flatnonzero(rem > 0):
        cum = np.cumsum(tokens[passes.pass_row(int(c), int(full[c]))])
        i = int(np.searchsorted(cum, rem[c], side="left"))
        draws[c] += i + 1
        over[c], last[c] = int(cum[i] - rem[c]), int(cum[i] - (cum[i - 1] if i else 0))
    if rank is not None:
        draws -= give_back(over, last, rank)
    return draws


def give_back(over: np.ndarray, last: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Which groups drop their last draw (1) so that the total overshoot ``sum(over)`` stays >= 0 and ends below the
    length of every remaining group's last draw: groups in ``rank`` order, each while the overshoot covers it."""
    drop = np.zeros(over.size, np.int64)
    left = int(over.sum())
    for c in rank[(over > 0)[rank]].tolist():
        if left - int(last[c]) >= 0:
            left -= int(last[c])
            drop[c] = 1
    return drop
