"""``build_plan``: ClusterClip Sampling from cluster labels to one ordered array of document indices.

The method, step by step (each step a module of this package; the specification is
``docs/sampling.md``):

1. **groups** (``quotas``): the clusters, or one pseudo-cluster of every document for ``random``;
2. **quotas** (``quotas``): water-filling ``q_c = min(lambda * w_c, R * n_c)``, ``sum(q_c) = budget``,
   rounded by largest remainder;
3. **passes** (``passes``): inside a group, documents in passes of fresh seeded permutations, so no
   document exceeds the cap ``R`` and repeats are spread evenly;
4. **order** (``order``): every draw at virtual time ``(k + u_c) * scale_c``, all merged by time;
5. **statistics** (``stats``): closed-form per-cluster counts plus the mixture of the emitted stream.

Everything is a function of the inputs and ``config.seed``: equal inputs give equal bytes, whatever
``chunk_size``. Memory is O(N + K * 1024 + chunk_size) besides the output, which can be a
memory-mapped ``.npy`` far larger than RAM.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.contract import plan_identity as identity
from clusterclip.contract.plan_reader import BlockChecksums
from clusterclip.errors import DISK_FULL_ERRNOS, ClusterClipError
from clusterclip.plan.clip import clip_stats
from clusterclip.plan.config import PlanConfig, PlanConfigError, is_int
from clusterclip.plan.interleave import Interleave, Slots, coalesced, place
from clusterclip.plan.order import emit, virtual_scale
from clusterclip.plan.passes import Passes, draws_for_tokens, passes_needed
from clusterclip.plan.prior import PriorPasses, counted_stats, group_levels
from clusterclip.plan.quotas import Corpus, Groups, Quotas, check_inputs, compute_quotas, sampling_groups
from clusterclip.plan.stats import StreamStats, default_window, per_cluster, summary
from clusterclip.plan.strata import Strata, build_strata
from clusterclip.plan.strata_stats import counted, strata_statistics, strata_summary
from clusterclip.plan.stratified import StrataStream, as_quotas, strata_draws

DEFAULT_CHUNK = 1 << 20


@dataclass(frozen=True)
class Plan:
    """A built plan: the order plus statistics (all JSON-able or int64/float64 arrays).

    ``per_cluster`` arrays (length K): draws, unique, max_repeat, mean_repeat, exhausted_at (plan
    position of the draw that used up the cluster's capacity ``R * n_c``, -1 if never), quota (draws,
    or tokens in token mode), size and, when token counts were given, tokens. ``mixture[w, c]`` counts
    the draws of cluster c in window w (``stats["window"]`` draws each); ``repeat_hist[r]`` counts the
    documents drawn r times. ``identity`` is the content hash of the order (``contract.plan_identity``);
    ``checksums`` the CRC-32 of each block of 2^20 entries (``contract.plan_reader``). A plan over strata also has
    ``per_stratum`` arrays (length S: cluster, tier, size, quota, draws, unique, tokens), the ``tier_mixture``
    (draws of each tier per window) and ``tiers``, the tier of each document (``stats["strata"]`` names them).
    """

    order: np.ndarray
    stats: dict[str, Any]
    per_cluster: dict[str, np.ndarray]
    mixture: np.ndarray
    repeat_hist: np.ndarray
    config: PlanConfig = field(default_factory=PlanConfig)
    identity: str = ""
    checksums: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint32))
    per_stratum: dict[str, np.ndarray] | None = None
    tier_mixture: np.ndarray | None = None
    tiers: np.ndarray | None = None


@dataclass(frozen=True)
class Draws:
    """Steps 1-3 of the method for one plan: who is sampled, how often, and the passes to draw from.

    A continuation also holds the ``prior`` counts per document and each group's remaining ``capacity``.
    """

    corpus: Corpus
    groups: Groups
    quotas: Quotas
    passes: Passes
    draws: np.ndarray
    scale: np.ndarray
    prior: np.ndarray | None = None
    capacity: np.ndarray | None = None


@contextlib.contextmanager
def plan_draws(labels: Any, config: PlanConfig, tokens: Any, n_clusters: int | None,
               chunk_size: int, prior: Any = None) -> Iterator[Draws]:
    """Validate the inputs, compute groups and quotas, and open the passes (closed on exit).

    ``prior`` (int [N]): draws each document already had in a parent plan's prefix (a continuation).
    """
    corpus = check_inputs(labels, tokens, n_clusters)
    groups = sampling_groups(corpus, config)
    capacity = None
    if prior is not None:
        prior = _check_prior(prior, corpus, config)
        capacity = group_levels(groups, prior, config.effective_max_repeat)[1]
    quotas = compute_quotas(groups, config, capacity)
    scratch = chunk_size + 2 * groups.k + 16  # the most draws one chunk can take from the passes
    passes = (Passes(groups.labels, groups.sizes, passes_needed(quotas.quota, groups.unit_sizes), config.seed,
                     scratch) if prior is None else
              PriorPasses(groups, prior, quotas.cap, quotas.quota, config.seed, scratch))
    with passes:
        draws = quotas.quota
        if config.budget_unit == "tokens":
            draws = draws_for_tokens(passes, quotas.quota, groups.unit_sizes, corpus.tokens, quotas.rank)
        yield Draws(corpus, groups, quotas, passes, draws, virtual_scale(config, groups, quotas, draws), prior,
                    capacity)


def _check_prior(prior: Any, corpus: Corpus, config: PlanConfig) -> np.ndarray:
    arr = np.asarray(prior)
    if arr.shape != (corpus.n,) or not np.issubdtype(arr.dtype, np.integer) or (arr.size and int(arr.min()) < 0):
        raise PlanConfigError(f"prior must hold one count >= 0 per document ({corpus.n}), got {arr.dtype} {arr.shape}")
    if config.budget_unit != "docs":
        raise PlanConfigError("budget_unit", "must be 'docs' for a continuation (its budget is plan positions)")
    return arr.astype(np.int64, copy=False)


def build_plan(labels: np.ndarray, config: PlanConfig, tokens: np.ndarray | None = None,
               out: str | os.PathLike[str] | None = None, chunk_size: int = DEFAULT_CHUNK,
               n_clusters: int | None = None, prior: np.ndarray | None = None, fields: Any = None) -> Plan:
    """Build the ordered plan for ``labels`` (int [N], cluster ids) under ``config``.

    ``tokens`` (int [N]) is required for ``budget_unit="tokens"`` and, when given, adds token
    statistics. With ``out`` the order is streamed into that ``.npy`` (temp file, then atomic rename)
    and returned as a read-only memmap; memory then stays O(N + chunk_size). ``n_clusters`` declares
    K when trailing clusters are empty. ``prior`` (int [N]) makes a continuation: document ``i`` was
    drawn ``prior[i]`` times already, so it is drawn at most ``max_repeat - prior[i]`` times more (the
    least-drawn first; see ``plan.prior``). ``fields`` maps the field names that the strata settings (``strata``,
    ``within``) name to per-document values (:func:`clusterclip.plan.strata.field_values`). Raises
    ``PlanConfigError`` for invalid inputs and ``InfeasiblePlanError`` when the budget exceeds the cap.
    """
    t0 = time.perf_counter()
    if config.duplicates != "none":
        raise PlanConfigError("duplicates", "needs the dedup groups: build it with plan.duplicates.build_grouped_plan")
    if not is_int(chunk_size) or chunk_size < 1:
        raise PlanConfigError("chunk_size", f"must be an integer >= 1, got {chunk_size!r}")
    if config.stratified:
        corpus = check_inputs(labels, tokens, n_clusters)
        return build_over_strata(corpus, config, unit_strata(corpus, config, fields), out, chunk_size, prior)
    digest = identity.OrderHash()
    blocks = BlockChecksums()
    with plan_draws(labels, config, tokens, n_clusters, chunk_size, prior) as p:
        length = int(p.draws.sum())
        window = config.window if config.window is not None else default_window(length)
        stream = StreamStats(p.corpus, length, window, p.quotas.cap if p.prior is None else None, p.groups.pseudo)
        with _output(out, length) as dest:
            for chunk in emit(p.scale, p.quotas.u, p.quotas.rank, p.draws, p.passes, dest, chunk_size):
                stream.add(chunk, dest)
                digest.add(dest[chunk.pos:chunk.pos + chunk.count])
                blocks.add(dest[chunk.pos:chunk.pos + chunk.count])
        per, hist = _statistics(p, stream)
    order = dest if out is None else np.load(out, mmap_mode="r", allow_pickle=False)
    stats = summary(config, p.corpus, p.quotas, per, hist, window, stream.mixture.shape[0],
                    time.perf_counter() - t0)
    if p.prior is None:
        stats.update(clip_stats(p.quotas.cap, p.quotas.weights, p.groups.unit_sizes, p.quotas.budget,
                                per["exhausted_at"], hist))
    return Plan(order=order, stats=stats, per_cluster=per, mixture=stream.mixture, repeat_hist=hist, config=config,
                identity=digest.hexdigest(), checksums=blocks.finish())


def unit_strata(corpus: Corpus, config: PlanConfig, fields: Any, rehydrate_sizes: Any = None) -> Strata:
    """The strata of the corpus' units: inside each cluster, or (a strategy without clusters) over all of them."""
    outer = corpus.labels if config.strategy_class.CLUSTERED else np.zeros(corpus.n, np.int64)
    return build_strata(outer, config, fields, rehydrate_sizes)


