"""The ``subword-fast`` embedder: ``subword``'s model, fitted from vectorised token counts and a cheaper SVD."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from clusterclip.contract.embed import model_dir
from clusterclip.embed.base import EmbedderBase
from clusterclip.embed.subword import SubwordEmbedder, _coverage
from clusterclip.embed.subword_tokens import CodePoints, TokenBatch, inverse, row_norms, scale_rows, sublinear
from clusterclip.errors import ClusterClipError
from clusterclip.progress import progress_steps


class FastSubwordEmbedder(SubwordEmbedder):
    """``subword`` (``lsa``'s words plus hashed character n-grams of every word, one SVD, the same encoding)
    with a fit that costs about what ``lsa``'s does.

    :meth:`fit` tokenizes the sample once, vectorised (:class:`~clusterclip.embed.subword_tokens.TokenBatch`,
    no Python per token), and takes from those counts what ``subword`` asks scikit-learn's vectorizer for: the
    vocabulary (words of 2+ word characters, English stop words out, in at least ``min_df`` and at most
    ``max_df`` of the documents, the ``max_features`` most frequent, ties broken by the words' hash keys) and its
    smoothed IDF. Every distinct word is hashed into n-grams once. The SVD is ``subword``'s randomized block SVD
    with ``n_iter`` power iterations (default 2) on a seeded sample of at most ``svd_docs`` of the documents, its
    range finder on the n-gram buckets folded into ``2**range_bits`` (a count sketch). The n-gram block of the
    fit has the words in at least ``ngram_min_df`` of the sample's documents (a word seen once adds an n-gram row
    that moves nothing but the cost; encoding hashes every word). The IDFs and norms are those of that block.
    Everything else, the saved model and the encoding, is ``subword``'s (``docs/embedders.md``).
    """

    name = "subword-fast"
    SUMMARY = ("subword's model (lsa's words plus hashed character n-grams of every word, one SVD) with a "
               "vectorised fit on a sample, and CJK bigram words; opt-in")
    GRAM_DTYPE = np.float32
    MODEL_DIR = model_dir("subword-fast")
    """The fitted model's folder in the run directory (listed with checksums in the embed record)."""
    MODEL_FILES = ("subword-fast.json", *SubwordEmbedder.MODEL_FILES[1:])
    LOAD_OPTIONS = (*SubwordEmbedder.LOAD_OPTIONS, "svd_docs", "ngram_min_df", "range_bits", "cjk_bigrams")

    def __init__(self, *, dim: int = 256, seed: int = 0, sample_size: int = 20_000, min_df: int = 2,  # noqa: PLR0913
                 max_df: float = 0.5, max_features: int = 32_768, ngram_range: tuple[int, int] = (3, 5),
                 bits: int = 16, char_weight: float = 0.15, char_oov_only: bool = False, exact_norm: bool = True,
                 symbols: bool = True, n_iter: int = 2, component_dtype: str = "float16", svd_docs: int = 8000,
                 ngram_min_df: int = 2, range_bits: int = 12, cjk_bigrams: bool = True,
                 batch_size: int = EmbedderBase.DEFAULT_BATCH_SIZE, progress: bool = True) -> None:
        super().__init__(dim=dim, seed=seed, sample_size=sample_size, min_df=min_df, max_df=max_df,
                         max_features=max_features, ngram_range=ngram_range, bits=bits, char_weight=char_weight,
                         char_oov_only=char_oov_only, exact_norm=exact_norm, symbols=symbols, n_iter=n_iter,
                         component_dtype=component_dtype, batch_size=batch_size, progress=progress)
        if svd_docs < 2 or ngram_min_df < 1 or not 4 <= range_bits <= 24:
            raise ClusterClipError("subword-fast embedder: svd_docs >= 2, ngram_min_df >= 1 and 4 <= range_bits <= 24 "
                                   "required")
        self.svd_docs, self.ngram_min_df, self.range_bits = int(svd_docs), int(ngram_min_df), int(range_bits)
        self.CJK = bool(cjk_bigrams)

    def config(self) -> dict[str, Any]:
        """``subword``'s options and the fit's own (the vocabulary's tie rule, the SVD's sample and range)."""
        fit = "exact" if self.exact_norm else "without cross terms"
        return {**super().config(), "norm": f"l2 of both blocks, n-gram block over the fitted ratio (fit: {fit})",
                "vocabulary_ties": "hash key", "svd_docs": self.svd_docs,
                "ngram_min_df": self.ngram_min_df, "range_bits": self.range_bits, "cjk_bigrams": self.CJK}

    def fit(self, texts: Sequence[str]) -> FastSubwordEmbedder:
        """Learn the vocabulary, both IDFs and the SVD from ``texts`` (deterministic for a seed); returns self."""
        texts = list(texts)
        self.vocabulary, self.idf_words, self.idf_ngrams, self._cache = None, None, None, {}
        with progress_steps(f"fit {self.name}", 2, self.progress) as step:
            step(f"words of {len(texts):,} documents")
            counted = [self._count(texts[i:i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
            s, tf, cp, starts, ends = _merge_counts(counted, len(texts))
            df = np.bincount(s.indices, minlength=s.shape[1])
            chosen = self._choose(df, tf, len(texts))
            words = [cp.cps[a:b].tobytes().decode("utf-32-le") for a, b in zip(starts[chosen], ends[chosen],
                                                                               strict=True)]
            order = sorted(range(len(words)), key=words.__getitem__)
            chosen = chosen[np.asarray(order, dtype=np.int64)]
            self.vocabulary = [words[i] for i in order]
            self.idf_words = (np.log((1.0 + len(texts)) / (1.0 + df[chosen])) + 1.0).astype(np.float32)
            grams = np.flatnonzero(df >= self.ngram_min_df)
            grams = np.setdiff1d(grams, chosen) if self.char_oov_only else grams
            step(f"n-grams of {len(grams):,} words; SVD of {min(len(texts), self.svd_docs):,} x {len(chosen):,} "
                 f"words + {1 << self.bits:,} buckets to {self.dim} dimensions")
            h = self._hash_rows(cp, starts[grams], ends[grams])
            return self._fit_joint(sp.csr_matrix(s[:, chosen]), sp.csr_matrix(s[:, grams]), h)

    def _fit_joint(self, tf: sp.csr_matrix, s: sp.csr_matrix, h: sp.csr_matrix) -> FastSubwordEmbedder:
        """IDFs, the ratio of the blocks and the SVD of ``[a W | b C / ratio]``, each row normalised as a whole:
        ``ratio`` is the median of the documents' n-gram block norm over their word block norm, kept in the
        n-gram IDF (divided by it), so a document is ``sum_w tf_w E_w`` over its words before normalising."""
        self._ngram_idf(s, h)
        w = sp.csr_matrix((tf.data * self.idf_words[tf.indices], tf.indices, tf.indptr),  # type: ignore[index]
                          shape=tf.shape)
        w_norms, c_norms = row_norms(w), self._ngram_norms(s, h)
        both = (w_norms > 0) & (c_norms > 0)
        ratio = np.float32(np.median(c_norms[both] / w_norms[both])) if both.any() else np.float32(1.0)
        self.idf_ngrams /= ratio  # type: ignore[operator]
        h.data /= ratio
        a, b = self._weights
        joint = inverse(np.sqrt(np.square(a * w_norms) + np.square(b * c_norms / ratio)))
        return self._fit_svd(scale_rows(w, a * joint), scale_rows(s, b * joint), h)  # type: ignore[return-value]

    def _prepared(self) -> dict[str, Any]:
        """Arrays derived from the fitted model once per process: the n-gram components ``[2**bits, dim]`` (as
        saved and times the block weight ``b``) and every vocabulary word's whole projection ``E_w`` (its word
        component times ``a`` and its IDF, plus, unless ``char_oov_only``, its n-grams' projection) with the
        squared norm of its n-gram row."""
        c = self._indexes()
        if "word_e" not in c:
            if not self.fitted:
                raise ClusterClipError("subword-fast embedder is not fitted: fit() it on a sample of the corpus, or "
                                       "load a run's model with run_embedder()")
            a, b = self._weights
            c["gram_t"] = np.ascontiguousarray(self.components_ngrams.T, dtype=np.float32)  # type: ignore[union-attr]
            c["gram_b"] = c["gram_t"] * np.float32(b)
            e = self.components_words.T * (a * self.idf_words[:, None])  # type: ignore[union-attr,index]
            c["vocab_norm2"] = np.zeros(len(self.vocabulary or []))
            if not self.char_oov_only:
                h = self._hash_rows(*c["vocab_words"])
                e = e + h @ c["gram_b"]
                c["vocab_norm2"] = np.square(row_norms(h), dtype=np.float64)
            c["word_e"] = np.ascontiguousarray(e, dtype=np.float32)
        return c

    def _encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Projections and coverage of one batch: ``sum_w tf_w E_w`` over the vocabulary's words plus the hashed
        n-grams of the others, divided by the norm of the document's weighted blocks (without the cross terms of
        n-grams two words share: the reported ``norm``, not the direction, depends on it)."""
        c = self._prepared()
        batch = TokenBatch(texts, self.CJK)
        col, stop, subword = self._split(batch)
        tf_v = self._vocabulary_tf(batch, col, len(self.vocabulary or []))
        unseen = np.flatnonzero(subword & (col < 0))
        s_u = sublinear(batch.counts[:, unseen])
        h_u = self._hash_rows(batch.cp, batch.starts[unseen], batch.ends[unseen])
        proj = np.asarray(tf_v @ c["word_e"], dtype=np.float32)
        proj += np.asarray(s_u @ np.asarray(h_u @ c["gram_b"], dtype=np.float32), dtype=np.float32)
        a, b = self._weights
        w2 = np.square(row_norms(sp.csr_matrix((tf_v.data * self.idf_words[tf_v.indices],  # type: ignore[index]
                                                tf_v.indices, tf_v.indptr), shape=tf_v.shape)), dtype=np.float64)
        c2 = s_u.power(2) @ np.square(row_norms(h_u), dtype=np.float64) + tf_v.power(2) @ c["vocab_norm2"]
        norm = np.sqrt(a * a * w2 + b * b * np.asarray(c2, dtype=np.float64))
        proj *= inverse(norm)[:, None]
        empty = np.flatnonzero(norm == 0)
        if self.symbols and len(empty):
            proj[empty] = self._chunk_projection(batch, empty, c["gram_t"])
        return proj, _coverage(batch, col, stop)

    @classmethod
    def _options_of(cls, config: dict[str, Any]) -> dict[str, Any]:
        return {**super()._options_of(config), "exact_norm": str(config["norm"]).endswith("(fit: exact)")}

    def _count(self, texts: list[str]) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """One batch's non-stop words: sublinear counts (documents x words), keys, total counts and the words'
        code points (concatenated) with their lengths."""
        batch = TokenBatch(texts, self.CJK)
        keep = np.flatnonzero(self._indexes()["stop_index"].lookup(batch.keys) < 0)
        counts = batch.counts[:, keep]
        starts, ends = batch.starts[keep], batch.ends[keep]
        lengths = ends - starts
        at = np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))
        return (sublinear(counts), batch.keys[keep], np.asarray(counts.sum(axis=0), dtype=np.float64).ravel(),
                batch.cp.cps[at], lengths)

    def _choose(self, df: np.ndarray, tf: np.ndarray, n_docs: int) -> np.ndarray:
        """Indices of the vocabulary's words among the distinct words (scikit-learn's ``min_df``, ``max_df`` and
        ``max_features`` rules; with none left, every word, as ``lsa`` then refits with ``min_df`` 1)."""
        keep = np.flatnonzero((df >= min(self.min_df, n_docs)) & (df <= self.max_df * n_docs))
        if len(keep) == 0:
            keep = np.arange(len(df))
        if len(keep) > self.max_features:
            keep = np.sort(keep[np.lexsort((keep, -tf[keep]))[:self.max_features]])
        return keep

    def _svd_inputs(self, w: sp.csr_matrix, s: sp.csr_matrix, h: sp.csr_matrix) -> tuple[Any, ...]:
        """At most ``svd_docs`` seeded documents and the words they have; for the range finder, the n-gram rows
        folded into ``2**range_bits`` buckets with seeded signs (a count sketch: inner products kept on
        average)."""
        if w.shape[0] > self.svd_docs:
            rows = np.sort(np.random.default_rng(self.seed).choice(w.shape[0], size=self.svd_docs, replace=False))
            w, s = sp.csr_matrix(w[rows]), sp.csr_matrix(s[rows])
            used = np.flatnonzero(np.bincount(s.indices, minlength=s.shape[1]))
            s, h = sp.csr_matrix(s[:, used]), sp.csr_matrix(h[used])
        if self.range_bits >= self.bits:
            return w, s, h, None
        rng = np.random.default_rng([self.seed, 1])
        fold = rng.integers(0, 1 << self.range_bits, size=h.shape[1])
        sign = rng.choice(np.array([-1.0, 1.0], dtype=np.float32), size=h.shape[1])
        h_r = sp.csr_matrix((h.data * sign[h.indices], fold[h.indices], h.indptr),
                            shape=(h.shape[0], 1 << self.range_bits))
        h_r.sum_duplicates()
        return w, s, h, (s, h_r)


def _merge_counts(counted: list[tuple[Any, ...]],
                  n_docs: int) -> tuple[sp.csr_matrix, np.ndarray, CodePoints, np.ndarray, np.ndarray]:
    """The batches' counts over one column space of their distinct words (sorted by key): sublinear counts
    ``[documents, words]``, total counts per word, and the words' code points (separated by a space) with the
    span of each, to hash and to name them."""
    if not counted:
        return sp.csr_matrix((n_docs, 0), dtype=np.float32), np.zeros(0), CodePoints(""), *np.zeros((2, 0), np.int64)
    parts, keys, tfs, chars, lengths = zip(*counted, strict=True)
    _, first, where = np.unique(np.concatenate(keys), return_index=True, return_inverse=True)
    where = where.ravel()
    offsets = np.cumsum([0] + [len(k) for k in keys])
    s = sp.vstack([sp.csr_matrix((p.data, where[offsets[i]:offsets[i + 1]][p.indices], p.indptr),
                                 shape=(p.shape[0], len(first))) for i, p in enumerate(parts)], format="csr")
    tf = np.bincount(where, weights=np.concatenate(tfs), minlength=len(first))
    all_lengths = np.concatenate(lengths)
    src = (np.cumsum(all_lengths) - all_lengths)[first]
    size = all_lengths[first]
    starts = np.cumsum(size + 1) - size - 1
    inside = np.arange(int(size.sum())) - np.repeat(np.cumsum(size) - size, size)
    cps = np.full(int(starts[-1] + size[-1]) if len(size) else 0, 32, dtype=np.uint32)
    cps[np.repeat(starts, size) + inside] = np.concatenate(chars)[np.repeat(src, size) + inside]
    return s, tf, CodePoints(cps), starts, starts + size
