"""The drift report of an add: how many new documents are far from every centroid, and how each cluster grew."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.contract.drift import DriftReport
from clusterclip.store import RunDir
from clusterclip.store import layout as A
from clusterclip.store.npy_rows import npy_rows

DRIFT_PERCENTILE = 5.0
COVERAGE_FLOOR = 0.5
"""A new document counts as unseen only below this coverage (or the existing documents' :data:`COVERAGE_PERCENTILE`,
if lower): the existing documents' own coverage is optimistic, since the vocabulary was fitted on them (a
same-distribution add of minipile had 13 % of its documents below their 5th percentile), while text in a language
or script the vocabulary lacks has most of its words unseen."""
COVERAGE_PERCENTILE = 1.0
"""The percentile of the existing documents' coverage that bounds the cut in a run whose own documents are often
barely seen (many scripts): low, since this test adds to the two similarity tests at 5 % each."""
REFERENCE_SIZE = 4096
"""Existing documents sampled (seeded) as the neighbourhood reference of the drift check."""
NEIGHBOURS = 10
"""A document's neighbourhood similarity is its mean cosine to this many most similar reference documents."""
CLUSTER_REFERENCE = 20
"""A cluster with at least this many reference documents may have a neighbourhood cut of its own (smaller ones:
the pooled cut): one where ``floor(level (m + 1))`` is at least 1, so the cut is a rank of the cluster's own
values (at 5 %, every such cluster)."""
CLUSTER_TEST_LEVEL = 0.05
"""The chance, when every new document is like its cluster's own, that the clusters' two-sample test
(:func:`cluster_test`) flags any document of an add."""
SHIFT_DRAWS = 200
"""Seeded multinomial draws that give the cluster shift a same-distribution add would show by chance."""
Coverage = tuple[Callable[[], Iterator[np.ndarray]], np.ndarray]
"""The old documents' coverage (a function yielding its blocks, for two streamed passes) and the new ones'."""
Neighbourhood = tuple[np.ndarray, np.ndarray, np.ndarray]
"""The reference documents' neighbourhood similarity among themselves (each left out), the new documents' and the
reference documents' clusters."""


def lower_percentile(path: Path, n: int, q: float) -> float:
    """``np.percentile(x, q, method="lower")`` of the first ``n`` float32 values of a ``.npy`` file, exact,
    in two streamed passes of a radix select (65,536 counters each) instead of loading the array."""
    return streamed_percentile(lambda: npy_rows(path, n), n, q)


def streamed_percentile(blocks: Callable[[], Iterator[np.ndarray]], n: int, q: float) -> float:
    """``np.percentile(x, q, method="lower")`` of the ``n`` float32 values that ``blocks()`` yields (called
    twice), by a radix select over their bit patterns."""
    rank = int(np.floor(q / 100.0 * (n - 1)))

    def keys() -> Iterator[np.ndarray]:
        for block in blocks():
            bits = np.asarray(block, dtype=np.float32).view(np.uint32)
            yield np.where(bits >> 31, ~bits, bits | np.uint32(0x80000000))

    high = np.zeros(1 << 16, dtype=np.int64)
    for k in keys():
        high += np.bincount(k >> 16, minlength=1 << 16)
    cum = np.cumsum(high)
    hi = int(np.searchsorted(cum, rank, side="right"))
    rank -= int(cum[hi - 1]) if hi else 0
    low = np.zeros(1 << 16, dtype=np.int64)
    for k in keys():
        low += np.bincount(k[(k >> 16) == hi] & 0xFFFF, minlength=1 << 16)
    key = np.uint32((hi << 16) | int(np.searchsorted(np.cumsum(low), rank, side="right")))
    bits = key ^ np.uint32(0x80000000) if key >> 31 else ~key
    return float(np.array([bits], dtype=np.uint32).view(np.float32)[0])


def leave_one_out(scores: Path, labels: Path, n: int, k: int) -> Callable[[], Iterator[np.ndarray]]:
    """Blocks of each of the first ``n`` documents' cosine to its cluster's centroid computed *without* it.

    A spherical k-means centroid is the normalised sum ``S_c`` of its members, so a member's own cosine is
    biased upward (it pulled the centroid towards itself), and a new document, which did not, looks farther
    than an old one just as typical. With ``s`` the member's cosine, ``|S_c|`` is the sum of its members'
    cosines and the cosine to ``S_c - x`` is ``(s |S_c| - 1) / sqrt(|S_c|^2 - 2 s |S_c| + 1)``. Exact when the
    centroids were trained on every document; for documents outside a k-means sample the correction is
    about ``1 / |S_c|``, small in the large clusters such a sample implies.
    """
    sums = np.zeros(k, np.float64)
    for s, c in zip(npy_rows(scores, n), npy_rows(labels, n), strict=True):
        sums += np.bincount(np.asarray(c, np.int64), weights=np.asarray(s, np.float64), minlength=k)[:k]

    def blocks() -> Iterator[np.ndarray]:
        for s, c in zip(npy_rows(scores, n), npy_rows(labels, n), strict=True):
            own, total = np.asarray(s, np.float64), sums[np.asarray(c, np.int64)]
            rest = np.sqrt(np.maximum(total * total - 2 * own * total + 1, 0.0))
            yield np.where(rest > 1e-9, (own * total - 1) / np.where(rest > 1e-9, rest, 1.0), -1.0).astype(np.float32)

    return blocks