def build_over_strata(corpus: Corpus, config: PlanConfig, strata: Strata, out: str | os.PathLike[str] | None,
                      chunk_size: int, prior: Any = None) -> Plan:
    """``build_plan`` over ``strata`` (:mod:`clusterclip.plan.stratified`)."""
    t0 = time.perf_counter()
    if prior is not None:
        prior = _check_prior(prior, corpus, config)
    digest, blocks = identity.OrderHash(), BlockChecksums()
    with strata_draws(corpus, config, strata, chunk_size, prior) as p:
        length = int(p.draws.sum())
        window = config.window if config.window is not None else default_window(length)
        stream = StrataStream(corpus, strata, length, window, not config.strategy_class.CLUSTERED)
        inter = Interleave(strata.cluster, p.draws, p.quotas.u, p.cluster_draws.size)
        u_c = p.quotas.cluster_u
        with _output(out, length) as dest:
            chunks = emit(p.cluster_scale, u_c, np.argsort(u_c, kind="stable"), p.cluster_draws, Slots(), dest,
                          chunk_size)
            for run in coalesced(chunks, chunk_size):  # the rounds come in many small chunks: place them together
                span = dest[run[0].pos:run[-1].pos + run[-1].count]
                stream.add(run, place(span, run, inter, p.passes, strata.tier), dest)
                digest.add(span)
                blocks.add(span)
            if counted(p, not config.strategy_class.CLUSTERED):
                stream.finish(dest)
    per, stratum, hist, at_cap = strata_statistics(p, stream, not config.strategy_class.CLUSTERED)
    order = dest if out is None else np.load(out, mmap_mode="r", allow_pickle=False)
    stats = summary(config, corpus, as_quotas(p, config), per, hist, window, stream.mixture.shape[0],
                    time.perf_counter() - t0)
    stats["strata"] = strata_summary(p, per, stratum, at_cap, config)
    stats.update({k: stats["strata"][k] for k in ("cap_binds", "exhausted_clusters")},
                 docs_at_cap=stats["strata"]["docs_at_tier_cap"])
    return Plan(order=order, stats=stats, per_cluster=per, mixture=stream.mixture, repeat_hist=hist, config=config,
                identity=digest.hexdigest(), checksums=blocks.finish(), per_stratum=stratum,
                tier_mixture=stream.tier_mixture, tiers=strata.unit_tier)


