"""Duplicate groups that do not chain: edges confirmed by a second signal, and groups checked as stars.

The connected components of every duplicate edge (:func:`clusterclip.dedup.groups.derive_groups`) chain: one
wrong edge joins two groups, and documents the embedder barely saw (ASCII art, text in a language its fitted
vocabulary or SVD barely covers) get near-identical vectors, so their semantic edges join hundreds of
unrelated documents; documents with almost no words (drawings, number tables) share the same few word
shingles, so even their lexical edges (Jaccard 1.0) join unrelated ones. :func:`derive_checked_groups` reads
the same stored pairwise work plus three arrays of the texts (:class:`PairwiseWork`) and:

1. **confirms semantic edges**: a semantic edge counts only when the pair's *word-set* MinHash Jaccard
   estimate (signatures of each document's set of words) is ``>= confirm``. Word sets do not move when words
   are reordered, swapped or re-spaced, so edited copies stay confirmed; unrelated texts share few words
   (measured on a mixed corpus: true semantic edges have word-set Jaccard >= 0.6 in 99.8 % of cases, false
   ones < 0.6 in 85 %);
2. **guards low-information documents**: a document with fewer than ``min_shingles`` distinct word shingles
   (its signatures say little) is a duplicate only of a document with the same normalised text (``text_key``),
   for semantic and lexical edges alike;
3. **checks each group as a star**: every member must have word-set Jaccard ``>= max(verify, confirm)`` to
   its group's kept document (the kept rule: most tokens, then lowest index) and pass the guard with it.
   Members that fail leave the group and form components again among themselves (over the accepted edges
   between two of them), each with its own kept document, checked the same way, for at most ``MAX_ROUNDS``
   rounds (each round settles every remaining component's kept document, so rounds are few: 3 on the
   benchmark corpora; what is left after that stays alone).

So every removed document is near the document that replaces it (word-set Jaccard ``>= confirm``), ``drop``
never removes a document whose only link is an unconfirmed one, and a chain A~B~C whose ends differ is cut
where it drifts. ``confirm = verify = min_shingles = 0`` gives the plain components back. Cost: O(E) signature
comparisons for the edges and O(N) per round (0.02-0.05 s at 28,000 documents).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from clusterclip.dedup.config import DedupConfig
from clusterclip.dedup.lexical import short_pair_jaccard, signature_jaccard
from clusterclip.dedup.semantic import semantic_edges

SEMANTIC_BIT, LEXICAL_BIT = 1, 2
MAX_ROUNDS = 64
Cosine = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""float32 cosines of the document pairs ``(a[i], b[i])`` (from the stored embeddings)."""


