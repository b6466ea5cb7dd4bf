"""The order of a plan over strata: ClusterClip's order of the clusters, each cluster's draws interleaving its
strata evenly.

Two levels:

1. **Clusters.** The planner's own order (:func:`clusterclip.plan.order.emit`) over the clusters with their
   draws ``d_c`` (the sum of their strata's) and the cluster's scale: the rounds of equal-rate ClusterClip, the
   timed merge otherwise. It runs over :class:`Slots`: "passes" whose ``k``-th draw of cluster ``c`` is the slot
   ``offset_c + k``, so the emitted stream is the cluster of every position and its draw number in the cluster.
2. **Strata inside a cluster.** Stratum ``s``'s ``i``-th draw has the key ``(i + u_s) / d_s`` (``u_s`` a seeded
   jitter): the cluster's ``k``-th draw is the draw of the ``k``-th smallest key of its strata (ties: the lower
   stratum first), so each stratum's draws are spread evenly over the cluster's. For a run of chunks, how many
   draws of each stratum come before a cluster's ``k``-th is found by a short search on the exact key counts
   (:meth:`Interleave.before`, per stratum, not per draw); the run's draws, taken from the strata's passes, are
   then put in (cluster, key) order by two stable sorts of the run.

So the clusters are drawn exactly as a plain ClusterClip plan with quotas ``d_c`` draws them (the oracle:
:func:`clusterclip.plan.reference.reference_strata_order`), at the cost of sorting each run of draws once.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from clusterclip.plan.order import Chunk
from clusterclip.plan.passes import Passes, seg_arange


class Slots:
    """The clusters' draws as slots ``offset_c + k``, served like :class:`~clusterclip.plan.passes.Passes`."""

    def __init__(self, draws: np.ndarray) -> None:
        self.offset = np.cumsum(draws) - draws

    def starts(self, cl: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.offset[cl] + a

    def gather_rounds(self, start: np.ndarray, out: np.ndarray) -> None:
        out[...] = start[None, :] + np.arange(out.shape[0], dtype=np.int64)[:, None]

    def take(self, index: np.ndarray) -> np.ndarray:
        return index


class Interleave:
    """The strata of each cluster (``cluster``: of each stratum; ``draws``; ``u``: jitter) as padded rows, and
    the rank of any stratum draw among its cluster's draws."""

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


def place(slots_out: np.ndarray, run: list[Chunk], slots: Slots, inter: Interleave, passes: Passes) -> None:
    """Replace the slots of a run of chunks (``slots_out``, emitted over the clusters) by the documents they are:
    each cluster's draws in the run, interleaved from its strata's passes."""
    g = slots_out.copy()
    k_outer = slots.offset.size
    c = np.concatenate([ch.groups if ch.groups is not None else np.tile(ch.active, ch.count // ch.active.size)
                        for ch in run]).astype(np.int64)
    k = g - slots.offset[c]
    klo = np.full(k_outer, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(klo, c, k)
    count = np.bincount(c, minlength=k_outer)
    present = np.flatnonzero(count)
    base = np.cumsum(count) - count
    inv = np.empty(g.size, np.int64)
    inv[base[c] + k - klo[c]] = np.arange(g.size)
    s = inter.rows[present].reshape(-1)
    s = s[s >= 0]
    cs = inter.cluster[s]
    ilo, ihi = inter.before(s, klo[cs]), inter.before(s, klo[cs] + count[cs])
    take = ihi > ilo
    s, ilo, ihi = s[take], ilo[take], ihi[take]
    need = ihi - ilo
    step = seg_arange(need)
    docs = passes.take(np.repeat(passes.starts(s, ilo, ihi), need) + step)
    s_rep = np.repeat(s, need)
    key = (np.repeat(ilo, need) + step + inter.u[s_rep]) / inter.draws[s_rep]
    # the run holds ranks klo..klo+count-1 of each cluster, so its draws sorted by (cluster, key, stratum) are its
    # slots in (cluster, rank) order
    local = np.zeros(k_outer, np.int64)
    local[present] = np.arange(present.size)
    slots_out[inv] = docs[cluster_key_order(local[inter.cluster[s_rep]], key, s_rep)]


def cluster_key_order(local: np.ndarray, key: np.ndarray, stratum: np.ndarray) -> np.ndarray:
    """The order of draws by (``local`` cluster index, ``key`` in [0, 1), ``stratum``), as ``np.lexsort`` gives it.

    One stable sort of ``local + key``: rounding the sum is monotone in the key, so it never inverts two draws, but
    it can make two different keys equal; such ties (rare: keys closer than the sum's last bit, or equal keys of
    two strata) are sorted again by the exact cluster, key and stratum."""
    merged = local + key
    order = np.argsort(merged, kind="stable")
    merged = merged[order]
    tie = merged[1:] == merged[:-1]
    if tie.any():
        member = np.zeros(order.size, bool)
        member[1:] |= tie
        member[:-1] |= tie
        group = np.concatenate(([0], np.cumsum(~tie)))
        at = np.flatnonzero(member)
        sub = order[at]
        order[at] = sub[np.lexsort((stratum[sub], key[sub], local[sub], group[at]))]
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
