"""SemDeDup inside the clusters: each document's most similar earlier member of its cluster, in blocks.

Within a cluster the members are ordered by the kept rule (longest first, ties by lowest index). For each
member we store the cosine to its most similar *earlier* member and that member (the pairwise work); a
document is a duplicate for threshold ``eps`` when that cosine is ``>= 1 - eps`` (SemDeDup's rule), so
the groups of any ``eps`` follow from two arrays without another matrix product. A cluster is processed
in blocks of ``block`` rows against blocks of earlier rows, so memory is ``O(block * (dim + block))``
however large the cluster; clusters up to ``cache_rows`` rows are read once and kept in memory.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

BLOCK = 4096
CACHE_ROWS = 131_072
NONE_SIMILARITY = np.float32(-2.0)

Fetch = Callable[[np.ndarray], np.ndarray]
"""Float32 unit rows of the given document indices (in that order)."""


def kept_order(labels: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """All documents sorted by cluster, then longest first, then lowest index (the kept rule)."""
    return np.lexsort((np.arange(labels.size), -tokens.astype(np.int64), labels))


Runner = Callable[[list[np.ndarray]], list[tuple[np.ndarray, np.ndarray]]]
"""Runs :func:`cluster_neighbours` for each cluster's members (in kept order): here, or as Ray tasks."""


def earlier_neighbours(labels: np.ndarray, tokens: np.ndarray, fetch: Fetch, block: int = BLOCK,
                       cache_rows: int = CACHE_ROWS, runner: Runner | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per document: its earlier (kept-rule order) same-cluster member of highest cosine (-1: none) and that
    cosine (``NONE_SIMILARITY``: none). ``fetch`` reads embedding rows; ``runner`` runs the clusters
    elsewhere (the Ray engine)."""
    n = labels.size
    neighbour = np.full(n, -1, np.int64)
    similarity = np.full(n, NONE_SIMILARITY, np.float32)
    clusters = [m for m in _by_cluster(labels, kept_order(labels, tokens)) if m.size >= 2]
    if runner is None:
        results = [members_neighbours(members, fetch, block, cache_rows) for members in clusters]
    else:
        results = runner(clusters)
    for members, (sim, arg) in zip(clusters, results, strict=True):
        similarity[members] = sim
        neighbour[members] = _documents(members, arg)
    return neighbour, similarity


def _by_cluster(labels: np.ndarray, order: np.ndarray) -> list[np.ndarray]:
    """The members of each cluster, in the order of ``order`` (documents sorted by cluster first)."""
    bounds = np.flatnonzero(np.diff(labels[order], prepend=-1, append=-1))
    return [order[lo:hi] for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)]


def _documents(members: np.ndarray, arg: np.ndarray) -> np.ndarray:
    """The document at each position ``arg`` of ``members`` (-1 stays -1: no neighbour)."""
    return np.where(arg >= 0, members[np.maximum(arg, 0)], -1)


def members_neighbours(members: np.ndarray, fetch: Fetch, block: int = BLOCK,
                       cache_rows: int = CACHE_ROWS) -> tuple[np.ndarray, np.ndarray]:
    """:func:`cluster_neighbours` of one cluster's members (document indices in kept order)."""
    return cluster_neighbours(members.size, _rows(members, fetch, cache_rows), block)


def _rows(members: np.ndarray, fetch: Fetch, cache_rows: int) -> Callable[[int, int], np.ndarray]:
    """Rows ``a..b`` of one cluster: from memory when it has at most ``cache_rows`` members, else read."""
    if members.size <= cache_rows:
        cached = fetch(members)
        return lambda a, b: cached[a:b]
    return lambda a, b: fetch(members[a:b])


def cluster_neighbours(n: int, rows: Callable[[int, int], np.ndarray], block: int,
                       start: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """For positions ``start..n-1`` of one ordered cluster (``start`` > 0: the members ``clusterclip add``
    appended): the max cosine to an earlier position and its argmax, arrays of ``n - start``."""
    best = np.full(n - start, NONE_SIMILARITY, np.float32)
    arg = np.full(n - start, -1, np.int64)
    for qa in range(start, n, block):
        qb = min(n, qa + block)
        q, out = rows(qa, qb), slice(qa - start, qb - start)
        for ka in range(0, qb, block):
            kb = min(qb, ka + block)
            s = q @ (q if (ka, kb) == (qa, qb) else rows(ka, kb)).T
            if kb > qa:  # only strictly earlier positions
                s[np.arange(ka, kb)[None, :] >= np.arange(qa, qb)[:, None]] = NONE_SIMILARITY
            j = np.argmax(s, axis=1)
            m = s[np.arange(qb - qa), j]
            better = m > best[out]
            best[out] = np.where(better, m, best[out])
            arg[out] = np.where(better & (m > NONE_SIMILARITY), j + ka, arg[out])
    return best, arg


def appended_neighbours(labels: np.ndarray, first: int, fetch: Fetch, block: int = BLOCK,
                        cache_rows: int = CACHE_ROWS) -> tuple[np.ndarray, np.ndarray]:
    """:func:`earlier_neighbours` of the documents ``first..N-1`` appended by ``clusterclip add``: each one's
    most similar member of its cluster among the older documents and the appended ones before it (index
    order); arrays of ``N - first``. The older documents' own neighbours stay as they were."""
    n = labels.size
    neighbour = np.full(n - first, -1, np.int64)
    similarity = np.full(n - first, NONE_SIMILARITY, np.float32)
    for members in _by_cluster(labels, np.argsort(labels, kind="stable")):
        start = int(np.searchsorted(members, first))
        if start == members.size:
            continue
        sim, arg = cluster_neighbours(members.size, _rows(members, fetch, cache_rows), block, start)
        new = members[start:] - first
        similarity[new] = sim
        neighbour[new] = _documents(members, arg)
    return neighbour, similarity


def semantic_edges(neighbour: np.ndarray, similarity: np.ndarray, eps: float) -> np.ndarray:
    """Edges ``(document, earlier neighbour)`` [E, 2] of the documents that are duplicates at ``eps``."""
    dup = np.flatnonzero((similarity >= np.float32(1.0 - eps)) & (neighbour >= 0))
    return np.stack([dup, neighbour[dup]], axis=1).astype(np.int64)


def has_near_copy(queries: np.ndarray, reference: np.ndarray, eps: float, block: int = BLOCK) -> np.ndarray:
    """bool [len(queries)]: whether a unit row of ``queries`` has a row of ``reference`` with cosine
    ``>= 1 - eps`` (SemDeDup's rule across two sets, e.g. held-out documents against the training split)."""
    q, ref = np.asarray(queries, np.float32), np.asarray(reference, np.float32)
    out = np.zeros(q.shape[0], bool)
    if not ref.shape[0]:
        return out
    for a in range(0, q.shape[0], block):
        best = np.full(min(block, q.shape[0] - a), NONE_SIMILARITY, np.float32)
        for b in range(0, ref.shape[0], block):
            np.maximum(best, (q[a:a + block] @ ref[b:b + block].T).max(axis=1), out=best)
        out[a:a + block] = best >= np.float32(1.0 - eps)
    return out
