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
    of each stratum)."""
    count, position = run_layout(run, inter.placed.size)
    s, ilo, ihi = inter.advance(np.flatnonzero(count), count)
    take = ihi > ilo
    s, ilo, ihi = s[take], ilo[take], ihi[take]
    need = ihi - ilo
    total = int(need.sum())
    first = np.cumsum(need) - need
    step = np.arange(total, dtype=np.int64)
    docs = passes.take(np.repeat(passes.starts(s, ilo, ihi) - first, need) + step)
    draw = np.repeat(ilo - first, need)
    draw += step
    key = (draw + np.repeat(inter.u[s], need)) / np.repeat(inter.draws[s], need)
    # the run holds the next ranks of each cluster, so its draws sorted by (cluster, key, stratum) are its positions in
    # (cluster, rank) order
    dest = step  # reused: where each draw goes
    dest[cluster_key_order(np.repeat(inter.cluster[s], need), key, np.repeat(s, need))] = position
    out[dest] = docs
    tiers = np.empty(total, tier.dtype)
    tiers[dest] = np.repeat(tier[s], need)
    return tiers


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


def cluster_key_order(cluster: np.ndarray, key: np.ndarray, stratum: np.ndarray) -> np.ndarray:
    """The order of draws by (``cluster``, ``key`` in [0, 1), ``stratum``), as ``np.lexsort`` gives it.

    One sort of ``cluster + key``: rounding the sum is monotone in the key, so it never inverts two draws, but it can
    make two different keys equal; such ties (rare: keys closer than the sum's last bit, or equal keys of two strata)
    are sorted again by the exact cluster, key, stratum and index."""
    merged = cluster + key
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
        order[at] = sub[np.lexsort((sub, stratum[sub], key[sub], cluster[sub], group[at]))]
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
