"""Describe clusters for a human: class-based TF-IDF keywords, example snippets, ground-truth counts.

Keywords are c-TF-IDF as in BERTopic: the documents of a cluster are treated as one big document,
term frequencies are normalised per cluster, and each term is weighted by
``log(1 + A / f_t)`` where ``A`` is the mean number of words per cluster and ``f_t`` the frequency of
the term across all clusters. Terms frequent in one cluster and rare elsewhere score highest.

The corpus parquet is streamed in record batches, so memory is bounded by one batch plus the sparse
(cluster, term) counts, never by the corpus: past ``max_terms`` distinct terms the rarest are pruned (lossy
counting; exact below the cap). Only the first ``max_chars`` characters of each document are tokenised: that
bounds the time on corpora of book-length documents and barely changes the top terms of a cluster.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from clusterclip.contract.corpus_texts import open_part
from clusterclip.progress import progress_bar

_WORD = re.compile(r"[^\W\d_]{3,30}")
_SPACE = re.compile(r"\s+")
_KEY_SHIFT = np.int64(32)
_KEY_MASK = np.int64((1 << 32) - 1)
MAX_TERMS = 1 << 22
"""Distinct terms, and (cluster, term) pairs, the keyword counts keep before pruning the rarest (about 0.5 GB
for the terms' dictionary, 64 MB for the pairs)."""


_STOPWORDS_SKLEARN_LACKS = frozenset({
    "aren", "couldn", "didn", "doesn", "don", "hadn", "hasn", "haven", "isn", "shouldn", "wasn", "weren",
    "won", "wouldn", "anybody", "did", "does", "doing", "gets", "got", "having", "just", "let", "like",
    "make", "need", "new", "really", "said", "say", "says", "shall", "theirs", "thing", "things", "use",
    "used", "using",
})
"""Added to scikit-learn's list: contraction stems (the tokenizer splits "don't" into "don") and filler
words of web text. Without them they surfaced as keywords of 15 of 50 minipile clusters."""


def english_stopwords() -> frozenset[str]:
    """scikit-learn's English stop words plus ``_STOPWORDS_SKLEARN_LACKS`` (scikit-learn is imported
    on first use: loading it takes a second)."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return ENGLISH_STOP_WORDS | _STOPWORDS_SKLEARN_LACKS


def tokenize(text: str) -> list[str]:
    """Lower-cased words of 3-30 letters (any script); digits and punctuation split words."""
    return _WORD.findall(text.lower())


def snippet(text: str, limit: int = 200) -> str:
    """``text`` with whitespace collapsed, cut at ``limit`` characters on a word boundary when possible."""
    flat = _SPACE.sub(" ", text).strip()
    if len(flat) <= limit:
        return flat
    cut = flat[:limit]
    space = cut.rfind(" ")
    if space > limit * 0.6:
        cut = cut[:space]
    return cut.rstrip() + "…"


class CTfidf:
    """Streaming accumulator of (cluster, term) counts and the c-TF-IDF keywords derived from them.

    Feed documents with :meth:`add` (any number of calls, any batch size), then call :meth:`top`.
    Stopwords (default: :func:`english_stopwords`) are registered first in the vocabulary so they can
    be dropped by id at the end instead of being tested per token.
    """

    def __init__(
        self,
        n_clusters: int,
        stopwords: Iterable[str] | None = None,
        max_chars: int = 20_000,
        consolidate_every: int = 16,
        max_terms: int = MAX_TERMS,
    ) -> None:
        if n_clusters < 1:
            raise ValueError("n_clusters must be at least 1")
        self.n_clusters = n_clusters
        self.max_chars = max_chars
        self.max_terms = max_terms
        self.pruned = 0
        """Terms and (cluster, term) pairs dropped so far (0: the counts are exact)."""
        self._words = np.zeros(n_clusters, np.int64)
        """Words (stopwords aside) per cluster, kept exact whatever is pruned."""
        self._vocab: dict[str, int] = {}
        for w in english_stopwords() if stopwords is None else stopwords:
            self._vocab.setdefault(w, len(self._vocab))
        self._n_stop = len(self._vocab)
        self._keys: list[np.ndarray] = []
        self._counts: list[np.ndarray] = []
        self._pending = 0
        self._consolidate_every = consolidate_every

    def add(self, texts: Sequence[str | None], clusters: Sequence[int] | np.ndarray) -> None:
        """Count the words of ``texts``, each belonging to the cluster at the same position.

        The texts of one cluster are joined and counted with :class:`collections.Counter` (C code), so
        the vocabulary is looked up once per distinct word and cluster, not once per word.
        """
        clusters = np.asarray(clusters, dtype=np.int64)
        by_cluster: dict[int, list[str]] = {}
        for text, c in zip(texts, clusters.tolist(), strict=True):
            if text:
                by_cluster.setdefault(c, []).append(text[: self.max_chars])
        vocab = self._vocab
        keys: list[np.ndarray] = []
        counts: list[np.ndarray] = []
        for c, docs in by_cluster.items():
            counter = Counter(_WORD.findall(" ".join(docs).lower()))
            if not counter:
                continue
            ids = np.fromiter((vocab.setdefault(w, len(vocab)) for w in counter), dtype=np.int64, count=len(counter))
            keys.append((np.int64(c) << _KEY_SHIFT) | ids)
            counts.append(np.fromiter(counter.values(), dtype=np.int64, count=len(counter)))
            self._words[c] += int(counts[-1][ids >= self._n_stop].sum())
        if not keys:
            return
        self._keys.append(np.concatenate(keys))
        self._counts.append(np.concatenate(counts))
        self._pending += 1
        if self._pending >= self._consolidate_every:
            self._consolidate()

    def _consolidate(self) -> tuple[np.ndarray, np.ndarray]:
        if not self._keys:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        if len(self._keys) > 1:
            keys = np.concatenate(self._keys)
            counts = np.concatenate(self._counts)
            uniq, inv = np.unique(keys, return_inverse=True)
            self._keys = [uniq]
            self._counts = [np.bincount(inv, weights=counts, minlength=len(uniq)).astype(np.int64)]
        self._pending = 0
        if len(self._vocab) > self.max_terms:
            self._prune()
        if len(self._keys[0]) > self.max_terms:
            self._drop_single_pairs()
        return self._keys[0], self._counts[0]

    def _drop_single_pairs(self) -> None:
        """Past ``max_terms`` (cluster, term) pairs, drop those counted once: :meth:`top` ranks them after every
        other term of their cluster, so the keywords change only in clusters with fewer than ``n`` repeated terms."""
        keep = self._counts[0] >= 2
        self.pruned += int((~keep).sum())
        self._keys, self._counts = [self._keys[0][keep]], [self._counts[0][keep]]

    def _prune(self) -> None:
        """Keep the stopwords and the ``max_terms // 2`` most frequent other terms (ties by first seen), renumbered;
        the others' counts are dropped (a term seen again later starts from zero)."""
        keys, counts = self._keys[0], self._counts[0]
        term = keys & _KEY_MASK
        total = np.bincount(term, weights=counts, minlength=len(self._vocab))
        total[: self._n_stop] = np.inf
        keep = np.sort(np.argsort(-total, kind="stable")[: self._n_stop + self.max_terms // 2])
        new_id = np.full(len(self._vocab), -1, np.int64)
        new_id[keep] = np.arange(keep.size)
        words = list(self._vocab)
        self._vocab = {words[i]: j for j, i in enumerate(keep.tolist())}
        alive = new_id[term] >= 0
        self._keys = [(keys[alive] & ~_KEY_MASK) | new_id[term[alive]]]
        self._counts = [counts[alive]]
        self.pruned += len(words) - keep.size

    def top(self, n: int = 8, min_count: int = 2) -> list[list[tuple[str, float]]]:
        """The ``n`` best (term, score) pairs of every cluster, best first.

        Terms seen fewer than ``min_count`` times in a cluster rank after all others (typos and ids
        that occur once would otherwise dominate small clusters), but still fill the list when a
        cluster has few words.
        """
        keys, counts = self._consolidate()
        out: list[list[tuple[str, float]]] = [[] for _ in range(self.n_clusters)]
        keep = (keys & _KEY_MASK) >= self._n_stop
        keys, counts = keys[keep], counts[keep]
        if len(keys) == 0:
            return out
        cl = (keys >> _KEY_SHIFT).astype(np.int64)
        term = (keys & _KEY_MASK).astype(np.int64)
        words_per_cluster = self._words.astype(np.float64)
        term_freq = np.bincount(term, weights=counts)
        mean_words = words_per_cluster[words_per_cluster > 0].mean()
        idf = np.log1p(mean_words / np.maximum(term_freq[term], 1.0))
        score = counts / words_per_cluster[cl] * idf
        rank = np.where(counts >= min_count, score, score * 1e-9)
        order = np.lexsort((-rank, cl))
        starts = np.searchsorted(cl[order], np.arange(self.n_clusters))
        ends = np.searchsorted(cl[order], np.arange(self.n_clusters), side="right")
        words = np.empty(len(self._vocab), dtype=object)
        for w, i in self._vocab.items():
            words[i] = w
        for c in range(self.n_clusters):
            sel = order[starts[c] : min(ends[c], starts[c] + n)]
            out[c] = [(str(words[term[i]]), float(score[i])) for i in sel]
        return out


@dataclass
class CorpusScan:
    """What one streaming pass over the corpus parquet yields for the report."""

    keywords: list[list[tuple[str, float]]]
    examples: dict[int, list[str]]
    groups: list[str] = field(default_factory=list)
    contingency: np.ndarray | None = None
    rows: int = 0


def example_indices(labels: np.ndarray, scores: np.ndarray | None, n_clusters: int, per_cluster: int,
                    chunk: int = 1 << 22) -> dict[int, int]:
    """Map document index -> cluster for the ``per_cluster`` documents closest to each centroid (highest score,
    then lowest index), by cluster. The candidates so far are merged with ``chunk`` documents at a time, so
    memory is one chunk, not a sort of the whole corpus."""
    best = np.zeros(0, np.int64)
    for lo in range(0, len(labels), chunk):
        idx = np.concatenate([best, np.arange(lo, min(lo + chunk, len(labels)), dtype=np.int64)])
        lab = np.asarray(labels[idx], dtype=np.int64)
        ok = (lab >= 0) & (lab < n_clusters)
        idx, lab = idx[ok], lab[ok]
        key = -np.asarray(scores[idx], dtype=np.float64) if scores is not None else np.zeros(idx.size)
        order = np.lexsort((idx, key, lab))
        idx, lab = idx[order], lab[order]
        rank = np.arange(lab.size) - np.searchsorted(lab, lab)
        best = idx[rank < per_cluster]
    return dict(zip(best.tolist(), np.asarray(labels[best], dtype=np.int64).tolist(), strict=True))


def _batches(parts: Sequence[Path], columns: list[str], batch_size: int) -> Iterator[dict[str, list]]:
    for part in parts:
        pf = open_part(part)
        cols = [c for c in columns if c in pf.schema_arrow.names]
        for batch in pf.iter_batches(batch_size=batch_size, columns=cols):
            yield {name: batch.column(name).to_pylist() for name in cols}


def scan_corpus(
    parts: Sequence[Path],
    labels: np.ndarray,
    n_clusters: int,
    scores: np.ndarray | None = None,
    n_keywords: int = 8,
    n_examples: int = 3,
    batch_size: int = 4096,
    progress: bool = True,
) -> CorpusScan:
    """One pass over the corpus parts: keywords, example snippets and the cluster x group table.

    Rows are matched to clusters by their ``index`` column (row order when it is absent); rows whose
    index has no label are ignored. The contingency table is None when no row has a group.
    """
    labels = np.asarray(labels)
    wanted = example_indices(labels, scores, n_clusters, n_examples)
    wanted_index = np.fromiter(wanted, np.int64, len(wanted))
    examples: dict[int, list[tuple[float, str]]] = {}
    ctf = CTfidf(n_clusters)
    group_ids: dict[str, int] = {}
    table = np.zeros((n_clusters, 0), np.int64)
    bar = progress_bar("report: keywords", "doc", _count_rows(parts), progress, leave=False)
    rows = 0
    for batch in _batches(parts, ["index", "text", "group"], batch_size):
        texts = batch.get("text") or []
        idx = np.asarray(batch["index"], dtype=np.int64) if "index" in batch else np.arange(rows, rows + len(texts))
        cl = _clusters_of(idx, labels)
        valid = np.flatnonzero(cl >= 0)
        ctf.add([texts[j] for j in valid], cl[valid])
        for j in valid[np.isin(idx[valid], wanted_index)].tolist():  # the few example rows, not every row
            i = int(idx[j])
            if texts[j]:
                s = float(scores[i]) if scores is not None else 0.0
                examples.setdefault(wanted[i], []).append((s, snippet(texts[j])))
        if batch.get("group") is not None:
            table = _count_groups(table, _group_pairs(batch["group"], cl, group_ids), len(group_ids))
        rows += len(texts)
        bar.update(len(texts))
    bar.close()
    return CorpusScan(
        keywords=ctf.top(n_keywords),
        examples={c: [t for _, t in sorted(v, key=lambda p: -p[0])] for c, v in examples.items()},
        groups=list(group_ids),
        contingency=table if table.size and table.any() else None,
        rows=rows,
    )


def _clusters_of(idx: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The cluster of each document index; -1 where the index has no label."""
    ok = (idx >= 0) & (idx < len(labels))
    cl = np.full(len(idx), -1, dtype=np.int64)
    cl[ok] = labels[idx[ok]]
    return cl


def _group_pairs(groups: list[str | None], cl: np.ndarray, group_ids: dict[str, int]) -> np.ndarray:
    """(cluster, group id) of the labelled rows that have a group, as a [2, n] array; new groups get ids."""
    g = np.array([group_ids.setdefault(v, len(group_ids)) if v is not None else -1 for v in groups], dtype=np.int64)
    m = (cl >= 0) & (g >= 0)
    return np.stack([cl[m], g[m]])


def _count_groups(table: np.ndarray, pairs: np.ndarray, n_groups: int) -> np.ndarray:
    """``table`` (documents per cluster and group) with one batch's (cluster, group) ``pairs`` added, widened to
    ``n_groups`` columns: O(K x groups) memory, not a pair per document."""
    if table.shape[1] < n_groups:
        table = np.pad(table, ((0, 0), (0, n_groups - table.shape[1])))
    np.add.at(table, (pairs[0], pairs[1]), 1)
    return table


def _count_rows(parts: Sequence[Path]) -> int:
    return sum(pq.ParquetFile(p).metadata.num_rows for p in parts)
