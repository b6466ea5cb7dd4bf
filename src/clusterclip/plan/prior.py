"""Continuing a plan: draws already made (per-document prior counts) reduce what a new plan may draw.

A continuation plans the rest of a run after ``N`` positions of a parent plan. Document ``i`` was drawn
``p_i`` times there, so under cap ``R`` it may be drawn at most ``R - p_i`` more times (never, once
``p_i >= R``). Inside a group the draws are *levels*: level ``L`` is a seeded permutation of the members
with ``p_i <= L``, levels in increasing order, so the least-drawn documents come first and totals
``p_i + new_i`` stay even (they differ by at most one within a group, apart from documents already above
the others). Once a level holds every member (``L >= max p``) the levels are the ordinary passes of
``Passes``; the levels below that (the *head*) are built in memory, one entry per (document, level).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from clusterclip.plan.config import PlanConfigError
from clusterclip.plan.passes import Passes, passes_needed, seg_arange
from clusterclip.plan.quotas import Corpus, Groups, Quotas

_SALT_HEAD = 0x4EAD


def prior_counts(parent: Any, consumed: int, n_docs: int, block: int = 1 << 22) -> np.ndarray:
    """``bincount(parent[:consumed], minlength=n_docs)``, read in blocks (the parent may be memory-mapped)."""
    counts = np.zeros(n_docs, np.int64)
    for i in range(0, consumed, block):
        part = np.asarray(parent[i:min(i + block, consumed)])
        if part.size and (int(part.max()) >= n_docs or int(part.min()) < 0):
            raise PlanConfigError(f"the parent plan holds document {int(part.max())} but the run has {n_docs} "
                                  "documents: was it planned for this run?")
        counts += np.bincount(part, minlength=n_docs)
    return counts


def group_levels(groups: Groups, prior: np.ndarray, cap: int | np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Per group: the first level holding every member (``min(max p, R)``) and the remaining capacity
    ``sum(max(R - p_i, 0))`` in draws (``inf`` without a cap). ``cap`` is one cap, or one per group (strata;
    ``inf``: none)."""
    top = np.zeros(groups.k, np.int64)
    np.maximum.at(top, groups.labels, prior)
    if cap is None:
        return top, np.full(groups.k, np.inf)
    if isinstance(cap, np.ndarray):
        return _levels_per_group(groups, prior, top, cap)
    top = np.minimum(top, cap)
    left = np.bincount(groups.labels, weights=np.maximum(cap - prior, 0), minlength=groups.k)
    return top, left.astype(np.float64)


