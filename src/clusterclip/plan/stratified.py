"""Plans over strata: the planner's steps when a plan has strata, quality-weighted draws or rehydration.

The steps are the plain plan's (``docs/sampling.md``), one level down: the sampling groups are the strata
(:mod:`clusterclip.plan.strata`), their quotas water-filled across clusters and inside each cluster
(:mod:`clusterclip.plan.nested`), drawn in passes of seeded permutations inside each stratum (so no document
exceeds its stratum's cap), each stratum's draws spread over its cluster's span of the run, and merged by
virtual time. The statistics are counted from the emitted stream (per document), so they are exact for any
strata; memory is O(N) besides what the plain planner holds.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from clusterclip.plan.config import PlanConfig
from clusterclip.plan.groups import Corpus, Groups, Quotas
from clusterclip.plan.interleave import Placed
from clusterclip.plan.nested import NestedQuotas, cluster_scale, nested_quotas
from clusterclip.plan.order import Chunk
from clusterclip.plan.passes import Passes, draws_for_tokens, passes_needed
from clusterclip.plan.prior import PriorPasses, group_levels
from clusterclip.plan.strata import Strata

EXHAUSTED_LISTED = 50


@dataclass(frozen=True)
class StrataDraws:
    """The strata of one plan, their quotas, the passes to draw from, each stratum's draws, and each cluster's
    draws and scale (the clusters' order: :mod:`clusterclip.plan.interleave`)."""

    corpus: Corpus
    strata: Strata
    groups: Groups
    quotas: NestedQuotas
    passes: Passes
    draws: np.ndarray
    cluster_draws: np.ndarray
    cluster_scale: np.ndarray
    prior: np.ndarray | None = None


@contextlib.contextmanager
def strata_draws(corpus: Corpus, config: PlanConfig, strata: Strata, chunk_size: int,
                 prior: np.ndarray | None = None) -> Iterator[StrataDraws]:
    """Quotas and passes over ``strata`` (closed on exit); ``prior``: draws each unit already had (a continuation).
    A strategy without clusters (``random``) has one outer group: its strata are the tiers."""
    s = strata.k
    outer = corpus.k if config.strategy_class.CLUSTERED else 1
    sizes = np.bincount(strata.unit, minlength=s).astype(np.int64)
    unit_sizes = sizes if config.budget_unit == "docs" else \
        np.bincount(strata.unit, weights=corpus.tokens, minlength=s).astype(np.int64)
    groups = Groups(strata.unit.astype(np.int32 if s < 2**31 else np.int64), s, sizes, unit_sizes, False)
    capacity = None
    if prior is not None:
        capacity = group_levels(groups, prior, strata.cap)[1]
    quotas = nested_quotas(strata, config, unit_sizes, outer, capacity)
    scratch = chunk_size + 2 * s + 16
    if prior is None:
        passes: Passes = Passes(groups.labels, sizes, passes_needed(quotas.quota, unit_sizes), config.seed, scratch)
    else:
        passes = PriorPasses(groups, prior, strata.cap, quotas.quota, config.seed, scratch)
    with passes:
        draws = quotas.quota
        if config.budget_unit == "tokens":
            draws = draws_for_tokens(passes, quotas.quota, unit_sizes, corpus.tokens, quotas.rank)
        d_c, scale = cluster_scale(config, strata, quotas, draws, sizes, unit_sizes, outer)
        yield StrataDraws(corpus, strata, groups, quotas, passes, draws, d_c, scale, prior)


class StrataStream:
    """Counts the emitted stream run by run (consecutive chunks): the mixture of clusters and of tiers per window and
    each cluster's last position, from what :func:`~clusterclip.plan.interleave.place` put where; then the draws per
    document, from the whole plan at once (:meth:`finish`)."""

    def __init__(self, corpus: Corpus, strata: Strata, length: int, window: int, pseudo: bool) -> None:
        self.labels, self.tier, self.window, self.pseudo = corpus.labels, strata.tier, window, pseudo
        windows = -(-length // window)
        self.mixture = np.zeros((windows, corpus.k), np.int64)
        self.tier_mixture = np.zeros((windows, len(strata.tier_labels)), np.int64)
        self.counts = np.zeros(corpus.n, np.int64)
        self.last = np.full(corpus.k, -1, np.int64)
        """Each cluster's last position in the plan (-1: never drawn)."""

    def add(self, run: list[Chunk], placed: Placed, out: np.ndarray) -> None:
        """Count a run of consecutive chunks of the plan (``out``: the plan so far) in one pass."""
        pos = run[0].pos
        if placed.clusters.size == 0:
            return
        if self.pseudo:  # one outer group: the clusters and each one's last draw from the documents
            clusters = self.labels[out[pos:pos + placed.clusters.size]].astype(np.int64)
            np.maximum.at(self.last, clusters, pos + np.arange(clusters.size))
        else:  # the chunks are emitted over the clusters: each one's final draw is in one chunk
            clusters = placed.clusters
            for chunk in run:
                self.last[chunk.last] = chunk.last_pos
        _windows(self.mixture, pos, np.arange(clusters.size), clusters, self.window)
        _windows(self.tier_mixture, pos, placed.position, self.tier[placed.stratum], self.window)

    def finish(self, out: np.ndarray, block: int = 1 << 24) -> None:
        """Count the draws of each document in the whole plan ``out`` (in blocks: a memory-mapped plan stays
        streamed)."""
        for i in range(0, out.shape[0], block):
            self.counts += np.bincount(out[i:i + block], minlength=self.counts.size)


def _windows(mixture: np.ndarray, pos: int, at: np.ndarray, keys: np.ndarray, window: int) -> None:
    """Add one draw of ``keys[j]`` at plan position ``pos + at[j]`` to its window's row of ``mixture``."""
    k = mixture.shape[1]
    w0, w1 = pos // window, (pos + keys.size - 1) // window
    win = (pos + at) // window - w0
    mixture[w0:w1 + 1] += np.bincount(win * k + keys, minlength=(w1 - w0 + 1) * k).reshape(w1 - w0 + 1, k)


def strata_statistics(p: StrataDraws, stream: StrataStream,
                      pseudo: bool) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray]:
    """Per-cluster and per-stratum statistics and the repetition histogram, from the per-unit counts.

    Counted once per stratum over the units, then summed per cluster over the strata (a stratum lies in one
    cluster); a plan without clusters (``pseudo``: its strata are tiers) counts its clusters over the units."""
    c, st, k = stream.counts, p.strata, p.corpus.k
    total = c if p.prior is None else c + p.prior
    cap = st.cap
    full = np.isfinite(cap[st.unit]) & (total >= cap[st.unit])  # a unit at its stratum's cap
    drawn = c > 0
    stratum = {"cluster": st.cluster.astype(np.int64), "tier": st.tier.astype(np.int64),
               "size": p.groups.sizes.copy(), "quota": p.quotas.quota.astype(np.int64),
               "draws": np.bincount(st.unit, weights=c, minlength=st.k).astype(np.int64),
               "unique": np.bincount(st.unit, weights=drawn, minlength=st.k).astype(np.int64)}
    if p.corpus.tokens is not None:
        stratum["tokens"] = np.bincount(st.unit, weights=c * p.corpus.tokens, minlength=st.k).astype(np.int64)
    if pseudo:
        lab = p.corpus.labels
        live = st.rate[st.unit] > 0
        open_units = np.bincount(lab, weights=live & ~full, minlength=k)
        drawable = np.bincount(lab, weights=live, minlength=k)
        d = np.bincount(lab, weights=c, minlength=k).astype(np.int64)
        unique = np.bincount(lab, weights=drawn, minlength=k).astype(np.int64)
        top = _max_by(lab, c, k)
        tokens = None if p.corpus.tokens is None else \
            np.bincount(lab, weights=c * p.corpus.tokens, minlength=k).astype(np.int64)
    else:
        live = st.rate > 0
        sizes = p.groups.sizes
        open_units = np.bincount(st.cluster, weights=np.where(live, sizes - np.bincount(
            st.unit, weights=full, minlength=st.k), 0), minlength=k)
        drawable = np.bincount(st.cluster, weights=np.where(live, sizes, 0), minlength=k)
        d = np.bincount(st.cluster, weights=stratum["draws"], minlength=k).astype(np.int64)
        unique = np.bincount(st.cluster, weights=stratum["unique"], minlength=k).astype(np.int64)
        top = _max_by(st.cluster, _max_by(st.unit, c, st.k), k)
        tokens = None if p.corpus.tokens is None else \
            np.bincount(st.cluster, weights=stratum["tokens"], minlength=k).astype(np.int64)
    done = (open_units == 0) & (drawable > 0) & (stream.last >= 0)
    per = {"draws": d, "unique": unique, "max_repeat": top,
           "mean_repeat": np.where(unique > 0, d / np.maximum(unique, 1), 0.0),
           "exhausted_at": np.where(done, stream.last, -1),
           "quota": d.copy() if pseudo else p.quotas.cluster_quota.astype(np.int64), "size": p.corpus.sizes.copy()}
    if p.prior is not None:
        per["max_total"] = _max_by(p.corpus.labels, total, k)
    if tokens is not None:
        per["tokens"] = tokens
    return per, stratum, np.bincount(c).astype(np.int64)


def _max_by(group: np.ndarray, values: np.ndarray, k: int) -> np.ndarray:
    """The largest of ``values`` in each of ``k`` groups (0 for an empty group; the values are counts)."""
    top = np.zeros(k, np.int64)
    np.maximum.at(top, group, values)
    return top


def strata_summary(p: StrataDraws, per: dict[str, np.ndarray], stratum: dict[str, np.ndarray],
                   counts: np.ndarray, config: PlanConfig) -> dict[str, Any]:
    """What ``plan.json`` records of the strata: the settings, every tier's rate, cap, documents, draws and
    tokens, the quantile edges, and what the caps did (documents at their tier's cap, exhausted clusters)."""
    st = p.strata
    t = len(st.tier_labels)
    tier_docs = np.bincount(st.unit_tier, minlength=t)
    tier_draws = np.bincount(st.tier, weights=stratum["draws"], minlength=t).astype(np.int64)
    tier_unique = np.bincount(st.tier, weights=stratum["unique"], minlength=t).astype(np.int64)
    tier_tokens = np.bincount(st.tier, weights=stratum["tokens"], minlength=t).astype(np.int64) \
        if "tokens" in stratum else None
    tiers = [{"label": st.tier_labels[i], "rate": float(st.tier_rate[i]),
              "cap": None if not np.isfinite(st.tier_cap[i]) else int(st.tier_cap[i]), "docs": int(tier_docs[i]),
              "draws": int(tier_draws[i]), "unique": int(tier_unique[i]),
              "tokens": None if tier_tokens is None else int(tier_tokens[i])} for i in range(t)]
    room = st.cap[st.unit]
    at_cap = int((np.isfinite(room) & (room > 0) & (counts + (0 if p.prior is None else p.prior) >= room)).sum())
    ex = per["exhausted_at"]
    hit = np.flatnonzero(ex >= 0)
    hit = hit[np.argsort(ex[hit], kind="stable")]
    return {"settings": config.strata_json(), "n_strata": st.k, "tiers": tiers, "edges": st.edges,
            "docs_at_tier_cap": at_cap, "exhausted_clusters": hit[:EXHAUSTED_LISTED].tolist(),
            "cap_binds": bool(hit.size)}


def as_quotas(p: StrataDraws, config: PlanConfig) -> Quotas:
    """The plain planner's view of the quotas (what the common summary reads: budget, cap, water level)."""
    q = p.quotas
    return Quotas(q.cluster_weights, q.cluster_quota, config.effective_max_repeat, q.budget, q.level, q.u, q.rank)
