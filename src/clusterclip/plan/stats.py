"""Statistics of a plan: the mixture of the emitted stream, and per-cluster counts in closed form.

Within a group every document is drawn ``full`` or ``full + 1`` times (passes of permutations), so
draws, unique documents, repeats and the repetition histogram follow from the group's draws and the
one partial pass, without reading the plan back. Only the mixture over training (draws of each
cluster per window) and the positions where clusters are exhausted come from the stream itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from clusterclip.plan.config import PlanConfig
from clusterclip.plan.order import Chunk
from clusterclip.plan.passes import Passes
from clusterclip.plan.quotas import Corpus, Groups, Quotas

N_WINDOWS = 100


def default_window(length: int) -> int:
    """Draws per mixture window when the config names none: a hundredth of the plan (at least 1)."""
    return max(1, length // N_WINDOWS)


class StreamStats:
    """Accumulates, chunk by chunk, the mixture (draws per window per cluster) and exhaustion positions.

    For a pseudo-group plan (``random``) the clusters of the draws are read through ``labels`` and a
    cluster is exhausted where its running count reaches ``cap * n_c``.
    """

    def __init__(self, corpus: Corpus, length: int, window: int, cap: int | None, pseudo: bool) -> None:
        self.window, self.k = window, corpus.k
        self.mixture = np.zeros((-(-length // window), corpus.k), dtype=np.int64)
        self.exhausted_at = np.full(corpus.k, -1, dtype=np.int64)
        self._labels = corpus.labels if pseudo else None
        self._target = None if cap is None or not pseudo else cap * corpus.sizes
        self._seen = np.zeros(corpus.k, np.int64)

    def add(self, chunk: Chunk, out: np.ndarray) -> None:
        """Count the draws of ``chunk`` (whose document indices are in ``out``)."""
        if self._labels is not None:
            clusters = self._labels[out[chunk.pos:chunk.pos + chunk.count]].astype(np.int64)
            self.add_sequence(chunk.pos, clusters)
            if self._target is not None:
                self._track_exhaustion(chunk.pos, clusters)
            return
        if chunk.groups is not None:
            self.add_sequence(chunk.pos, chunk.groups)
        else:
            self._add_rounds(chunk.pos, chunk.active, chunk.count // chunk.active.size)
        self.exhausted_at[chunk.last] = chunk.last_pos

    def add_sequence(self, pos: int, clusters: np.ndarray) -> None:
        """Count draws of ``clusters`` (one per draw, in order) from plan position ``pos``."""
        if clusters.size == 0:
            return
        w0 = pos // self.window
        w1 = (pos + clusters.size - 1) // self.window
        win = np.arange(pos, pos + clusters.size, dtype=np.int64) // self.window - w0
        counts = np.bincount(win * self.k + clusters, minlength=(w1 - w0 + 1) * self.k)
        self.mixture[w0:w1 + 1] += counts.reshape(w1 - w0 + 1, self.k)

    def _add_rounds(self, pos: int, active: np.ndarray, rounds: int) -> None:
        """Rounds of ``active`` (one draw each, in this order) starting at plan position ``pos``."""
        m = active.size
        end = pos + rounds * m
        if pos // self.window == (end - 1) // self.window:  # most chunks lie inside one window
            self.mixture[pos // self.window, active] += rounds
            return
        j = np.arange(m, dtype=np.int64)
        for w in range(pos // self.window, (end - 1) // self.window + 1):
            lo, hi = max(w * self.window, pos), min((w + 1) * self.window, end)
            first = np.clip(-((pos + j - lo) // m), 0, rounds)
            last = np.clip(-((pos + j - hi) // m), 0, rounds)
            self.mixture[w, active] += last - first

    def _track_exhaustion(self, pos: int, clusters: np.ndarray) -> None:
        assert self._target is not None
        now = self._seen + np.bincount(clusters, minlength=self.k)
        hit = np.flatnonzero((self._seen < self._target) & (now >= self._target))
        if hit.size:
            idx = np.flatnonzero(np.isin(clusters, hit))
            order = np.argsort(clusters[idx], kind="stable")
            first = np.searchsorted(clusters[idx][order], hit)
            nth = self._target[hit] - self._seen[hit] - 1
            self.exhausted_at[hit] = pos + idx[order[first + nth]]
        self._seen = now


def per_cluster(corpus: Corpus, groups: Groups, quotas: Quotas, draws: np.ndarray, passes: Passes,
                stream: StreamStats) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Per-cluster statistics and the repetition histogram (``hist[r]``: documents drawn ``r`` times)."""
    sizes = corpus.sizes
    full_g, rem_g = np.divmod(draws, np.maximum(groups.sizes, 1))
    partial = _partial_passes(passes, full_g, rem_g) if groups.pseudo or corpus.tokens is not None else None
    full = full_g[0] * (sizes > 0) if groups.pseudo else full_g
    extra = np.bincount(corpus.labels[partial], minlength=corpus.k) if groups.pseudo else rem_g
    d = full * sizes + extra
    unique = np.where(full > 0, sizes, extra)
    per = {
        "draws": d, "unique": unique, "max_repeat": full + (extra > 0),
        "mean_repeat": np.where(unique > 0, d / np.maximum(unique, 1), 0.0),
        "exhausted_at": _capped(stream.exhausted_at, d, sizes, quotas.cap),
        "quota": d.copy() if groups.pseudo else quotas.quota.astype(np.int64), "size": sizes.copy(),
    }
    if corpus.tokens is not None:
        tok_sizes = (np.bincount(corpus.labels, weights=corpus.tokens, minlength=corpus.k).astype(np.int64)
                     if groups.pseudo else groups.unit_sizes)
        tok_partial = np.bincount(corpus.labels[partial], weights=corpus.tokens[partial], minlength=corpus.k)
        per["tokens"] = full * tok_sizes + tok_partial.astype(np.int64)
    return per, repeat_hist(full_g, rem_g, groups.sizes)