def _levels_per_group(groups: Groups, prior: np.ndarray, top: np.ndarray,
                      cap: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    finite = np.isfinite(cap)
    top = np.where(finite, np.minimum(top, np.where(finite, cap, 0)), top).astype(np.int64)
    doc_cap = np.where(finite, cap, 0.0)[groups.labels]
    left = np.bincount(groups.labels, weights=np.maximum(doc_cap - prior, 0), minlength=groups.k)
    return top, np.where(finite, left, np.inf)


class PriorPasses(Passes):
    """Each group's draws under prior counts: the head levels (in memory), then ordinary passes.

    Serves ``order.emit`` like ``Passes``: ``starts`` assembles each request in a fresh ``buf`` (one
    copy per chunk), so a request may span head and passes. Memory: the head (8 bytes per entry, at most
    ``sum(max p - p_i)``) plus the ordinary passes of ``Passes``.
    """

    def __init__(self, groups: Groups, prior: np.ndarray, cap: int | np.ndarray | None, quota: np.ndarray, seed: int,
                 scratch: int) -> None:
        top, _ = group_levels(groups, prior, cap)
        count = np.maximum(top[groups.labels] - prior, 0)
        docs = np.repeat(np.arange(count.size, dtype=np.int64), count)
        level = np.repeat(prior, count) + seg_arange(count)
        grp = groups.labels[docs]
        key = (grp.astype(np.float64) * (int(top.max(initial=0)) + 1) + level)  # exact: far below 2**52
        key += np.random.default_rng([seed, _SALT_HEAD]).random(docs.size) * 0.5  # shuffles each level
        self.head = docs[np.argsort(key)]
        self.head_len = np.bincount(grp, minlength=groups.k).astype(np.int64)
        self.head_off = np.cumsum(self.head_len) - self.head_len
        tail_quota = np.maximum(quota - self.head_len, 0)
        self.tail = Passes(groups.labels, groups.sizes, passes_needed(tail_quota, groups.sizes), seed, scratch)
        self.labels, self.sizes, self.seed, self.threads = groups.labels, groups.sizes, seed, self.tail.threads
        self.buf = np.zeros(1, np.int64)
        self._pool = None

    def close(self) -> None:
        self.tail.close()
        super().close()

    def starts(self, cl: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Draws ``a..b-1`` of each group in ``cl``, copied contiguously into ``buf``; their offsets."""
        h = self.head_len[cl]
        lens = b - a
        offs = np.cumsum(lens) - lens
        out = np.empty(int(lens.sum()), np.int64)
        hd = np.flatnonzero(a < h)
        if hd.size:
            n = np.minimum(b[hd], h[hd]) - a[hd]
            step = seg_arange(n)
            out[np.repeat(offs[hd], n) + step] = self.head[np.repeat(self.head_off[cl[hd]] + a[hd], n) + step]
        tl = np.flatnonzero(b > h)
        if tl.size:
            ta, tb = np.maximum(a[tl] - h[tl], 0), b[tl] - h[tl]
            src = self.tail.starts(cl[tl], ta, tb)
            n = tb - ta
            step = seg_arange(n)
            dst = offs[tl] + np.maximum(a[tl], h[tl]) - a[tl]
            out[np.repeat(dst, n) + step] = self.tail.buf[np.repeat(src, n) + step]
        self.buf = out
        return offs

    def sequence(self, c: int, d: int) -> np.ndarray:
        h = int(self.head_len[c])
        head = self.head[self.head_off[c]:self.head_off[c] + min(d, h)]
        return np.concatenate([head, self.tail.sequence(c, max(d - h, 0))])

    def new_counts(self, draws: np.ndarray) -> np.ndarray:
        """How often each document is drawn when each group takes ``draws`` (closed form, O(N + head))."""
        n = self.labels.shape[0]
        grp = np.repeat(np.arange(draws.size), self.head_len)
        in_head = seg_arange(self.head_len) < draws[grp]
        counts = np.bincount(self.head[in_head], minlength=n).astype(np.int64)
        full, rem = np.divmod(np.maximum(draws - self.head_len, 0), np.maximum(self.sizes, 1))
        counts += full[self.labels]
        rows = [self.tail.pass_row(int(c), int(full[c]))[:rem[c]] for c in np.flatnonzero(rem > 0)]
        if rows:
            counts += np.bincount(np.concatenate(rows), minlength=n)
        return counts


def counted_stats(corpus: Corpus, quotas: Quotas, draws: np.ndarray, counts: np.ndarray, prior: np.ndarray,
                  capacity: np.ndarray, exhausted_at: np.ndarray, pseudo: bool,
                  ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Per-cluster statistics and repetition histogram of a continuation from its per-document counts.

    ``max_total`` (per cluster) is the most any document was drawn across the parent's prefix and this
    plan together: at most the cap.
    """
    lab, k = corpus.labels, corpus.k
    d = np.bincount(lab, weights=counts, minlength=k).astype(np.int64)
    unique = np.bincount(lab, weights=counts > 0, minlength=k).astype(np.int64)
    top = np.zeros(k, np.int64)
    np.maximum.at(top, lab, counts)
    total = np.zeros(k, np.int64)
    np.maximum.at(total, lab, counts + prior)
    done = np.zeros(k, bool) if pseudo else (draws >= capacity) & (draws > 0)
    per = {"draws": d, "unique": unique, "max_repeat": top,
           "mean_repeat": np.where(unique > 0, d / np.maximum(unique, 1), 0.0),
           "exhausted_at": np.where(done, exhausted_at, -1),
           "quota": d.copy() if pseudo else quotas.quota.astype(np.int64), "size": corpus.sizes.copy(),
           "max_total": total}
    if corpus.tokens is not None:
        per["tokens"] = np.bincount(lab, weights=counts * corpus.tokens, minlength=k).astype(np.int64)
    return per, np.bincount(counts)
