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

import numpy as np

from clusterclip.plan.config import PlanConfig
from clusterclip.plan.groups import Corpus, Groups, Quotas
from clusterclip.plan.nested import NestedQuotas, cluster_scale, nested_quotas
from clusterclip.plan.order import Chunk
from clusterclip.plan.passes import Passes, draws_for_tokens, passes_needed
from clusterclip.plan.prior import PriorPasses, group_levels
from clusterclip.plan.stats import StreamStats
from clusterclip.plan.strata import Strata


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
    each cluster's last position; then the draws per document, from the whole plan at once (:meth:`finish`)."""

    def __init__(self, corpus: Corpus, strata: Strata, length: int, window: int, pseudo: bool) -> None:
        self.labels, self.window, self.pseudo = corpus.labels, window, pseudo
        self.clusters = StreamStats(corpus, length, window, None, False)
        """The mixture of the clusters' chunks (a plan over strata emits its clusters' order as chunks)."""
        self.tier_mixture = np.zeros((-(-length // window), len(strata.tier_labels)), np.int64)
        self.counts = np.zeros(corpus.n, np.int64)
        self.last = self.clusters.exhausted_at if not pseudo else np.full(corpus.k, -1, np.int64)
        """Each cluster's last position in the plan (-1: never drawn)."""

    @property
    def mixture(self) -> np.ndarray:
        return self.clusters.mixture

    def add(self, run: list[Chunk], tiers: np.ndarray, out: np.ndarray) -> None:
        """Count a run of consecutive chunks of the plan (``out``: the plan so far; ``tiers``: the tier of each of the
        run's positions)."""
        pos = run[0].pos
        if tiers.size == 0:
            return
        if self.pseudo:  # one outer group: the clusters and each one's last draw from the documents
            clusters = self.labels[out[pos:pos + tiers.size]].astype(np.int64)
            np.maximum.at(self.last, clusters, pos + np.arange(clusters.size))
            self.clusters.add_sequence(pos, clusters)
        else:
            for chunk in run:
                self.clusters.add(chunk, out)
        t = self.tier_mixture.shape[1]
        for w in range(pos // self.window, (pos + tiers.size - 1) // self.window + 1):
            lo, hi = max(w * self.window, pos) - pos, min((w + 1) * self.window, pos + tiers.size) - pos
            self.tier_mixture[w] += np.bincount(tiers[lo:hi], minlength=t)

    def finish(self, out: np.ndarray, block: int = 1 << 24) -> None:
        """Count the draws of each document in the whole plan ``out`` (in blocks: a memory-mapped plan stays
        streamed)."""
        for i in range(0, out.shape[0], block):
            self.counts += np.bincount(out[i:i + block], minlength=self.counts.size)


def as_quotas(p: StrataDraws, config: PlanConfig) -> Quotas:
    """The plain planner's view of the quotas (what the common summary reads: budget, cap, water level)."""
    q = p.quotas
    return Quotas(q.cluster_weights, q.cluster_quota, config.effective_max_repeat, q.budget, q.level, q.u, q.rank)