def _partial_passes(passes: Passes, full: np.ndarray, rem: np.ndarray) -> np.ndarray:
    """The documents of every group's last, partial pass (its first ``rem`` entries)."""
    rows = [passes.pass_row(int(c), int(full[c]))[:rem[c]] for c in np.flatnonzero(rem > 0)]
    return np.concatenate(rows) if rows else np.zeros(0, np.int64)


def _capped(exhausted_at: np.ndarray, d: np.ndarray, sizes: np.ndarray, cap: int | None) -> np.ndarray:
    """Exhaustion positions of the clusters whose draws reached the cap; -1 for the others."""
    if cap is None:
        return np.full_like(exhausted_at, -1)
    return np.where((d >= cap * sizes) & (sizes > 0), exhausted_at, -1)


def repeat_hist(full: np.ndarray, rem: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Documents drawn ``r`` times, for groups of ``sizes`` documents drawn ``full`` passes and ``rem`` more."""
    top = int((full + (rem > 0)).max()) if full.size else 0
    hist = np.bincount(full, weights=sizes - rem, minlength=top + 1)[: top + 1].astype(np.int64)
    hist += np.bincount(full + 1, weights=rem, minlength=top + 2)[: top + 1].astype(np.int64)
    nz = np.flatnonzero(hist)
    return hist[: nz[-1] + 1] if nz.size else np.zeros(1, np.int64)


def summary(config: PlanConfig, corpus: Corpus, quotas: Quotas, per: dict[str, np.ndarray], hist: np.ndarray,
            window: int, n_windows: int, seconds: float) -> dict[str, Any]:
    """The plan's statistics as JSON (what ``plan.json`` records under ``stats``)."""
    length = int(per["draws"].sum())
    unique = int(per["unique"].sum())
    ex = per["exhausted_at"]
    exhausted = ex[ex >= 0]
    return {
        "strategy": config.strategy, "name": config.name(), "budget_unit": config.budget_unit,
        "budget": quotas.budget, "max_repeat": quotas.cap,
        "tau": float(config.tau) if config.strategy_class.USES_TAU else None,
        "order": config.order, "seed": int(config.seed),
        "length": length,
        "tokens": int(per["tokens"].sum()) if "tokens" in per else None,
        "n_docs": corpus.n, "n_clusters": corpus.k,
        "clusters_drawn": int((per["draws"] > 0).sum()),
        "unique_docs": unique, "coverage": unique / corpus.n,
        "max_repeat_observed": int(hist.size - 1),
        "mean_repeat": length / unique if unique else 0.0,
        "clusters_exhausted": int(exhausted.size),
        "first_exhausted_at": int(exhausted.min()) if exhausted.size else -1,
        "water_level": quotas.level, "window": window, "n_windows": n_windows,
        "seconds": round(seconds, 3),
    }