def _statistics(p: Draws, stream: StreamStats) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Per-cluster statistics: closed form for a plan, counted per document for a continuation."""
    if p.prior is None or p.capacity is None:
        return per_cluster(p.corpus, p.groups, p.quotas, p.draws, p.passes, stream)
    assert isinstance(p.passes, PriorPasses)
    counts = p.passes.new_counts(p.draws)
    return counted_stats(p.corpus, p.quotas, p.draws, counts, p.prior, p.capacity, stream.exhausted_at,
                         p.groups.pseudo)


class PlanSpaceError(ClusterClipError):
    """The plan does not fit on its file system (checked before writing; ENOSPC while writing)."""


@contextlib.contextmanager
def _output(out: str | os.PathLike[str] | None, length: int) -> Iterator[np.ndarray]:
    """The int64 destination of the order: in memory, or a memory-mapped ``.npy`` renamed into place.

    A file's space is checked and reserved (``posix_fallocate``) before the first draw is written: a
    memory map that runs out of disk dies of SIGBUS, which no handler can turn into a message. Any
    failure removes the temp file.
    """
    if out is None:
        yield np.empty(length, dtype=np.int64)
        return
    out = Path(out)
    created = not out.parent.exists()
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with _reserved(out, length) as dest:
            yield dest
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                out.parent.rmdir()  # only if empty: nothing of this plan is left
        raise


@contextlib.contextmanager
def _reserved(out: Path, length: int) -> Iterator[np.ndarray]:
    from clusterclip.store import atomic_path

    need = 8 * length + 4096
    free = shutil.disk_usage(out.parent).free
    if need > free:
        raise PlanSpaceError(f"{out}: a plan of {length:,} draws needs {_size(need)} but its file system has "
                             f"{_size(free)} free; free space or lower --budget (at most about "
                             f"{max(free - 4096, 0) // 8:,} draws fit)")
    with atomic_path(out) as tmp:
        try:
            dest = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.int64, shape=(length,))
            _reserve(tmp)
        except OSError as exc:
            if exc.errno in DISK_FULL_ERRNOS:
                raise PlanSpaceError(f"{out}: no space left for a plan of {length:,} draws ({_size(need)}); free "
                                     "space or lower --budget") from exc
            raise
        yield dest
        dest.flush()
        del dest


def _reserve(path: Path) -> None:
    """Allocate the file's blocks now, so writes through the memory map cannot hit a full disk."""
    if not hasattr(os, "posix_fallocate"):
        return
    fd = os.open(path, os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, os.fstat(fd).st_size)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
    finally:
        os.close(fd)


def _size(n: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)
