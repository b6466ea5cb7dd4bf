"""The drift report of an add: how many new documents are far from every centroid, and how each cluster grew."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.store import RunDir
from clusterclip.store import layout as A
from clusterclip.store.npy_rows import npy_rows

DRIFT_PERCENTILE = 5.0
Coverage = tuple[Callable[[], Iterator[np.ndarray]], np.ndarray]
"""The old documents' coverage (a function yielding its blocks, for two streamed passes) and the new ones'."""


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


def drift_report(old_scores: Path, old_labels: Path, n_old: int, new_scores: np.ndarray, new_labels: np.ndarray,
                 old_sizes: np.ndarray, threshold: float, coverage: Coverage | None = None) -> dict[str, Any]:
    """The drift statistics of an add: the share of new documents that are *new*, and the growth of every
    cluster. A new document is new when its best cosine to any centroid is below the 5th percentile of the
    existing documents' cosines to their centroid without them (:func:`leave_one_out`, from ``scores.npy`` and
    ``labels.npy``), or, with ``coverage`` (the old documents' confidence shards and the new documents'
    coverage), when the embedder represented less of it than of all but 5 % of the existing documents: an
    embedder fitted to the run's vocabulary drops the words it never saw, so a new topic can look familiar by
    cosine while most of its text went unseen."""
    reference = leave_one_out(old_scores, old_labels, n_old, len(old_sizes))
    cut = streamed_percentile(reference, n_old, DRIFT_PERCENTILE)
    far = new_scores < cut
    report: dict[str, Any] = {"similarity_cut": round(cut, 6), "below_cut": int(np.count_nonzero(far))}
    unseen = np.zeros_like(far)
    if coverage is not None:
        old, new = coverage
        coverage_cut = streamed_percentile(old, n_old, DRIFT_PERCENTILE)
        unseen = np.asarray(new) < coverage_cut
        report.update(coverage_cut=round(coverage_cut, 6), below_coverage_cut=int(np.count_nonzero(unseen)))
    share = int(np.count_nonzero(far | unseen)) / max(1, len(new_scores))
    added = np.bincount(new_labels, minlength=len(old_sizes)).astype(np.int64)
    growth = added / np.maximum(old_sizes, 1)
    return {
        "documents_before": int(n_old), "documents_added": len(new_scores),
        "percentile": DRIFT_PERCENTILE, "reference": "leave-one-out", **report,
        "drift_share": round(share, 6), "drift_threshold": threshold, "recommend_refit": share > threshold,
        "cluster_before": old_sizes.astype(int).tolist(), "cluster_added": added.tolist(),
        "cluster_growth": [round(float(g), 6) for g in growth],
    }



def format_drift(report: dict[str, Any], run: RunDir) -> str:
    """The drift report as ``clusterclip add`` prints it."""
    if report.get("already_added"):
        return (f"{', '.join(report['inputs'])}: already added to {run.root}; nothing to do "
                f"(the latest add's drift report is {run.path(A.DRIFT_REPORT)})")
    growth = np.asarray(report["cluster_growth"])
    top = np.argsort(-growth, kind="stable")[:5]
    lines = [
        f"added {report['documents_added']:,} documents to {report['documents_before']:,} in {run.root}",
        f"drift: {report['drift_share']:.1%} of the new documents are new: less similar to every centroid than "
        f"the 5th percentile of the existing ones (cosine {report['similarity_cut']:.4f}: "
        f"{report['below_cut']:,} documents)" + (
            f" or less seen by the embedder than the 5th percentile of the existing ones (coverage "
            f"{report['coverage_cut']:.2f}: {report['below_coverage_cut']:,})" if "coverage_cut" in report else "")
        + f"; threshold {report['drift_threshold']:.0%}",
        "fastest-growing clusters: " + ", ".join(
            f"{c} (+{report['cluster_added'][c]} on {report['cluster_before'][c]}, {growth[c]:.0%})" for c in top),
    ]
    if report.get("duplicates_skipped"):
        lines.insert(1, f"skipped {report['duplicates_skipped']:,} documents whose text is already in the run "
                        "(add --allow-duplicates to append them)")
    if report["recommend_refit"]:
        lines.append(f"recommendation: re-cluster with `clusterclip cluster {run.root} --refit` (it refuses while "
                     "plans exist unless --force: continue a running plan with `plan --continue` after it)")
    else:
        lines.append("the existing clusters still fit the new documents; no re-clustering needed")
    dedup = report.get("dedup")
    if dedup and dedup["extended"]:
        lines.append(f"duplicate groups extended to the new documents: {dedup['groups']:,} groups, "
                     f"{dedup['removed']:,} of {dedup['documents']:,} documents removed as duplicates")
    elif dedup:
        lines.append(f"the duplicate groups predate this run's last change; `clusterclip dedup {run.root}` "
                     "recomputes them (plans with --duplicates need it)")
    return "\n".join(lines)