def reference_rows(n_old: int, size: int = REFERENCE_SIZE, seed: int = 0) -> np.ndarray:
    """The existing documents of the neighbourhood reference: a seeded sample of ``size`` (all when fewer), sorted."""
    if n_old <= size:
        return np.arange(n_old, dtype=np.int64)
    return np.sort(np.random.default_rng(seed).choice(n_old, size=size, replace=False))


def neighbourhood(x: np.ndarray, reference: np.ndarray, k: int = NEIGHBOURS, itself: bool = False,
                  block: int = 2048) -> np.ndarray:
    """Each row of ``x``'s mean cosine to its ``k`` most similar rows of ``reference`` (unit vectors); with
    ``itself`` (``x`` is the reference) a row is never its own neighbour, so the reference's values are those
    of documents outside it and a new document like the existing ones falls below their 5th percentile 5 % of
    the time. Blocked, so memory stays ``block x len(reference)``."""
    k = min(k, len(reference) - int(itself))
    out = np.zeros(len(x), dtype=np.float32)
    if k < 1:
        return out
    ref_t = np.ascontiguousarray(np.asarray(reference, np.float32).T)
    for lo in range(0, len(x), block):
        sims = np.asarray(x[lo:lo + block], np.float32) @ ref_t
        if itself:
            sims[np.arange(len(sims)), np.arange(lo, lo + len(sims))] = -np.inf
        out[lo:lo + block] = np.partition(sims, -k, axis=1)[:, -k:].mean(axis=1)
    return out


def cluster_cuts(ref_sims: np.ndarray, ref_labels: np.ndarray, k: int, pooled: float,
                 level: float = DRIFT_PERCENTILE / 100.0) -> np.ndarray:
    """float32 [k]: each cluster's neighbourhood cut, the ``floor(level (m + 1))``-th smallest of its ``m``
    reference documents' similarities when ``m >= CLUSTER_REFERENCE`` (and that rank is at least 1), else ``pooled``.

    A conformal cut per cluster (Mondrian conformal prediction): a new document as typical of its cluster as the
    cluster's own documents falls below it with probability at most ``level``, whatever the cluster. One pooled cut
    is not: clusters of short messages or code have sparse neighbourhoods and set it low, so a new domain that
    joins a dense cluster (dictionary entries beside other dictionary entries) stays above it while it is far
    below what that cluster's own documents show."""
    cuts = np.full(k, pooled, np.float32)
    labels = np.asarray(ref_labels, np.int64)
    if not labels.size:
        return cuts
    sims = np.asarray(ref_sims, np.float32)[np.lexsort((ref_sims, labels))]
    counts = np.bincount(labels, minlength=k)[:k]
    first = np.cumsum(counts) - counts
    rank = np.floor(level * (counts + 1)).astype(np.int64)
    own = (counts >= CLUSTER_REFERENCE) & (rank >= 1)
    cuts[own] = sims[first[own] + rank[own] - 1]
    return cuts


