"""The order of a plan over strata: ClusterClip's order of the clusters, each cluster's draws interleaving its
strata evenly.

Two levels:

1. **Clusters.** The planner's own order (:func:`clusterclip.plan.order.emit`) over the clusters with their
   draws ``d_c`` (the sum of their strata's) and the cluster's scale: the rounds of equal-rate ClusterClip, the
   timed merge otherwise. It runs over :class:`Slots`, which hold no documents, so the emitted chunks say only
   which cluster holds each position; a cluster's positions come in the order of its draws.
2. **Strata inside a cluster.** Stratum ``s``'s ``i``-th draw has the key ``(i + u_s) / d_s`` (``u_s`` a seeded
   jitter): the cluster's ``k``-th draw is the draw of the ``k``-th smallest key of its strata (ties: the lower
   stratum first), so each stratum's draws are spread evenly over the cluster's. The runs of chunks come in plan
   order, so a run continues each cluster and each stratum where the last run stopped; where a cluster's draws in
   the run end is found by a short search on the exact key counts (:meth:`Interleave.before`, per stratum, not per
   draw). The run's draws, taken from the strata's passes, are sorted by (cluster, key) and written to the run's
   positions in (cluster, position) order (:func:`run_layout`: laid out from the rounds, or radix-sorted by
   cluster where a chunk is timed): one sort of the keys per run, which come as runs already sorted per stratum.

So the clusters are drawn exactly as a plain ClusterClip plan with quotas ``d_c`` draws them (the oracle:
:func:`clusterclip.plan.reference.reference_strata_order`), at the cost of sorting each run of draws once.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise
from typing import Protocol

import numpy as np

from clusterclip.plan.order import Chunk
from clusterclip.plan.passes import Passes


class Slots:
    """The clusters' order without documents: :func:`~clusterclip.plan.order.emit` run over it yields which cluster
    holds each position (its chunks) and writes nothing, since :func:`place` fills every position."""

    def starts(self, cl: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.zeros(cl.size, np.int64)

    def gather_rounds(self, start: np.ndarray, out: np.ndarray) -> None:
        return None

    def take(self, index: np.ndarray) -> np.ndarray:
        return index


class Interleave:
    """The strata of each cluster (``cluster``: of each stratum; ``draws``; ``u``: jitter) as padded rows, the rank
    of any stratum draw among its cluster's draws, and how far each stratum and cluster has been placed."""

    def __init__(self, cluster: np.ndarray, draws: np.ndarray, u: np.ndarray, k: int) -> None:
        self.cluster, self.draws, self.u = cluster.astype(np.int64), draws.astype(np.int64), u
        self.cluster_draws = np.bincount(self.cluster, weights=self.draws, minlength=k).astype(np.int64)
        active = np.flatnonzero(self.draws > 0)
        order = active[np.argsort(self.cluster[active], kind="stable")]
        per = np.bincount(self.cluster[order], minlength=k)
        width = max(int(per.max(initial=0)), 1)
        first = np.cumsum(per) - per
        column = np.arange(order.size) - np.repeat(first, per)
        self.rows = np.full((k, width), -1, np.int64)
        self.rows[self.cluster[order], column] = order
        self.width = width
        self.placed = np.zeros(k, np.int64)
        """Draws of each cluster placed so far (the runs come in plan order, each cluster's draws in rank order)."""
        self.taken = np.zeros(draws.size, np.int64)
        """Draws of each stratum placed so far."""

    def advance(self, present: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The stratum draws of the next ``count`` draws of each cluster in ``present``: strata ``s`` and their draws
        ``lo..hi-1`` (arrays), recorded as placed."""
        s = self.rows[present].reshape(-1)
        s = s[s >= 0]
        cs = self.cluster[s]
        end = self.placed[cs] + count[cs]
        lo = self.taken[s]
        hi = self.draws[s].copy()
        inside = np.flatnonzero(end < self.cluster_draws[cs])  # a cluster that ends in the run takes all of it
        hi[inside] = self.before(s[inside], end[inside])
        self.taken[s] = hi
        self.placed[present] += count[present]
        return s, lo, hi

    def rank(self, s: np.ndarray, i: np.ndarray) -> np.ndarray:
        """The rank of draw ``i`` of stratum ``s`` (arrays) among its cluster's draws."""
        d = self.draws[s]
        key = (i + self.u[s]) / d
        out = i.astype(np.int64).copy()
        rows = self.rows[self.cluster[s]]
        for j in range(self.width):
            other = rows[:, j]
            use = (other >= 0) & (other != s)
            if not use.any():
                continue
            o = other[use]
            t = np.where(o < s[use], np.nextafter(key[use], np.inf), key[use])  # ties: the lower stratum first
            out[use] += keys_below(t, self.u[o], self.draws[o])
        return out

    def before(self, s: np.ndarray, k: np.ndarray) -> np.ndarray:
        """How many draws of stratum ``s`` come before its cluster's ``k``-th draw (arrays)."""
        dc = self.cluster_draws[self.cluster[s]]
        d = self.draws[s]
        guess = np.floor(k * d / np.maximum(dc, 1)).astype(np.int64)
        lo = np.clip(guess - self.width - 2, 0, d)
        hi = np.clip(guess + self.width + 3, 0, d)
        while True:  # the first i in [lo, hi] with rank(s, i) >= k (d when none): a short binary search
            open_ = lo < hi
            if not open_.any():
                return lo
            mid = (lo + hi) // 2
            ok = np.zeros(s.size, bool)
            idx = np.flatnonzero(open_)
            ok[idx] = self.rank(s[idx], mid[idx]) >= k[idx]
            hi = np.where(open_ & ok, mid, hi)
            lo = np.where(open_ & ~ok, mid + 1, lo)


def keys_below(t: np.ndarray, u: np.ndarray, d: np.ndarray) -> np.ndarray:
    """How many draws ``j < d`` of a stratum have the key ``(j + u) / d < t`` (exact in floats: the keys are
    computed as the oracle computes them, then the count corrected by a step either way)."""
    c = np.clip(np.ceil(t * d - u), 0, d).astype(np.int64)
    for _ in range(2):
        c -= (c > 0) & ((c - 1 + u) / d >= t)
        c += (c < d) & ((c + u) / d < t)
    return c


def place(out: np.ndarray, run: list[Chunk], inter: Interleave, passes: Passes, tier: np.ndarray) -> np.ndarray:
    """Fill the positions of a run of chunks (``out``, emitted over the clusters) with the documents they are: each
    cluster's draws in the run, interleaved from its strata's passes. Returns the tier of each position (``tier``:
    of each stratum), in the narrowest unsigned type that holds it.

    The clusters are independent once their strata's draws are loaded, so a large run is placed in parts of whole
    clusters on the passes' threads (as the plain plan gathers its rounds)."""
    count, position = run_layout(run, inter.placed.size)
    s, ilo, ihi = inter.advance(np.flatnonzero(count), count)
    take = ihi > ilo
    s, ilo, ihi = s[take], ilo[take], ihi[take]
    need = ihi - ilo
    start = passes.starts(s, ilo, ihi)
    end = np.cumsum(need)
    tiers = np.empty(int(end[-1]) if end.size else 0, _narrow(tier))

    def part(_: int, bounds: tuple[int, int]) -> None:
        a, b = bounds
        p = Segments(s[a:b], need[a:b], ilo[a:b], inter)
        lo, hi = int(end[a] - need[a]), int(end[b - 1])
        step = np.arange(hi - lo, dtype=np.int64)
        docs = passes.take(np.repeat(start[a:b] - p.first, p.need) + step)
        merged = p.draw + np.repeat(inter.u[p.s], p.need)
        merged /= np.repeat(inter.draws[p.s].astype(np.float64), p.need)
        merged += np.repeat(inter.cluster[p.s].astype(np.float64), p.need)
        # the part holds the next ranks of each of its clusters, so its draws sorted by (cluster, key, stratum) are
        # its positions in (cluster, rank) order
        dest = step  # reused: where each draw goes
        dest[cluster_key_order(merged, p)] = position[lo:hi]
        out[dest] = docs
        tiers[dest] = np.repeat(tier[p.s].astype(tiers.dtype), p.need)

    passes.map(part, _cluster_parts(inter.cluster[s], end, passes.threads))
    return tiers


def _cluster_parts(cluster: np.ndarray, end: np.ndarray, threads: int) -> list[tuple[int, int]]:
    """Segment ranges ``[a, b)`` of whole clusters (``cluster``: of each segment, ascending) holding about equal
    draws (``end``: cumulative draws): one per thread when the run is large."""
    if cluster.size == 0:
        return []
    total = int(end[-1])
    parts = threads if threads > 1 and total >= 1 << 16 else 1
    starts = np.flatnonzero(np.r_[True, cluster[1:] != cluster[:-1]])  # where each cluster's segments begin
    before = np.r_[0, end][starts]
    cuts = np.unique(starts[np.searchsorted(before, np.arange(1, parts) * (total / parts))
                            .clip(0, starts.size - 1)])
    bounds = [0, *[int(c) for c in cuts if 0 < c < cluster.size], cluster.size]
    return [(a, b) for a, b in pairwise(bounds) if b > a]


def _narrow(values: np.ndarray) -> type:
    """The smallest unsigned integer type holding ``values`` (non-negative): a run's tiers are copied twice."""
    top = int(values.max(initial=0))
    return np.uint8 if top < 1 << 8 else np.uint16 if top < 1 << 16 else np.int64


class ExactKeys(Protocol):
    def exact(self, at: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(cluster, key, stratum) of the draws at indices ``at``."""
        ...


class Segments:
    """Draws of a part of a run as segments: stratum ``s[j]`` holds the part's draws ``first[j] .. first[j] +
    need[j] - 1``, which are its draws ``ilo[j]`` onwards. Gives the draw number of every one (``draw``) and the
    exact cluster, key and stratum of any of them, computed only where :func:`cluster_key_order` needs them."""

    def __init__(self, s: np.ndarray, need: np.ndarray, ilo: np.ndarray, inter: Interleave):
        self.s, self.need, self.inter = s, need, inter
        self.first = np.cumsum(need) - need
        self.draw = np.repeat(ilo - self.first, need)
        self.draw += np.arange(self.draw.size, dtype=np.int64)

    def exact(self, at: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(cluster, key, stratum) of the draws at indices ``at``."""
        s = self.s[np.searchsorted(self.first, at, side="right") - 1]
        key = (self.draw[at] + self.inter.u[s]) / self.inter.draws[s]
        return self.inter.cluster[s], key, s


def run_layout(run: list[Chunk], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each cluster's draws in a run of chunks, and the run's positions (from its start) in (cluster, rank) order:
    a cluster's positions come in the order of its draws. Rounds are laid out directly; a run with a timed chunk is
    radix-sorted by cluster."""
    pos0 = run[0].pos
    if any(ch.groups is not None for ch in run):
        c = np.concatenate([ch.groups if ch.groups is not None else np.tile(ch.active, ch.count // ch.active.size)
                            for ch in run]).astype(np.int64, copy=False)
        return np.bincount(c, minlength=k), stable_order(c, k)
    count = np.zeros(k, np.int64)
    for ch in run:
        count[ch.active] += ch.count // ch.active.size
    fill = np.cumsum(count) - count
    position = np.empty(int(count.sum()), np.int64)
    for ch in run:
        m = ch.active.size
        rounds = np.arange(ch.count // m, dtype=np.int64)
        position[fill[ch.active][:, None] + rounds] = (ch.pos - pos0) + np.arange(m)[:, None] + m * rounds
        fill[ch.active] += rounds.size
    return count, position


def stable_order(values: np.ndarray, top: int) -> np.ndarray:
    """``np.argsort(values, kind="stable")`` for integers in ``[0, top)``, by radix sorts of 16-bit digits (linear;
    a comparison sort of a run's clusters cost several times more)."""
    if top > 1 << 32:
        return np.argsort(values, kind="stable")
    order = np.argsort((values & 0xFFFF).astype(np.uint16), kind="stable")
    if top > 1 << 16:
        order = order[np.argsort((values[order] >> 16).astype(np.uint16), kind="stable")]
    return order


def cluster_key_order(merged: np.ndarray, exact: ExactKeys) -> np.ndarray:
    """The order of draws by (cluster, key in [0, 1), stratum), as ``np.lexsort`` gives it, from ``merged``:
    cluster + key, rounded.

    Rounding the sum is monotone in the key, so it never inverts two draws, but it can make two different keys
    equal; such ties (rare: keys closer than the sum's last bit, or equal keys of two strata) are sorted again by
    the exact cluster, key, stratum and index (``exact``)."""
    order = np.argsort(merged, kind="stable")  # timsort: the draws come as runs sorted per stratum
    merged = merged[order]
    tie = merged[1:] == merged[:-1]
    if tie.any():
        member = np.zeros(order.size, bool)
        member[1:] |= tie
        member[:-1] |= tie
        group = np.concatenate(([0], np.cumsum(~tie)))
        at = np.flatnonzero(member)
        sub = order[at]
        cluster, key, stratum = exact.exact(sub)
        order[at] = sub[np.lexsort((sub, stratum, key, cluster, group[at]))]
    return order


def coalesced(chunks: Iterator[Chunk], size: int) -> Iterator[list[Chunk]]:
    """Consecutive chunks in runs of at least ``size`` draws (the last run may hold fewer)."""
    run: list[Chunk] = []
    held = 0
    for chunk in chunks:
        run.append(chunk)
        held += chunk.count
        if held >= size:
            yield run
            run, held = [], 0
    if run:
        yield run
