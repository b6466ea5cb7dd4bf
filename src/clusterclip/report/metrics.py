"""Small numeric summaries used by the report: agreement with ground truth, concentration, diversity.

Pure numpy so the report needs no scikit-learn; ``nmi`` matches
``sklearn.metrics.normalized_mutual_info_score`` (arithmetic normalisation), checked in the tests.
"""

from __future__ import annotations

import numpy as np


def contingency_table(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Counts of each (label in ``a``, label in ``b``) pair; labels may be any hashable values."""
    _, ai = np.unique(np.asarray(a), return_inverse=True)
    _, bi = np.unique(np.asarray(b), return_inverse=True)
    table = np.zeros((ai.max(initial=-1) + 1, bi.max(initial=-1) + 1), dtype=np.int64)
    np.add.at(table, (ai.ravel(), bi.ravel()), 1)
    return table


def _entropy(counts: np.ndarray) -> float:
    counts = counts[counts > 0].astype(np.float64)
    if counts.size == 0:
        return 0.0
    p = counts / counts.sum()
    return float(-(p * np.log(p)).sum())


def nmi_from_table(table: np.ndarray) -> float:
    """Normalised mutual information of a contingency table, normalised by the mean of the entropies.

    Two labelings that are both a single class agree perfectly (1.0), as in scikit-learn.
    """
    t = np.asarray(table, dtype=np.float64)
    t = t[t.sum(axis=1) > 0][:, t.sum(axis=0) > 0]
    n = t.sum()
    if n == 0:
        return 0.0
    if t.shape[0] == 1 and t.shape[1] == 1:
        return 1.0
    rows, cols = t.sum(axis=1), t.sum(axis=0)
    nz = t > 0
    mi = float((t[nz] / n * (np.log(t[nz] * n) - np.log(np.outer(rows, cols)[nz]))).sum())
    h = (_entropy(rows) + _entropy(cols)) / 2
    if h <= 0:
        return 1.0 if mi <= 0 else 0.0
    return float(max(0.0, min(1.0, mi / h)))


def nmi(labels_true: np.ndarray, labels_pred: np.ndarray) -> float:
    """Normalised mutual information between two labelings of the same items."""
    return nmi_from_table(contingency_table(labels_true, labels_pred))


def purity_from_table(table: np.ndarray) -> float:
    """Share of items whose cluster's majority class is their own class (rows are clusters)."""
    t = np.asarray(table)
    n = t.sum()
    return float(t.max(axis=1).sum() / n) if n else 0.0


def purity(labels_true: np.ndarray, labels_pred: np.ndarray) -> float:
    """Purity of the clusters ``labels_pred`` with respect to the classes ``labels_true``."""
    return purity_from_table(contingency_table(labels_pred, labels_true))


def effective_number(counts: np.ndarray, axis: int = -1) -> np.ndarray:
    """exp(Shannon entropy) of the shares along ``axis``: how many equally likely categories it is worth.

    Rows with no counts give 0.
    """
    c = np.asarray(counts, dtype=np.float64)
    total = c.sum(axis=axis, keepdims=True)
    p = np.divide(c, total, out=np.zeros_like(c), where=total > 0)
    logp = np.log(p, out=np.zeros_like(p), where=p > 0)
    h = -(p * logp).sum(axis=axis)
    return np.where(np.squeeze(total, axis=axis) > 0, np.exp(h), 0.0)


def top_share(sizes: np.ndarray, fraction: float) -> tuple[int, float]:
    """(number of clusters in the largest ``fraction`` of clusters (at least 1), their share of items)."""
    s = np.sort(np.asarray(sizes, dtype=np.float64))[::-1]
    if s.size == 0 or s.sum() == 0:
        return 0, 0.0
    k = max(1, int(np.ceil(fraction * s.size)))
    return k, float(s[:k].sum() / s.sum())
