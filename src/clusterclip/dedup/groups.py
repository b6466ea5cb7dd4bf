"""Duplicate groups from the stored pairwise work: plain connected components of the duplicate edges.

A document's edges are its semantic edge (to its most similar earlier member of its cluster, when the
cosine is ``>= 1 - eps``) and its lexical edges (candidate pairs whose Jaccard estimate is ``>= jaccard``).
Each component is a group; its kept representative is the longest member (``n_tokens``), ties by lowest
index. Group ids are numbered in the order of their representatives' indices.

Components chain (one wrong edge joins two groups): the stage derives its groups with
:func:`clusterclip.dedup.checked.derive_checked_groups`, which confirms the edges and checks every group; with
``confirm = verify = min_shingles = 0`` it gives these components. :func:`derive_groups` stays as that
reference and for benchmarks of the raw edges.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from clusterclip.dedup.semantic import semantic_edges

SEMANTIC, LEXICAL, BOTH = "semantic", "lexical", "both"


@dataclass(frozen=True)
class DuplicateGroups:
    """``group`` (int64 [N], ids 0..G-1), ``kept`` (int64 [G], ascending representatives) and the detector
    that linked each document (bit 1 semantic, bit 2 lexical; 0 for a document alone)."""

    group: np.ndarray
    kept: np.ndarray
    linked: np.ndarray

    @property
    def removed(self) -> np.ndarray:
        """Documents that are not their group's representative, ascending."""
        return np.flatnonzero(self.kept[self.group] != np.arange(self.group.size))


def derive_groups(neighbour: np.ndarray, similarity: np.ndarray, pairs: np.ndarray, jaccard_est: np.ndarray,
                  tokens: np.ndarray, eps: float, jaccard: float) -> DuplicateGroups:
    """The groups at thresholds ``eps`` (semantic) and ``jaccard`` (lexical; above 1 nothing is lexical)."""
    n = neighbour.size
    sem = semantic_edges(neighbour, similarity, eps)
    lex = pairs[jaccard_est >= np.float32(jaccard)] if jaccard <= 1.0 else np.zeros((0, 2), np.int64)
    edges = np.concatenate([sem, lex]).astype(np.int64)
    graph = coo_matrix((np.ones(len(edges), np.int8), (edges[:, 0], edges[:, 1])), shape=(n, n))
    _, comp = connected_components(graph, directed=False)
    first = np.lexsort((np.arange(n), -tokens.astype(np.int64), comp))
    is_head = np.concatenate(([True], comp[first][1:] != comp[first][:-1]))
    heads = first[is_head]  # one representative per component
    kept = np.sort(heads)
    rep_of_comp = np.empty(int(comp.max()) + 1 if n else 0, np.int64)
    rep_of_comp[comp[heads]] = heads
    group = np.searchsorted(kept, rep_of_comp[comp]).astype(np.int64)
    linked = np.zeros(n, np.int8)
    linked[sem.ravel()] |= 1
    linked[lex.ravel()] |= 2
    return DuplicateGroups(group, kept, linked)


def detector_names(linked: np.ndarray) -> np.ndarray:
    """``semantic``, ``lexical`` or ``both`` for link codes 1, 2, 3 (``""`` for 0)."""
    return np.array(["", SEMANTIC, LEXICAL, BOTH], dtype=object)[linked]

