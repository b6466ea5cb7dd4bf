"""The ``subword`` embedder: ``lsa`` plus hashed character n-grams of the words, so unseen words still count."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from clusterclip.contract.embed import model_dir
from clusterclip.embed.base import EmbedderBase, FittedEmbedder
from clusterclip.embed.block_svd import block_svd
from clusterclip.embed.subword_tokens import (
    WORD_PATTERN,
    CodePoints,
    KeyIndex,
    TokenBatch,
    inverse,
    row_norms,
    scale_rows,
    sublinear,
    words_of,
)
from clusterclip.errors import ClusterClipError


class SubwordEmbedder(FittedEmbedder):
    """LSA over a fitted word vocabulary (as ``lsa``) plus a block of hashed character n-grams of every word.

    :meth:`fit` learns from a seeded corpus sample ``lsa``'s vocabulary and IDF (``min_df``, ``max_df``,
    ``max_features``, English stop words), the IDF of ``2**bits`` buckets of the character ``ngram_range``-grams of
    every non-stop word between begin/end marks (``char_oov_only``: of the words outside the vocabulary only), and
    one randomized SVD (``n_iter`` power iterations, seeded by ``seed``) of both blocks side by side, each block
    L2-normalised and weighted ``sqrt(1 - char_weight) : sqrt(char_weight)``. A document is its two weighted blocks
    projected on the ``dim`` right singular vectors. A word the vocabulary lacks (a rare name, another language,
    an identifier) keeps its n-grams, and a script the fit never saw lands in the buckets its n-grams collide
    with, so such documents are not all the constant vector of an empty document; a document without any word
    (ASCII art, a table of symbols) is embedded from the n-grams of its white-space separated chunks
    (``symbols``). ``exact_norm=False`` normalises the n-gram block without the cross terms of n-grams two words
    share (faster). The n-gram components are stored as ``component_dtype``. See ``docs/embedders.md``.
    """

    name = "subword"
    SUMMARY = ("lsa plus hashed character n-grams of every word, fitted and stored in the run: no empty vectors for "
               "unseen words, scripts or symbol art; fit 2-4x slower than lsa")
    CJK: bool = False
    """Kana and Han characters make bigram words (:meth:`~clusterclip.embed.subword_tokens.CodePoints.runs`)."""
    GRAM_DTYPE: type = np.float64
    """Precision of the SVD's last step (the projected matrix's Gram matrix and the vectors)."""
    MODEL_DIR = model_dir("subword")
    """The fitted model's folder in the run directory (listed with checksums in the embed record)."""
    MODEL_FILES = ("subword.json", "vocabulary.json", "idf_words.npy", "idf_ngrams.npy", "components_words.npy",
                   "components_ngrams.npy")
    """Options, vocabulary (column order), IDF per word and per bucket, components ``[dim, vocabulary]`` (float32)
    and ``[dim, 2**bits]`` (``component_dtype``)."""
    LOAD_OPTIONS = ("dim", "seed", "sample_size", "min_df", "max_df", "max_features", "bits", "char_weight",
                    "char_oov_only", "component_dtype")

    def __init__(self, *, dim: int = 256, seed: int = 0, sample_size: int = 20_000, min_df: int = 2,  # noqa: PLR0913
                 max_df: float = 0.5, max_features: int = 32_768, ngram_range: tuple[int, int] = (3, 5),
                 bits: int = 16, char_weight: float = 0.15, char_oov_only: bool = False, exact_norm: bool = True,
                 symbols: bool = True, n_iter: int = 5, component_dtype: str = "float16",
                 batch_size: int = EmbedderBase.DEFAULT_BATCH_SIZE, progress: bool = True) -> None:
        super().__init__(batch_size, progress)
        if dim < 1 or sample_size < 2 or min_df < 1 or not 0 < max_df <= 1 or max_features < 1 or n_iter < 0:
            raise ClusterClipError("subword embedder: dim, min_df, max_features >= 1, sample_size >= 2, n_iter >= 0, "
                                   "0 < max_df <= 1 required")
        if not 1 <= ngram_range[0] <= ngram_range[1] or not 8 <= bits <= 24 or not 0 <= char_weight <= 1 \
                or component_dtype not in ("float16", "float32"):
            raise ClusterClipError("subword embedder: 1 <= ngram_range[0] <= ngram_range[1], 8 <= bits <= 24, "
                                   "0 <= char_weight <= 1, component_dtype float16 or float32 required")
        self.dim, self.seed, self.sample_size = dim, seed, sample_size
        self.min_df, self.max_df, self.max_features = min_df, max_df, max_features
        self.ngram_range, self.bits = (int(ngram_range[0]), int(ngram_range[1])), bits
        self.char_weight, self.char_oov_only, self.exact_norm = float(char_weight), bool(char_oov_only), exact_norm
        self.symbols, self.n_iter, self.component_dtype = bool(symbols), n_iter, component_dtype
        self.vocabulary: list[str] | None = None
        self.idf_words: np.ndarray | None = None
        self.idf_ngrams: np.ndarray | None = None
        self.components_words: np.ndarray | None = None
        self.components_ngrams: np.ndarray | None = None
        self._cache: dict[str, Any] = {}

    def config(self) -> dict[str, Any]:
        """Every option of the fit and the transform (the fitted arrays are outputs of the embed stage)."""
        return {"name": self.name, "dim": self.dim, "seed": self.seed, "sample_size": self.sample_size,
                "min_df": self.min_df, "max_df": self.max_df, "max_features": self.max_features,
                "word_pattern": WORD_PATTERN, "lowercase": True, "stop_words": "sklearn-english",
                "ngram_range": list(self.ngram_range), "bits": self.bits,
                "hash": "polynomial mod 2**64 (base 1099511628211), murmur3 fmix64", "char_weight": self.char_weight,
                "char_oov_only": self.char_oov_only, "symbols_fallback": self.symbols, "tf": "1+log",
                "norm": "l2 per block" if self.exact_norm else "l2 per block (subword: without cross terms)",
                "svd": f"randomized, n_iter {self.n_iter}", "component_dtype": self.component_dtype, "recipe": 1}

    @classmethod
    def _options_of(cls, config: dict[str, Any]) -> dict[str, Any]:
        return {"ngram_range": tuple(config["ngram_range"]), "exact_norm": config["norm"] == "l2 per block",
                "symbols": config["symbols_fallback"], "n_iter": int(str(config["svd"]).split()[-1])}

    @property
    def fitted(self) -> bool:
        return self.components_words is not None

    @property
    def _weights(self) -> tuple[float, float]:
        return math.sqrt(1.0 - self.char_weight), math.sqrt(self.char_weight)

    def _hash_rows(self, cp: CodePoints, starts: np.ndarray, ends: np.ndarray) -> sp.csr_matrix:
        """``[words, 2**bits]`` n-gram counts of the words, times the buckets' IDF once fitted."""
        return cp.ngram_rows(starts, ends, self.ngram_range, self.bits, self.seed, self.idf_ngrams)

    def _indexes(self) -> dict[str, Any]:
        """Key indexes of the vocabulary and of the stop words (built once per process)."""
        from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

        c = self._cache
        if "vocab_index" not in c:
            cp, a, b = words_of(sorted(w for w in ENGLISH_STOP_WORDS if len(w) > 1))
            c["stop_index"] = KeyIndex(cp.word_keys(a, b))
            vocab = self.vocabulary or []
            cp, a, b = words_of(vocab, self.CJK) if vocab else (CodePoints(""), *np.zeros((2, 0), np.int64))
            c["vocab_words"] = (cp, a, b)
            c["vocab_index"] = KeyIndex(cp.word_keys(a, b))
        return c

    def _split(self, batch: TokenBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per word of the batch: its vocabulary column (-1 if absent), whether it is a stop word, whether it
        feeds the n-gram block."""
        c = self._indexes()
        col = c["vocab_index"].lookup(batch.keys)
        stop = c["stop_index"].lookup(batch.keys) >= 0
        subword = ~stop & (col < 0) if self.char_oov_only else ~stop
        return col, stop, subword

    @staticmethod
    def _vocabulary_tf(batch: TokenBatch, col: np.ndarray, n_vocab: int) -> sp.csr_matrix:
        """Sublinear TF of the vocabulary's words in vocabulary columns (the word block before IDF and norm)."""
        known = np.flatnonzero(col >= 0)
        x = sublinear(batch.counts[:, known])
        return sp.csr_matrix((x.data, col[known][x.indices], x.indptr), shape=(x.shape[0], n_vocab))

    def fit(self, texts: Sequence[str]) -> SubwordEmbedder:
        """Learn the vocabulary, both IDFs and the SVD from ``texts`` (deterministic for a seed); returns self."""
        texts = list(texts)
        self._fit_vocabulary(texts)
        tf, s_parts, h_parts, key_parts = self._fit_parts(texts, len(self.vocabulary or []))
        return self._fit_blocks(tf, *_merge_words(s_parts, h_parts, key_parts))

    def _fit_blocks(self, tf: sp.csr_matrix, s: sp.csr_matrix, h: sp.csr_matrix) -> SubwordEmbedder:
        """The n-gram IDF, both blocks weighted and normalised, and the SVD, from the word block's sublinear TF
        ``tf`` (documents x vocabulary), and the n-gram block as sublinear word counts ``s`` (documents x words)
        times their n-gram rows ``h`` (words x buckets, no IDF yet; scaled in place); returns self."""
        self._ngram_idf(s, h)
        w = sp.csr_matrix((tf.data * self.idf_words[tf.indices], tf.indices, tf.indptr),  # type: ignore[index]
                          shape=tf.shape)
        w_norms, c_norms = row_norms(w), self._ngram_norms(s, h)
        a, b = self._weights
        row_scale = inverse(np.sqrt(a * a * (w_norms > 0) + b * b * (c_norms > 0)))
        return self._fit_svd(scale_rows(w, inverse(w_norms) * a * row_scale),
                             scale_rows(s, inverse(c_norms) * b * row_scale), h)

    def _ngram_idf(self, s: sp.csr_matrix, h: sp.csr_matrix) -> None:
        """Learn the buckets' smoothed IDF from the documents' n-grams ``s @ h`` and apply it to ``h`` (in place)."""
        n_docs, n_buckets = s.shape[0], 1 << self.bits
        df = np.zeros(n_buckets, dtype=np.int64)
        for i in range(0, n_docs, self.batch_size):
            df += np.bincount(sp.csr_matrix(s[i:i + self.batch_size] @ h).indices, minlength=n_buckets)
        self.idf_ngrams = (np.log((1.0 + n_docs) / (1.0 + df)) + 1.0).astype(np.float32)
        h.data *= self.idf_ngrams[h.indices]

    def _ngram_norms(self, s: sp.csr_matrix, h: sp.csr_matrix) -> np.ndarray:
        """Each document's n-gram block norm (``exact_norm``: with the cross terms of n-grams two words share)."""
        if self.exact_norm:
            return np.concatenate([row_norms(s[i:i + self.batch_size] @ h) for i in range(0, s.shape[0],
                                                                                          self.batch_size)])
        return _root(_squares_without_cross_terms(s, np.square(row_norms(h), dtype=np.float64)))

    def _fit_svd(self, w: sp.csr_matrix, s: sp.csr_matrix, h: sp.csr_matrix) -> SubwordEmbedder:
        """The components: the SVD of the weighted blocks ``[w | s @ h]``; returns self."""
        n_vocab, n_buckets = w.shape[1], 1 << self.bits
        w, s, h, range_block = self._svd_inputs(w, s, h)
        vt = block_svd(w, s, h, min(self.dim, w.shape[0], n_vocab + n_buckets), self.n_iter, self.seed,
                        range_block, self.GRAM_DTYPE)
        self.components_words = np.zeros((self.dim, n_vocab), dtype=np.float32)
        comps_c = np.zeros((self.dim, n_buckets), dtype=np.float32)
        self.components_words[:len(vt)], comps_c[:len(vt)] = vt[:, :n_vocab], vt[:, n_vocab:]
        self.components_ngrams = comps_c.astype(self.component_dtype)
        self._cache = {}
        return self

    def _svd_inputs(self, w: sp.csr_matrix, s: sp.csr_matrix, h: sp.csr_matrix) -> tuple[Any, ...]:
        """The weighted blocks the SVD is fitted on and a stand-in for the n-gram block in its range finder
        (``(S', H')`` or, here, ``None``: the block itself)."""
        return w, s, h, None

    def _fit_vocabulary(self, texts: list[str]) -> None:
        """``lsa``'s vocabulary and word IDF (scikit-learn's vectorizer); forget any earlier fit."""
        from sklearn.feature_extraction.text import TfidfVectorizer

        vec = TfidfVectorizer(lowercase=True, token_pattern=WORD_PATTERN, stop_words="english",
                              min_df=min(self.min_df, len(texts)), max_df=self.max_df,
                              max_features=self.max_features, sublinear_tf=True, dtype=np.float32)
        try:
            vec.fit(texts)
        except ValueError:
            vec.set_params(max_df=1.0, min_df=1)
            vec.fit(texts)
        self.vocabulary = [str(t) for t in vec.get_feature_names_out()]
        self.idf_words = np.asarray(vec.idf_, dtype=np.float32)
        self.idf_ngrams = None
        self._cache = {}

    def _fit_parts(self, texts: list[str], n_vocab: int) -> tuple[sp.csr_matrix, list[Any], list[Any], list[Any]]:
        """Per batch of ``texts``: the word block's TF, and the sublinear counts, n-gram rows (no IDF yet) and
        keys of the words that feed the n-gram block."""
        tf_parts, s_parts, h_parts, key_parts = [], [], [], []
        for start in range(0, len(texts), self.batch_size):
            batch = TokenBatch(texts[start:start + self.batch_size], self.CJK)
            col, _, subword = self._split(batch)
            tf_parts.append(self._vocabulary_tf(batch, col, n_vocab))
            keep = np.flatnonzero(subword)
            s_parts.append(sublinear(batch.counts[:, keep]))
            h_parts.append(self._hash_rows(batch.cp, batch.starts[keep], batch.ends[keep]))
            key_parts.append(batch.keys[keep])
        return sp.vstack(tf_parts, format="csr"), s_parts, h_parts, key_parts

    def adopt(self, fitted: SubwordEmbedder) -> None:
        """Use the fitted model of ``fitted`` (another instance with the same options)."""
        self.vocabulary, self.idf_words, self.idf_ngrams = fitted.vocabulary, fitted.idf_words, fitted.idf_ngrams
        self.components_words, self.components_ngrams = fitted.components_words, fitted.components_ngrams
        self._cache = {}

    def _prepared(self) -> dict[str, Any]:
        """Arrays derived from the fitted model once per process: the n-gram components ``[2**bits, dim]``, the
        IDF-weighted word components ``[vocabulary, dim]`` and, unless ``char_oov_only``, every vocabulary word's
        n-gram row, its squared norm and its projection (beside the word components: one product for both), so a
        batch hashes only the words the vocabulary lacks."""
        c = self._indexes()
        if "gram_t" not in c:
            if not self.fitted:
                raise ClusterClipError("subword embedder is not fitted: fit() it on a sample of the corpus, or load "
                                       "a run's model with run_embedder()")
            c["gram_t"] = np.ascontiguousarray(self.components_ngrams.T, dtype=np.float32)  # type: ignore[union-attr]
            c["word_t"] = np.ascontiguousarray(self.components_words.T * self.idf_words[:, None],  # type: ignore
                                               dtype=np.float32)
            if not self.char_oov_only:
                h = self._hash_rows(*c["vocab_words"])
                c["vocab_h"] = h
                c["vocab_norm2"] = np.square(row_norms(h), dtype=np.float64)
                c["vocab_e"] = np.asarray(h @ c["gram_t"], dtype=np.float32)
                c["word_t"] = np.ascontiguousarray(np.hstack([c["word_t"], c["vocab_e"]]))
        return c

    def _ngram_block(self, c: dict[str, Any], batch: TokenBatch, tf_v: sp.csr_matrix, unseen: np.ndarray,
                     known: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """The n-gram block's projection (not yet normalised) and norm per document: the words outside the
        vocabulary (``unseen``) are hashed here, the vocabulary's were hashed once (:meth:`_prepared`) and
        projected with the word block (``known``: their part of the projection, None with ``char_oov_only``)."""
        s_u = sublinear(batch.counts[:, unseen])
        h_u = self._hash_rows(batch.cp, batch.starts[unseen], batch.ends[unseen])
        pc = np.asarray(s_u @ np.asarray(h_u @ c["gram_t"], dtype=np.float32), dtype=np.float32)
        if known is not None:
            pc += known
        if self.exact_norm and self.char_oov_only:
            return pc, row_norms(s_u @ h_u)
        if self.exact_norm:
            return pc, row_norms(sp.hstack([tf_v, s_u], format="csr") @ sp.vstack([c["vocab_h"], h_u], format="csr"))
        norm2 = _squares_without_cross_terms(s_u, np.square(row_norms(h_u), dtype=np.float64))
        if not self.char_oov_only:
            norm2 = norm2 + _squares_without_cross_terms(tf_v, c["vocab_norm2"])
        return pc, _root(norm2)

    def _encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Projections (not normalised) and coverage of one batch: the share of each document's non-stop words
        that are in the vocabulary (0 when it has none)."""
        c = self._prepared()
        batch = TokenBatch(texts, self.CJK)
        col, stop, subword = self._split(batch)
        tf_v = self._vocabulary_tf(batch, col, len(self.vocabulary or []))
        w_norms = row_norms(sp.csr_matrix((tf_v.data * self.idf_words[tf_v.indices], tf_v.indices,  # type: ignore
                                           tf_v.indptr), shape=tf_v.shape))
        both = np.asarray(tf_v @ c["word_t"], dtype=np.float32)  # the word block and the vocabulary's n-grams
        pw = both[:, :self.dim] * inverse(w_norms)[:, None]
        known = None if self.char_oov_only else both[:, self.dim:]
        pc, c_norms = self._ngram_block(c, batch, tf_v, np.flatnonzero(subword & (col < 0)), known)
        pc *= inverse(c_norms)[:, None]
        a, b = self._weights
        row_scale = inverse(np.sqrt(a * a * (w_norms > 0) + b * b * (c_norms > 0)))
        proj = (a * pw + b * pc) * row_scale[:, None]
        empty = np.flatnonzero((w_norms == 0) & (c_norms == 0))
        if self.symbols and len(empty):
            proj[empty] = self._chunk_projection(batch, empty, c["gram_t"])
        return proj, _coverage(batch, col, stop)

    def _chunk_projection(self, batch: TokenBatch, docs: np.ndarray, gram_t: np.ndarray) -> np.ndarray:
        """Projection of the documents ``docs`` (which have no word) from the n-grams of their white-space
        separated chunks, hashed with another salt: sublinear TF, n-gram IDF, exact norm."""
        counts, starts, ends = batch.chunks(docs)
        s_f = sublinear(counts)
        h_f = batch.cp.ngram_rows(starts, ends, self.ngram_range, self.bits, self.seed, self.idf_ngrams, salt=1)
        proj = np.asarray(s_f @ np.asarray(h_f @ gram_t, dtype=np.float32), dtype=np.float32)
        return (proj * inverse(row_norms(s_f @ h_f))[:, None])[docs]

    def _encode_batches(self, texts: list[str]) -> Iterator[tuple[Any, ...]]:
        for start in range(0, len(texts), self.batch_size):
            proj, coverage = self._encode_batch(texts[start:start + self.batch_size])
            yield slice(start, start + len(proj)), proj, coverage

    def save(self, folder: str | os.PathLike[str]) -> list[Path]:
        """Write the fitted model into ``folder`` (atomic JSON and ``.npy`` files: :attr:`MODEL_FILES`)."""
        arrays = [self.idf_words, self.idf_ngrams, self.components_words, self.components_ngrams]
        return self._write_model(folder, self.vocabulary or [], arrays)  # type: ignore[arg-type]

    @classmethod
    def load(cls, folder: str | os.PathLike[str], *, batch_size: int = EmbedderBase.DEFAULT_BATCH_SIZE,
             progress: bool = True) -> SubwordEmbedder:
        """The embedder saved in ``folder``; a missing or inconsistent file is a :class:`ClusterClipError`."""
        emb, vocab, (idf_w, idf_c, comps_w, comps_c) = cls._read_model(folder, batch_size, progress)
        n_b = 1 << emb.bits
        if not isinstance(vocab, list) or idf_w.shape != (len(vocab),) or idf_c.shape != (n_b,) \
                or comps_w.shape != (emb.dim, len(vocab)) or comps_c.shape != (emb.dim, n_b) \
                or comps_c.dtype != np.dtype(emb.component_dtype) \
                or not all(np.isfinite(x).all() for x in (idf_w, idf_c, comps_w, comps_c)):
            raise cls._mismatch(folder)
        emb.vocabulary = [str(t) for t in vocab]
        emb.idf_words, emb.idf_ngrams = idf_w.astype(np.float32), idf_c.astype(np.float32)
        emb.components_words, emb.components_ngrams = comps_w.astype(np.float32), comps_c
        return emb

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_cache": {}}


def _merge_words(s_parts: list[sp.csr_matrix], h_parts: list[sp.csr_matrix],
                 key_parts: list[np.ndarray]) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """The batches' word counts ``S`` (documents x words) and n-gram rows ``H`` (words x buckets) over one column
    space of the distinct words of all batches, so ``S @ H`` is the documents' n-gram block."""
    _, first, where = np.unique(np.concatenate(key_parts), return_index=True, return_inverse=True)
    where = where.ravel()
    h = sp.csr_matrix(sp.vstack(h_parts, format="csr")[first])
    offsets = np.cumsum([0] + [len(k) for k in key_parts])
    s = sp.vstack([sp.csr_matrix((part.data, where[offsets[i]:offsets[i + 1]][part.indices], part.indptr),
                                 shape=(part.shape[0], len(first))) for i, part in enumerate(s_parts)], format="csr")
    return s, h


def _squares_without_cross_terms(s: sp.csr_matrix, word_norm2: np.ndarray) -> np.ndarray:
    """Squared norm of each document's n-gram block ``S @ H`` without the cross terms of n-grams shared by two of
    its words: ``S**2 @ |H_t|**2`` (float64)."""
    return np.asarray(s.power(2) @ word_norm2, dtype=np.float64)


def _root(norm2: np.ndarray) -> np.ndarray:
    return np.sqrt(np.maximum(norm2, 0.0)).astype(np.float32)


def _coverage(batch: TokenBatch, col: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """The share of each document's non-stop words that are in the vocabulary (0 when it has none), float32."""
    total = batch.counts @ (~stop).astype(np.float32)
    return np.where(total > 0, (batch.counts @ (col >= 0).astype(np.float32)) / np.maximum(total, 1), 0.0)\
        .astype(np.float32)