@dataclass(frozen=True)
class PairwiseWork:
    """The stored work groups are derived from (``dedup/*.npy``; see :mod:`clusterclip.contract.dedup`): the
    semantic ``neighbour`` and ``similarity`` of each document, the lexical candidate ``pairs`` [P, 2] and their
    shingle Jaccard estimates (``pair_jaccard``), the token counts (``tokens``: the kept rule), and per document
    its ``word_signatures``, its distinct ``shingle_count`` and its normalised ``text_key``."""

    neighbour: np.ndarray
    similarity: np.ndarray
    pairs: np.ndarray
    pair_jaccard: np.ndarray
    tokens: np.ndarray
    word_signatures: np.ndarray
    shingle_count: np.ndarray
    text_key: np.ndarray
    signatures: np.ndarray | None = None
    """The shingle signatures (uint32 [N, num_perm]), for ``shingle_confirm``; without them that check is off."""
    byte_signatures: np.ndarray | None = None
    """The short documents' byte-shingle signatures (rows ``byte_rows``, int64 [N], -1: not short). A pair of
    two short documents is measured on them, for the shingle check and for the word-set bars alike: a short
    document's word set is too small to tell a copy (one word changed in a three-word message is Jaccard 0.5; a
    message in a script without spaces is one "word"), and its byte shingles already allow for re-spacing."""
    byte_rows: np.ndarray | None = None

    def near(self, a: np.ndarray, b: np.ndarray, word_bar: float, shingle_bar: float) -> np.ndarray:
        """Pairs whose word-set Jaccard estimate is ``>= word_bar`` and, with :attr:`signatures`, whose shingle
        Jaccard estimate is ``>= shingle_bar`` (a bar of 0 is no check; two short documents: both on bytes)."""
        ok = np.ones(a.size, bool)
        if word_bar > 0:
            ok &= self.word_jaccard(a, b) >= np.float32(word_bar)
        if shingle_bar > 0 and self.signatures is not None:
            ok[ok] = self._short_or(self.signatures, a[ok], b[ok]) >= np.float32(shingle_bar)
        return ok

    def word_jaccard(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Word-set Jaccard estimates of the pairs (byte-shingle ones for two short documents)."""
        return self._short_or(self.word_signatures, a, b)

    def _short_or(self, sig: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if self.byte_rows is None or self.byte_signatures is None:
            return signature_jaccard(sig, a, b)
        return short_pair_jaccard(sig, self.byte_signatures, self.byte_rows, a, b)

    def informative(self, a: np.ndarray, b: np.ndarray, min_shingles: int) -> np.ndarray:
        """Pairs a Jaccard estimate can speak for: both documents have ``min_shingles`` distinct shingles or
        more, or their normalised texts are equal."""
        if min_shingles <= 0:
            return np.ones(a.size, bool)
        low = self.shingle_count < min_shingles
        return ~(low[a] | low[b]) | (self.text_key[a] == self.text_key[b])


@dataclass(frozen=True)
class GroupSample:
    """One group for a printout: its size, its kept document and the member least like it (lowest word-set
    Jaccard estimate to the kept one) with that Jaccard and cosine, and the members' mean cosine to it."""

    group: int
    size: int
    kept: int
    member: int
    jaccard: float
    cosine: float
    mean_cosine: float


@dataclass(frozen=True)
class CheckedGroups:
    """``group`` (int64 [N], ids 0..G-1 in the order of their kept documents), ``kept`` (int64 [G], ascending),
    ``linked`` (int8 [N]: bit 1 an accepted semantic edge, bit 2 an accepted lexical edge touches the document),
    ``jaccard_to_kept`` / ``cosine_to_kept`` (float32 [N]: of each document to its kept one, 1 for kept
    documents; cosine NaN without a cosine function), per group ``size``, ``min_jaccard`` and ``mean_cosine``
    (of the members to the kept one; 1 for a single document), and counts: semantic edges at ``eps`` and those
    accepted, lexical edges at ``jaccard`` and those accepted, members the first star check split off
    (``split``) and the star check's ``rounds``."""

    group: np.ndarray
    kept: np.ndarray
    linked: np.ndarray
    jaccard_to_kept: np.ndarray
    cosine_to_kept: np.ndarray
    size: np.ndarray
    min_jaccard: np.ndarray
    mean_cosine: np.ndarray
    semantic_edges: int
    semantic_accepted: int
    lexical_edges: int
    lexical_accepted: int
    split: int
    rounds: int

    @property
    def removed(self) -> np.ndarray:
        """Documents that are not their group's kept document, ascending."""
        return np.flatnonzero(self.kept[self.group] != np.arange(self.group.size))

    def largest(self, k: int = 3) -> list[GroupSample]:
        """The ``k`` largest groups of two or more (largest first, ties by lowest id), each with its least
        similar member: a sample pair that shows a bad merge at a glance."""
        out = []
        for g in np.argsort(-self.size, kind="stable")[:k].tolist():
            if self.size[g] < 2:
                break
            members = np.flatnonzero(self.group == g)
            members = members[members != self.kept[g]]
            worst = int(members[np.argmin(self.jaccard_to_kept[members])])
            out.append(GroupSample(g, int(self.size[g]), int(self.kept[g]), worst,
                                   float(self.jaccard_to_kept[worst]), float(self.cosine_to_kept[worst]),
                                   float(self.mean_cosine[g])))
        return out


def _components(n: int, edges: np.ndarray, nodes: np.ndarray | None = None) -> np.ndarray:
    """Component label per document (of the graph restricted to ``nodes`` when given; others get -1)."""
    graph = coo_matrix((np.ones(len(edges), np.int8), (edges[:, 0], edges[:, 1])), shape=(n, n))
    comp = connected_components(graph, directed=False)[1].astype(np.int64)
    if nodes is None:
        return comp
    out = np.full(n, -1, np.int64)
    out[nodes] = comp[nodes]
    return out


def _heads(label: np.ndarray, idx: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """For each document ``idx[i]`` (not empty): the kept document of its label among ``idx`` (most tokens,
    then lowest index: the kept rule)."""
    lab = label[idx]
    order = np.lexsort((idx, -tokens[idx].astype(np.int64), lab))
    first = np.concatenate(([True], lab[order][1:] != lab[order][:-1]))
    head_pos = np.maximum.accumulate(np.where(first, np.arange(order.size), 0))
    out = np.empty(idx.size, np.int64)
    out[order] = idx[order[head_pos]]
    return out


def _accepted_edges(work: PairwiseWork, config: DedupConfig) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """The edges that count (semantic ones confirmed, both kinds past the guard), the ``linked`` bits and the
    counts ``(semantic, semantic accepted, lexical, lexical accepted)``."""
    sem = semantic_edges(work.neighbour, work.similarity, config.eps)
    keep_sem = work.informative(sem[:, 0], sem[:, 1], config.min_shingles)
    keep_sem &= work.near(sem[:, 0], sem[:, 1], config.confirm, config.shingle_confirm)
    lex = work.pairs[work.pair_jaccard >= np.float32(config.jaccard)] if config.jaccard <= 1.0 else work.pairs[:0]
    lex = lex.astype(np.int64).reshape(-1, 2)
    keep_lex = work.informative(lex[:, 0], lex[:, 1], config.min_shingles)
    linked = np.zeros(work.neighbour.size, np.int8)
    linked[sem[keep_sem].ravel()] |= SEMANTIC_BIT
    linked[lex[keep_lex].ravel()] |= LEXICAL_BIT
    counts = (len(sem), int(keep_sem.sum()), len(lex), int(keep_lex.sum()))
    return np.concatenate([sem[keep_sem], lex[keep_lex]]), linked, counts


def _star_check(work: PairwiseWork, edges: np.ndarray, config: DedupConfig,
                max_rounds: int) -> tuple[np.ndarray, int, int]:
    """Each document's kept document: the components of ``edges``, every member checked against its
    component's kept document (word-set Jaccard ``>= max(verify, confirm)`` and the guard); the members that
    fail form components again among themselves, round after round. Returns ``head_of``, the members the first
    round split off, and the rounds."""
    n = work.tokens.size
    bar = np.float32(max(config.verify, config.confirm))
    label = _components(n, edges)
    head_of = np.arange(n, dtype=np.int64)
    active = np.ones(n, bool)
    rounds = split = 0
    while active.any() and rounds < max_rounds:
        rounds += 1
        idx = np.flatnonzero(active)
        heads = _heads(label, idx, work.tokens)
        near = heads == idx
        check = np.flatnonzero(~near)
        a, h = idx[check], heads[check]
        near[check] = work.informative(a, h, config.min_shingles) & work.near(a, h, bar, config.shingle_confirm)
        head_of[idx[near]] = heads[near]
        active[idx[near]] = False
        split = int((~near).sum()) if rounds == 1 else split
        if not active.any():
            break
        # the rest: components again, over the edges between two unsettled members of one old component
        e = edges[active[edges[:, 0]] & active[edges[:, 1]] & (label[edges[:, 0]] == label[edges[:, 1]])]
        label = _components(n, e, np.flatnonzero(active))
    return head_of, split, rounds  # members left after max_rounds stay their own kept document


def derive_checked_groups(work: PairwiseWork, config: DedupConfig, cosine: Cosine | None = None,
                          max_rounds: int = MAX_ROUNDS) -> CheckedGroups:
    """The groups at ``config.eps`` / ``config.jaccard`` whose semantic edges are confirmed (``confirm``), whose
    low-information documents join only equal texts (``min_shingles``) and whose members are all near their
    kept document (``verify``): see the module doc. ``cosine`` only fills the diagnostics (``cosine_to_kept``,
    ``mean_cosine``)."""
    n = work.neighbour.size
    edges, linked, counts = _accepted_edges(work, config)
    head_of, split, rounds = _star_check(work, edges, config, max_rounds)
    kept = np.unique(head_of)
    group = np.searchsorted(kept, head_of).astype(np.int64)
    others = np.flatnonzero(head_of != np.arange(n))
    jk = np.ones(n, np.float32)
    jk[others] = work.word_jaccard(others, head_of[others])
    g = kept.size
    size = np.bincount(group, minlength=g).astype(np.int64)
    min_j = np.ones(g, np.float32)
    np.minimum.at(min_j, group[others], jk[others])
    ck = np.full(n, np.nan, np.float32)
    mean_c = np.full(g, np.nan, np.float32)
    if cosine is not None:
        ck[kept] = 1.0
        ck[others] = cosine(others, head_of[others]) if others.size else ck[others]
        mean_c = (np.bincount(group[others], ck[others], minlength=g) / np.maximum(size - 1, 1)).astype(np.float32)
        mean_c[size == 1] = 1.0
    return CheckedGroups(group, kept, linked, jk, ck, size, min_j, mean_c, *counts, split, rounds)
