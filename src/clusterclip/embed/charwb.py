"""The ``charwb`` embedder: character n-grams within white-space separated words, TF-IDF and SVD, encoded as a
sum of per-word vectors (the n-grams of a word are folded into one row once)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from clusterclip.contract.embed import model_dir
from clusterclip.embed.base import EmbedderBase, FittedEmbedder
from clusterclip.embed.block_svd import block_svd
from clusterclip.embed.subword_fast import _merge_counts
from clusterclip.embed.subword_tokens import CodePoints, TokenBatch, inverse, row_norms, scale_rows
from clusterclip.errors import ClusterClipError
from clusterclip.progress import progress_steps

SPLITS = ("chunks", "pieces")
"""What a word is: a white-space separated chunk (scikit-learn's ``char_wb``), or a run of word characters or of
other non-space characters (:meth:`~clusterclip.embed.subword_tokens.CodePoints.pieces`: fewer distinct words)."""
TF_MODES = ("log", "raw")
"""How a word's count ``c`` in a document weighs its n-grams: ``1 + log(c)`` or ``c``."""


class CharWbEmbedder(FittedEmbedder):
    """Character ``ngram_range``-grams of every white-space separated word (lowercase, between begin and end
    marks: scikit-learn's ``char_wb`` analyzer), TF-IDF over the fitted n-grams, a randomized SVD to ``dim``.

    A document's n-gram counts are the sum of its words' n-gram counts, so its TF-IDF row is
    ``x = sum_w tf_w v_w`` with ``v_w[g] = c(w, g) idf(g)``, and its projection is ``sum_w tf_w (V v_w)``: the
    encoder looks up one precomputed ``dim`` vector per word (the ``cache_words`` most frequent words of the fit)
    and hashes only the n-grams of the other words, looking them up among the fitted n-grams (an n-gram the fit
    never saw counts for nothing, as in the vectorizer). ``tf``: ``log`` weighs a word by ``1 + log(count)``
    (scikit-learn's ``sublinear_tf`` applies the log per n-gram, which no per-word fold can), ``raw`` by its
    count (then ``x`` is exactly ``char_wb``'s raw TF-IDF row). :meth:`fit` keeps the n-grams in at least
    ``min_df`` documents of the sample, at most ``max_ngrams`` of them (most frequent; ties by key), with
    scikit-learn's smoothed IDF, and takes the SVD of the L2-normalised rows (``n_iter`` power iterations, seeded,
    signs fixed). N-grams are identified by a 64-bit hash (:meth:`CodePoints.ngram_buckets`, no buckets shared).
    Coverage is the share of a document's n-gram occurrences among the fitted n-grams; the recorded norm divides
    by the TF-IDF row's norm without the cross terms of n-grams that two words of a document share (so it can
    exceed 1 slightly). See ``docs/embedders.md``."""

    name = "charwb"
    SUMMARY = ("character 3-5-grams within words, TF-IDF and SVD, encoded as one looked-up vector per word; "
               "fitted and stored in the run; opt-in")
    MODEL_DIR = model_dir("charwb")
    """The fitted model's folder in the run directory (listed with checksums in the embed record)."""
    MODEL_FILES = ("charwb.json", "words.json", "ngram_keys.npy", "idf.npy", "components.npy")
    """Options, the cached words (the fit's most frequent), each fitted n-gram's 64-bit key, its IDF, and the
    components ``[dim, n-grams]`` (``component_dtype``)."""
    LOAD_OPTIONS = ("dim", "seed", "sample_size", "min_df", "max_ngrams", "tf", "n_iter", "cache_words",
                    "component_dtype", "split")

    def __init__(self, *, dim: int = 256, seed: int = 0, sample_size: int = 6000, min_df: int = 2,  # noqa: PLR0913
                 max_ngrams: int = 131_072, ngram_range: tuple[int, int] = (3, 5), tf: str = "log", n_iter: int = 5,
                 cache_words: int = 32_768, component_dtype: str = "float16", split: str = "chunks",
                 batch_size: int = EmbedderBase.DEFAULT_BATCH_SIZE, progress: bool = True) -> None:
        super().__init__(batch_size, progress)
        if dim < 1 or sample_size < 2 or min_df < 1 or max_ngrams < 1 or n_iter < 0 or cache_words < 0 \
                or not 1 <= ngram_range[0] <= ngram_range[1] or tf not in TF_MODES \
                or component_dtype not in ("float16", "float32") or split not in SPLITS:
            raise ClusterClipError("charwb embedder: dim, min_df, max_ngrams >= 1, sample_size >= 2, n_iter, "
                                   "cache_words >= 0, 1 <= ngram_range[0] <= ngram_range[1], tf log or raw, "
                                   "component_dtype float16 or float32, split chunks or pieces required")
        self.dim, self.seed, self.sample_size = dim, seed, sample_size
        self.min_df, self.max_ngrams, self.ngram_range = min_df, max_ngrams, (int(ngram_range[0]), int(ngram_range[1]))
        self.tf, self.n_iter, self.cache_words, self.component_dtype = tf, n_iter, cache_words, component_dtype
        self.split = split
        self.words: list[str] | None = None
        self.ngram_keys: np.ndarray | None = None
        self.idf: np.ndarray | None = None
        self.components: np.ndarray | None = None
        self._cache: dict[str, Any] = {}

    def config(self) -> dict[str, Any]:
        """Every option of the fit and the transform (the fitted arrays are outputs of the embed stage)."""
        return {"name": self.name, "dim": self.dim, "seed": self.seed, "sample_size": self.sample_size,
                "min_df": self.min_df, "max_ngrams": self.max_ngrams, "ngram_range": list(self.ngram_range),
                "split": self.split, "lowercase": True, "hash": "polynomial mod 2**64, murmur3 fmix64, 64 bits",
                "tf": self.tf, "idf": "smooth", "norm": "l2 (recorded norm: without cross terms)",
                "svd": "randomized block", "n_iter": self.n_iter, "cache_words": self.cache_words,
                "component_dtype": self.component_dtype, "recipe": 1}

    @classmethod
    def _options_of(cls, config: dict[str, Any]) -> dict[str, Any]:
        return {"ngram_range": tuple(config["ngram_range"])}

    @property
    def fitted(self) -> bool:
        return self.components is not None

    def _weigh(self, counts: sp.csr_matrix) -> sp.csr_matrix:
        """A float32 copy of word counts weighed as :data:`TF_MODES` says."""
        x = sp.csr_matrix(counts, dtype=np.float32, copy=True)
        if self.tf == "log":
            np.log(x.data, out=x.data)
            x.data += 1.0
        return x

    def _grams(self, cp: CodePoints, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(word, key)`` of every n-gram occurrence of the words ``cp[starts:ends]`` (64-bit keys as int64)."""
        owner, keys = cp.ngram_buckets(starts, ends, self.ngram_range, 64, self.seed)
        return owner, keys

    def fit(self, texts: Sequence[str]) -> CharWbEmbedder:
        """Learn the n-grams, their IDF and the SVD from ``texts`` (deterministic for a seed); returns self."""
        texts = list(texts)
        self.words, self.ngram_keys, self.idf, self.components, self._cache = None, None, None, None, {}
        with progress_steps(f"fit {self.name}", 2, self.progress) as step:
            step(f"words and n-grams of {len(texts):,} documents")
            counts, _, cp, starts, ends = _merge_counts([_count(texts[i:i + self.batch_size], self.split)
                                                         for i in range(0, len(texts), self.batch_size)], len(texts))
            owner, keys = self._grams(cp, starts, ends)
            gram_keys, col = np.unique(keys, return_inverse=True)
            m = sp.csr_matrix((np.ones(len(owner), dtype=np.float32), (owner, col.ravel())),
                              shape=(len(starts), len(gram_keys)))
            m.sum_duplicates()
            kept, df = self._choose(counts, m)
            self.ngram_keys = gram_keys[kept]
            self.idf = (np.log((1.0 + len(texts)) / (1.0 + df)) + 1.0).astype(np.float32)
            h = sp.csr_matrix(m[:, kept])
            h.data *= self.idf[h.indices]
            s = self._weigh(counts)
            norms = np.concatenate([row_norms(s[i:i + self.batch_size] @ h)
                                    for i in range(0, s.shape[0], self.batch_size)]) if s.shape[0] else np.zeros(0)
            k = min(self.dim, s.shape[0], h.shape[1])
            step(f"SVD of {s.shape[0]:,} x {h.shape[1]:,} n-grams to {k} dimensions")
            vt = block_svd(sp.csr_matrix((s.shape[0], 0), dtype=np.float32), scale_rows(s, inverse(norms)), h, k,
                           self.n_iter, self.seed) if k else np.zeros((0, h.shape[1]), np.float32)
        components = np.zeros((self.dim, h.shape[1]), dtype=np.float32)
        components[:k] = vt
        self.components = components.astype(self.component_dtype)
        self.words = self._frequent_words(counts, cp, starts, ends)
        return self

    def _choose(self, counts: sp.csr_matrix, m: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
        """The kept n-grams (columns of ``m``, in key order) and their document frequency: in at least ``min_df``
        documents (all n-grams when none is), the ``max_ngrams`` most frequent, ties broken by key."""
        n_docs, n_grams = counts.shape[0], m.shape[1]
        df = np.zeros(n_grams, dtype=np.int64)
        for i in range(0, n_docs, self.batch_size):
            df += np.bincount(sp.csr_matrix(counts[i:i + self.batch_size] @ m).indices, minlength=n_grams)
        keep = np.flatnonzero(df >= min(self.min_df, n_docs))
        if len(keep) == 0:
            keep = np.arange(n_grams)
        if len(keep) > self.max_ngrams:
            keep = np.sort(keep[np.argsort(-df[keep], kind="stable")[:self.max_ngrams]])
        return keep, df[keep]

    def _frequent_words(self, counts: sp.csr_matrix, cp: CodePoints, starts: np.ndarray,
                        ends: np.ndarray) -> list[str]:
        """The ``cache_words`` words in most documents of the fit (at least two; ties by key), whose vectors the
        encoder computes once: a cache, the vectors are the same without it."""
        df = np.bincount(counts.indices, minlength=counts.shape[1])
        pick = np.flatnonzero(df >= 2)
        pick = np.sort(pick[np.argsort(-df[pick], kind="stable")[:self.cache_words]])
        return [cp.cps[a:b].tobytes().decode("utf-32-le") for a, b in zip(starts[pick], ends[pick], strict=True)]

    def ngram_rows(self, cp: CodePoints, starts: np.ndarray,
                   ends: np.ndarray) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
        """``[words, n-grams]`` TF-IDF rows of the words ``cp[starts:ends]`` over the fitted n-grams (counts times
        IDF; n-grams the fit lacks left out), and each word's number of n-gram occurrences that are fitted and in
        all (float32)."""
        owner, keys = self._grams(cp, starts, ends)
        col = self._prepared()["gram_index"].lookup(keys)
        hit = col >= 0
        h = sp.csr_matrix((self.idf[col[hit]], (owner[hit], col[hit])),  # type: ignore[index]
                          shape=(len(starts), len(self.ngram_keys)))  # type: ignore[arg-type]
        h.sum_duplicates()
        return (h, np.bincount(owner[hit], minlength=len(starts)).astype(np.float32),
                np.bincount(owner, minlength=len(starts)).astype(np.float32))

    def _prepared(self) -> dict[str, Any]:
        """Arrays derived from the fitted model once per process: the n-gram index, the components ``[n-grams,
        dim]`` and, for the cached words, their index, projections ``V v_w``, squared row norms, and fitted and
        total n-gram occurrences."""
        c = self._cache
        if "gram_t" not in c:
            if not self.fitted:
                raise ClusterClipError("charwb embedder is not fitted: fit() it on a sample of the corpus, or load a "
                                       "run's model with run_embedder()")
            c["gram_index"] = HashIndex(self.ngram_keys)
            c["gram_t"] = np.ascontiguousarray(self.components.T, dtype=np.float32)  # type: ignore[union-attr]
            cp = CodePoints("\n".join(self.words or []))
            starts, ends = cp.pieces() if self.split == "pieces" else cp.runs(chunks=True)
            c["word_index"] = HashIndex(cp.word_keys(starts, ends).astype(np.int64))
            c["word_e"], c["word_n2"], c["word_hit"], c["word_total"] = self._word_vectors(cp, starts, ends)
        return c

    def _word_vectors(self, cp: CodePoints, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, ...]:
        """Projection ``V v_w``, squared TF-IDF norm, fitted and total n-gram occurrences of the words
        ``cp[starts:ends]``."""
        h, hit, total = self.ngram_rows(cp, starts, ends)
        e = np.asarray(h @ self._cache["gram_t"], dtype=np.float32)
        return e, np.square(row_norms(h), dtype=np.float64), hit, total

    def _encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Projections ``sum_w tf_w V v_w`` over the TF-IDF row's norm, and coverage, of one batch: the cached
        words' vectors looked up, the others' computed from their n-grams."""
        c = self._prepared()
        batch = TokenBatch(texts, split=self.split)
        col = c["word_index"].lookup(batch.keys.astype(np.int64))
        known, unseen = np.flatnonzero(col >= 0), np.flatnonzero(col < 0)
        raw_k, raw_u = _columns(batch.counts, known, col[known], len(c["word_e"])), batch.counts[:, unseen]
        s_k, s_u = self._weigh(raw_k), self._weigh(raw_u)
        e_u, n2_u, hit_u, total_u = self._word_vectors(batch.cp, batch.starts[unseen], batch.ends[unseen])
        proj = np.asarray(s_k @ c["word_e"], dtype=np.float32) + np.asarray(s_u @ e_u, dtype=np.float32)
        norm2 = np.asarray(s_k.power(2) @ c["word_n2"] + s_u.power(2) @ n2_u, dtype=np.float64)
        proj *= inverse(np.sqrt(np.maximum(norm2, 0.0)).astype(np.float32))[:, None]
        hits = raw_k @ c["word_hit"] + raw_u @ hit_u
        total = raw_k @ c["word_total"] + raw_u @ total_u
        return proj, np.where(total > 0, hits / np.maximum(total, 1), 0.0).astype(np.float32)

    def _encode_batches(self, texts: list[str]) -> Iterator[tuple[Any, ...]]:
        for start in range(0, len(texts), self.batch_size):
            proj, coverage = self._encode_batch(texts[start:start + self.batch_size])
            yield slice(start, start + len(proj)), proj, coverage

    def adopt(self, fitted: CharWbEmbedder) -> None:
        """Use the fitted model of ``fitted`` (another instance with the same options)."""
        self.words, self.ngram_keys, self.idf = fitted.words, fitted.ngram_keys, fitted.idf
        self.components, self._cache = fitted.components, {}

    def save(self, folder: str | os.PathLike[str]) -> list[Path]:
        """Write the fitted model into ``folder`` (atomic JSON and ``.npy`` files: :attr:`MODEL_FILES`)."""
        return self._write_model(folder, self.words or [], [self.ngram_keys, self.idf, self.components])  # type: ignore

    @classmethod
    def load(cls, folder: str | os.PathLike[str], *, batch_size: int = EmbedderBase.DEFAULT_BATCH_SIZE,
             progress: bool = True) -> CharWbEmbedder:
        """The embedder saved in ``folder``; a missing or inconsistent file is a :class:`ClusterClipError`."""
        emb, words, (keys, idf, comps) = cls._read_model(folder, batch_size, progress)
        if not isinstance(words, list) or keys.dtype != np.int64 or keys.ndim != 1 or idf.shape != keys.shape \
                or comps.shape != (emb.dim, len(keys)) or comps.dtype != np.dtype(emb.component_dtype) \
                or not (np.isfinite(idf).all() and np.isfinite(comps).all()):
            raise cls._mismatch(folder)
        emb.words, emb.ngram_keys = [str(w) for w in words], keys
        emb.idf, emb.components = idf.astype(np.float32), comps
        return emb

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_cache": {}}


class HashIndex:
    """Positions of distinct 64-bit keys (already mixed: every bit uniform) in a fixed array, -1 when absent: an
    open-addressing table (load at most 1/4, linear probing), built and probed a whole array at a time, so a
    lookup costs a few gathers instead of ``searchsorted``'s binary search over a large array."""

    def __init__(self, keys: np.ndarray) -> None:
        self.keys = np.asarray(keys, dtype=np.int64)
        self.mask = (1 << max(4, int(np.ceil(np.log2(max(1, 4 * len(self.keys))))))) - 1
        self.slots = np.full(self.mask + 1, -1, dtype=np.int64)
        pending, slot, self.probes = np.arange(len(self.keys)), self._home(self.keys), 0
        while len(pending):
            free = self.slots[slot] < 0
            won, first = np.unique(slot[free], return_index=True)
            self.slots[won] = pending[free][first]
            placed = np.zeros(len(pending), dtype=bool)
            placed[np.flatnonzero(free)[first]] = True
            pending, slot = pending[~placed], (slot[~placed] + 1) & self.mask
            self.probes += 1

    def _home(self, keys: np.ndarray) -> np.ndarray:
        return keys & self.mask

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """The position of each key in the array, or -1."""
        out = np.full(len(keys), -1, dtype=np.int64)
        active, slot = np.arange(len(keys)), self._home(keys)
        for _ in range(self.probes):
            at = self.slots[slot]
            hit = at >= 0
            hit[hit] = self.keys[at[hit]] == keys[active[hit]]
            out[active[hit]] = at[hit]
            more = (at >= 0) & ~hit
            active, slot = active[more], (slot[more] + 1) & self.mask
            if not len(active):
                break
        return out


def _columns(x: sp.csr_matrix, cols: np.ndarray, to: np.ndarray, width: int) -> sp.csr_matrix:
    """The columns ``cols`` of ``x`` moved to the columns ``to`` of a ``width``-wide matrix."""
    part = sp.csr_matrix(x[:, cols])
    return sp.csr_matrix((part.data, to[part.indices], part.indptr), shape=(x.shape[0], width))


def _count(texts: list[str], split: str) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One batch's words (``split``): counts (documents x words), keys, total counts and the words' code
    points (concatenated) with their lengths, as ``subword-fast``'s merge takes them."""
    batch = TokenBatch(texts, split=split)
    lengths = batch.ends - batch.starts
    at = np.repeat(batch.starts - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))
    return (batch.counts, batch.keys, np.asarray(batch.counts.sum(axis=0), dtype=np.float64).ravel(),
            batch.cp.cps[at], lengths)