def _keys(sims: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """float64 keys that sort by cluster, then similarity (cosines lie in [-1, 1])."""
    return np.asarray(labels, np.int64) * 4.0 + (np.asarray(sims, np.float64) + 1.0)


def neighbour_level(ref_sims: np.ndarray, ref_labels: np.ndarray, k: int) -> float:
    """The level at which the pooled and the per-cluster cuts together flag :data:`DRIFT_PERCENTILE` % of the
    reference documents, each left out: the 5th percentile of ``min(p_all, p_cluster)``, a reference document's
    rank among all reference documents and among its cluster's (clusters of at least :data:`CLUSTER_REFERENCE`;
    the others only the first), as shares.

    Either cut alone misses drift the other sees: the pooled one a new domain in a dense cluster, the per-cluster
    one a new domain in a broad cluster whose own tail is long (minipile's held-out domains join a cluster whose
    documents' 10th percentile is 0.48 while the pooled 5th is 0.53). Both at the full level would flag up to twice
    the stated share; both at half of it lose most of either's power (Bonferroni, blind to how much the two
    overlap). This is one conformal test of the combined score, so a new document like the existing ones is
    flagged with probability about :data:`DRIFT_PERCENTILE` %, counted on the reference itself (never a level
    above it: a reference of a few documents flags none)."""
    sims = np.asarray(ref_sims, np.float64)
    labels = np.asarray(ref_labels, np.int64)
    if not sims.size:
        return DRIFT_PERCENTILE / 100.0
    p_all = np.searchsorted(np.sort(sims), sims, side="right") / sims.size
    counts = np.bincount(labels, minlength=k)
    first = np.cumsum(counts) - counts
    keys = _keys(sims, labels)
    p_own = (np.searchsorted(np.sort(keys), keys, side="right") - first[labels]) / counts[labels]
    score = np.where(counts[labels] >= CLUSTER_REFERENCE, np.minimum(p_all, p_own), p_all)
    return min(float(np.percentile(score, DRIFT_PERCENTILE, method="lower")), DRIFT_PERCENTILE / 100.0)


def cluster_test(ref_sims: np.ndarray, ref_labels: np.ndarray, new_sims: np.ndarray, new_labels: np.ndarray,
                 k: int, level: float = CLUSTER_TEST_LEVEL) -> np.ndarray:
    """bool [new]: the new documents that the clusters' two-sample test counts as new, per cluster the
    ``ceil(pi n)`` of its ``n`` new documents with the lowest neighbourhood similarity.

    One document at a time, a new domain shifted down within a cluster is flagged only where it falls into the
    cluster's 5 % tail; as a group its ``n`` documents show it plainly. If a share ``pi`` of them is not
    distributed like the cluster's ``m`` own documents (the rest is), ``F_new(t) <= (1 - pi) F_own(t) + pi`` for
    every ``t``, so ``pi >= (F_new(t) - F_own(t)) / (1 - F_own(t))``. With the empirical distributions, less the
    one-sided two-sample Kolmogorov-Smirnov margin ``eps = sqrt(log(T / level) (n + m) / (2 n m))`` (``T``: the
    clusters with both kinds of documents, Bonferroni), the largest such ``pi`` is the estimate; when every new
    document of every cluster is like its cluster's own, the chance that any cluster flags one is at most about
    ``level``."""
    labels, new_labels = np.asarray(ref_labels, np.int64), np.asarray(new_labels, np.int64)
    flags = np.zeros(len(new_labels), bool)
    m = np.bincount(labels, minlength=k)[:k]
    n = np.bincount(new_labels, minlength=k)[:k]
    tested = (m > 0) & (n > 0)
    if not tested.any():
        return flags
    eps = np.sqrt(np.log(np.count_nonzero(tested) / level) * (n + m) / (2.0 * np.maximum(n * m, 1)))
    order = np.lexsort((new_sims, new_labels))
    lab = new_labels[order]
    keys = _keys(np.asarray(new_sims)[order], lab)
    first_new, first_ref = np.cumsum(n) - n, np.cumsum(m) - m
    f_new = (np.searchsorted(keys, keys, side="right") - first_new[lab]) / n[lab]
    f_own = (np.searchsorted(np.sort(_keys(ref_sims, labels)), keys, side="right") - first_ref[lab]) / np.maximum(
        m[lab], 1)
    ok = tested[lab] & (f_own < 1)
    share = np.zeros(k)
    np.maximum.at(share, lab[ok], (f_new[ok] - f_own[ok] - eps[lab[ok]]) / (1 - f_own[ok]))
    count = np.ceil(share * n - 1e-9).astype(np.int64)
    flags[order] = np.arange(len(order)) - first_new[lab] < count[lab]
    return flags


def _neighbour_flags(neighbours: Neighbourhood, new_labels: np.ndarray, k: int) -> tuple[np.ndarray, dict[str, Any]]:
    """The new documents the neighbourhood tests flag (the cuts at :func:`neighbour_level`, or the clusters'
    :func:`cluster_test`) and what the report says of them."""
    ref_sims, new_sims, ref_labels = neighbours
    new_labels = np.asarray(new_labels, np.int64)
    level = neighbour_level(ref_sims, ref_labels, k)
    rank = int(np.floor(level * (len(ref_sims) + 1)))
    pooled = float(np.sort(np.asarray(ref_sims, np.float32))[rank - 1]) if rank >= 1 else -1.0
    cuts = np.maximum(cluster_cuts(ref_sims, ref_labels, k, pooled, level), np.float32(pooled))
    isolated = np.asarray(new_sims) < cuts[new_labels]
    grouped = cluster_test(ref_sims, ref_labels, new_sims, new_labels, k)
    own = np.bincount(np.asarray(ref_labels, np.int64), minlength=k)[:k] >= CLUSTER_REFERENCE
    return isolated | grouped, {
        "neighbour_cut": round(pooled, 6), "neighbour_level": round(level, 6),
        "below_neighbour_cut": int(np.count_nonzero(isolated)), "reference_documents": len(ref_sims),
        "clusters_with_own_cut": int(own.sum()), "cluster_test_flagged": int(np.count_nonzero(grouped)),
        "cluster_test_clusters": int(np.unique(new_labels[grouped]).size)}


def drift_report(old: tuple[Path, Path], n_old: int, new_scores: np.ndarray, new_labels: np.ndarray,
                 old_sizes: np.ndarray, threshold: float, coverage: Coverage | None = None,
                 neighbours: Neighbourhood | None = None) -> dict[str, Any]:
    """The drift statistics of an add: the share of new documents that are *new*, the cluster shift and the
    growth of every cluster; ``old`` holds the existing documents' ``scores.npy`` and ``labels.npy``. A new
    document is new when

    * its best cosine to any centroid is below the 5th percentile of the existing documents' cosines to their
      centroid without them (:func:`leave_one_out`, from ``scores.npy`` and ``labels.npy``), or
    * with ``neighbours``, its :func:`neighbourhood` similarity to a sample of the existing documents is low:
      below the pooled cut or its cluster's own cut (:func:`cluster_cuts`), both at the one level
      (:func:`neighbour_level`) at which together they flag 5 % of the sample's own documents, or among the lowest
      of its cluster's new documents when those, as a group, are less similar than the cluster's own
      (:func:`cluster_test`): a centroid averages a whole cluster, so with a fitted embedder a new topic can sit
      as close to some centroid as the existing documents do while no existing document is near it (minipile
      with two domains held out, ``lsa``: 2.5 % of them below the centroid cut), or
    * with ``coverage`` (the old documents' confidence shards and the new documents' coverage), the embedder
      saw less of it than :data:`COVERAGE_FLOOR` (or the existing documents' 1st percentile, if lower): a
      fitted vocabulary drops the words it never saw, so text in another language can look familiar by
      cosine while most of it went unseen."""
    reference = leave_one_out(*old, n_old, len(old_sizes))
    cut = streamed_percentile(reference, n_old, DRIFT_PERCENTILE)
    far = new_scores < cut
    report: dict[str, Any] = {"similarity_cut": round(cut, 6), "below_cut": int(np.count_nonzero(far))}
    if neighbours is not None:
        isolated, described = _neighbour_flags(neighbours, new_labels, len(old_sizes))
        far = far | isolated
        report.update(described)
    unseen = np.zeros_like(far)
    if coverage is not None:
        old, new = coverage
        coverage_cut = min(COVERAGE_FLOOR, streamed_percentile(old, n_old, COVERAGE_PERCENTILE))
        unseen = np.asarray(new) < coverage_cut
        report.update(coverage_cut=round(coverage_cut, 6), below_coverage_cut=int(np.count_nonzero(unseen)))
    share = int(np.count_nonzero(far | unseen)) / max(1, len(new_scores))
    added = np.bincount(new_labels, minlength=len(old_sizes)).astype(np.int64)
    growth = added / np.maximum(old_sizes, 1)
    shift = cluster_shift(added, old_sizes)
    return {
        "documents_before": int(n_old), "documents_added": len(new_scores),
        "percentile": DRIFT_PERCENTILE, "reference": "leave-one-out", **report,
        "cluster_shift": shift["shift"], "cluster_shift_chance": shift["chance"],
        "cluster_shift_excess": shift["excess"],
        "drift_share": round(share, 6), "drift_threshold": threshold, "recommend_refit": share > threshold,
        "cluster_before": old_sizes.astype(int).tolist(), "cluster_added": added.tolist(),
        "cluster_growth": [round(float(g), 6) for g in growth],
    }


def cluster_shift(added: np.ndarray, old_sizes: np.ndarray, draws: int = SHIFT_DRAWS,
                  seed: int = 0) -> dict[str, float]:
    """How far the new documents' spread over the clusters is from the existing documents' spread.

    ``shift`` is the total variation distance between the two (the share of the new documents that would have to
    move to another cluster to match), ``chance`` its mean over ``draws`` seeded multinomial draws of as many
    documents from the existing spread (what a same-distribution add shows by sampling alone), and ``excess`` =
    ``max(0, shift - chance)``: an estimate of the share of new documents that went where the existing ones do
    not. It is reported beside the drift share, not part of it: a new topic that the embedder maps near existing
    centroids (a fitted vocabulary keeps a document's known words and drops the rest, so its documents look familiar
    one by one) crowds into a few clusters and shows here, but so does an add that merely changes the mix of
    existing topics, which needs no re-clustering.
    """
    n = int(added.sum())
    total = int(old_sizes.sum())
    if n == 0 or total == 0:
        return {"shift": 0.0, "chance": 0.0, "excess": 0.0}
    p = old_sizes.astype(np.float64) / total
    shift = 0.5 * float(np.abs(added / n - p).sum())
    sample = np.random.default_rng(seed).multinomial(n, p, size=draws) / n
    chance = 0.5 * float(np.abs(sample - p).sum(axis=1).mean())
    return {"shift": round(shift, 6), "chance": round(chance, 6), "excess": round(max(0.0, shift - chance), 6)}


def duplicates_note(skipped: int, within: int) -> str:
    """Where the ``skipped`` duplicates of an add were: ``within`` of them repeat a text earlier in the new inputs,
    the others a text the run already holds."""
    parts = [f"{skipped - within:,} with a text already in the run" if skipped > within else "",
             f"{within:,} repeating a text earlier in the new inputs" if within else ""]
    return " and ".join(p for p in parts if p)


def format_drift(report: dict[str, Any], run: RunDir) -> str:
    """The drift report (what :func:`clusterclip.add.workflow.add_documents` returns) as ``clusterclip add`` prints
    it."""
    if report.get("already_added"):
        return (f"{', '.join(report['inputs'])}: already added to {run.root}; nothing to do "
                f"(the latest add's drift report is {run.path(A.DRIFT_REPORT)})")
    d = DriftReport.from_json(report, str(run.path(A.DRIFT_REPORT)))
    growth = np.asarray(d.cluster_growth)
    top = np.argsort(-growth, kind="stable")[:5]
    lines = [
        f"added {d.documents_added:,} documents to {d.documents_before:,} in {run.root}",
        f"drift: {d.drift_share:.1%} of the new documents are new (threshold {d.drift_threshold:.0%}): "
        f"less similar to every centroid than the 5th percentile of the existing ones (cosine "
        f"{d.similarity_cut:.4f}: {d.below_cut:,} documents)" + (
            f", or with no existing document near them (neighbourhood below the pooled cut {d.neighbour_cut:.4f} or "
            f"their cluster's own, {d.clusters_with_own_cut or 0:,} clusters with one, together 5% of the existing "
            f"documents: {d.below_neighbour_cut:,}; or among the least near of a cluster whose new documents are, "
            f"as a group, farther than its own: {d.cluster_test_flagged or 0:,} in "
            f"{d.cluster_test_clusters or 0:,} clusters)" if d.neighbour_cut is not None else "") + (
            f" or too little of them seen by the embedder (coverage below {d.coverage_cut:.2f}: "
            f"{d.below_coverage_cut:,})" if d.coverage_cut is not None else ""),
        f"cluster shift: {d.cluster_shift:.1%} of the new documents would have to move to match the existing "
        f"spread over clusters ({d.cluster_shift_chance:.1%} by chance for an add this size): a new topic the "
        "embedder maps near existing centroids shows here, as does a change of mixture",
        "fastest-growing clusters: " + ", ".join(
            f"{c} (+{d.cluster_added[c]} on {d.cluster_before[c]}, {growth[c]:.0%})" for c in top),
    ]
    if d.duplicates_skipped:
        lines.insert(1, f"skipped {d.duplicates_skipped:,} duplicate documents: "
                        f"{duplicates_note(d.duplicates_skipped, d.duplicates_within)} "
                        "(add --allow-duplicates to append them)")
    if d.recommend_refit:
        lines.append(f"recommendation: re-cluster with `clusterclip cluster {run.root} --refit` (it refuses while "
                     "plans exist unless --force: continue a running plan with `plan --continue` after it)")
    else:
        lines.append("the existing clusters still fit the new documents; no re-clustering needed")
    if d.dedup and d.dedup["extended"]:
        lines.append(f"duplicate groups extended to the new documents: {d.dedup['groups']:,} groups, "
                     f"{d.dedup['removed']:,} of {d.dedup['documents']:,} documents removed as duplicates")
    elif d.dedup:
        lines.append(f"the duplicate groups predate this run's last change; `clusterclip dedup {run.root}` "
                     "recomputes them (plans with --duplicates need it)")
    return "\n".join(lines)
