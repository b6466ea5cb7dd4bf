"""The ``chargram`` embedder: character 3-5-grams within words, sublinear TF-IDF per n-gram and a truncated SVD
(the char n-gram TF-IDF + SVD of issue 47), with the n-gram counting and the projection compiled."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from clusterclip.contract.embed import model_dir
from clusterclip.embed import ngram_kernels as kernels
from clusterclip.embed.base import EmbedderBase, FittedEmbedder
from clusterclip.embed.subword_tokens import inverse, row_norms, scale_rows
from clusterclip.errors import ClusterClipError
from clusterclip.progress import progress_steps

HASH_SEED = np.uint64(0x9E3779B97F4A7C15)
"""The n-gram hash's start value: fixed, so an n-gram's tag does not depend on the fit's seed."""


def code_points(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The lowercased ``texts`` as one array of code points (uint32) and each text's bounds in it (int64
    ``[len(texts) + 1]``); lone surrogates are kept as code points."""
    low = [t.lower() for t in texts]
    bounds = np.zeros(len(low) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, low), dtype=np.int64, count=len(low)), out=bounds[1:])
    cps = np.frombuffer("".join(low).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    return cps, bounds


def quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``x`` (float ``[rows, dim]``) as int8 rows and a float32 scale per row (the row's largest magnitude over
    127): a quarter of float32's bytes for the encoder to read, an error under 0.4 % of each row's largest
    entry."""
    scale = (np.abs(x).max(axis=1) / 127.0).astype(np.float32) if x.size else np.zeros(len(x), np.float32)
    q = np.rint(np.divide(x, scale[:, None], out=np.zeros_like(x), where=scale[:, None] > 0))
    return np.clip(q, -127, 127).astype(np.int8), scale


class CharGramEmbedder(FittedEmbedder):
    """Character ``ngram_range``-grams of every white-space separated word (lowercase, one space on each side:
    scikit-learn's ``char_wb`` analyzer), sublinear TF-IDF over the fitted n-grams, a randomized SVD to ``dim``.

    :meth:`fit` counts the n-grams of the sample (a 40-bit hash tag each: :mod:`~clusterclip.embed.ngram_kernels`),
    keeps those in at least ``min_df`` documents (at most ``max_ngrams``, most frequent first, ties by tag), with
    scikit-learn's smoothed IDF, and takes the top ``dim`` right singular vectors of the L2-normalised
    ``(1 + log count) idf`` rows (``n_iter`` power iterations, seeded). The components are stored as int8 rows with a
    scale each, in document-frequency order. A document is its own TF-IDF row, L2-normalised, times those
    components: an n-gram the fit never saw counts for nothing, as in the vectorizer. Counting and projecting run
    in compiled loops over the document's code points, so the log applies per n-gram, as the anchor's
    ``sublinear_tf`` does, at word-TF-IDF speed. Coverage is the share of the document's n-gram occurrences among
    the fitted n-grams; the recorded norm is the share of its TF-IDF row the components hold, as for ``lsa``.
    See ``docs/embedders.md``."""

    name = "chargram"
    SUMMARY = ("character 3-5-grams within words, sublinear TF-IDF and SVD, counted and projected in compiled "
               "loops; fitted and stored in the run (best clusters on code and other languages)")
    MODEL_DIR = model_dir("chargram")
    """The fitted model's folder in the run directory (listed with checksums in the embed record)."""
    MODEL_FILES = ("chargram.json", "vocabulary.json", "tags.npy", "idf.npy", "scale.npy", "components.npy")
    """Options, an empty vocabulary (n-grams are tags), each fitted n-gram's tag (uint64), IDF and row scale
    (float32), and the int8 components ``[n-grams, dim]``."""
    LOAD_OPTIONS = ("dim", "seed", "sample_size", "min_df", "max_ngrams", "n_iter")

    def __init__(self, *, dim: int = 256, seed: int = 0, sample_size: int = 6000, min_df: int = 2,  # noqa: PLR0913
                 max_ngrams: int = 1_048_576, ngram_range: tuple[int, int] = (3, 5), n_iter: int = 5,
                 batch_size: int = EmbedderBase.DEFAULT_BATCH_SIZE, progress: bool = True) -> None:
        super().__init__(batch_size, progress)
        if dim < 1 or sample_size < 2 or min_df < 1 or not 1 <= max_ngrams <= kernels.MAX_ROWS or n_iter < 0 \
                or not 1 <= ngram_range[0] <= ngram_range[1]:
            raise ClusterClipError(f"chargram embedder: dim, min_df >= 1, sample_size >= 2, n_iter >= 0, "
                                   f"1 <= max_ngrams <= {kernels.MAX_ROWS:,}, 1 <= ngram_range[0] <= ngram_range[1] "
                                   "required")
        self.dim, self.seed, self.sample_size = dim, seed, sample_size
        self.min_df, self.max_ngrams, self.n_iter = min_df, max_ngrams, n_iter
        self.ngram_range = (int(ngram_range[0]), int(ngram_range[1]))
        self.tags: np.ndarray | None = None
        self.idf: np.ndarray | None = None
        self.scale: np.ndarray | None = None
        self.components: np.ndarray | None = None
        self._index: np.ndarray | None = None

    def config(self) -> dict[str, Any]:
        """Every option of the fit and the transform (the fitted arrays are outputs of the embed stage)."""
        return {"name": self.name, "dim": self.dim, "seed": self.seed, "sample_size": self.sample_size,
                "min_df": self.min_df, "max_ngrams": self.max_ngrams, "ngram_range": list(self.ngram_range),
                "analyzer": "char_wb", "lowercase": True,
                "hash": "polynomial mod 2**64, murmur3 fmix64, top 40 bits", "tf": "1+log per n-gram",
                "idf": "smooth", "norm": "l2", "svd": "randomized", "n_iter": self.n_iter,
                "components": "int8 rows, float32 scale", "recipe": 1}

    @classmethod
    def _options_of(cls, config: dict[str, Any]) -> dict[str, Any]:
        return {"ngram_range": tuple(config["ngram_range"])}

    @property
    def fitted(self) -> bool:
        """Whether :meth:`fit` or :meth:`load` has given it n-grams."""
        return self.tags is not None

    def _count(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(indptr, tags, counts)`` of every text's distinct n-grams."""
        cps, bounds = code_points(texts)
        table, used = kernels.new_table()
        indptr, tags, counts, _, _ = kernels.list_ngrams(cps, bounds, *self.ngram_range, HASH_SEED, table, used)
        return indptr, tags, counts

    def fit(self, texts: Sequence[str]) -> CharGramEmbedder:
        """Learn the n-grams, their IDF and the SVD from ``texts`` (deterministic for a seed); returns self."""
        from sklearn.utils.extmath import randomized_svd

        texts = list(texts)
        n = len(texts)
        with progress_steps(f"fit {self.name}", 2, self.progress) as step:
            step(f"character n-grams of {n:,} documents")
            indptr, tags, counts = self._count(texts)
            kept, col, df = self._choose(tags, n)
            idf = (np.log((1.0 + n) / (1.0 + df)) + 1.0).astype(np.float32)
            rows = np.repeat(np.arange(n), np.diff(indptr))
            hit = col >= 0
            data = ((1.0 + np.log(counts[hit])) * idf[col[hit]]).astype(np.float32)
            x = sp.csr_matrix((data, (rows[hit], col[hit])), shape=(n, len(kept)), dtype=np.float32)
            x = scale_rows(x, inverse(row_norms(x)))
            k = min(self.dim, *x.shape)
            step(f"SVD of {n:,} x {len(kept):,} n-grams to {k} dimensions")
            comps_t = np.zeros((len(kept), self.dim), dtype=np.float32)
            if k:
                _, _, vt = randomized_svd(x, n_components=k, n_iter=self.n_iter, random_state=self.seed)
                comps_t[:, :k] = vt.T
        self.components, self.scale = quantize_rows(comps_t)
        self.tags, self.idf, self._index = kept, idf, None
        return self

    def _choose(self, tags: np.ndarray, n_docs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The kept n-grams' tags (most documents first, ties by tag), each occurrence's row among them (-1 when
        dropped) and their document frequency: those in at least ``min_df`` documents (all when none is), at most
        ``max_ngrams``."""
        uniq, inv, df = np.unique(tags, return_inverse=True, return_counts=True)
        keep = np.flatnonzero(df >= min(self.min_df, n_docs))
        if len(keep) == 0:
            keep = np.arange(len(uniq))
        keep = keep[np.lexsort((uniq[keep], -df[keep]))][:self.max_ngrams]
        rank = np.full(len(uniq), -1, dtype=np.int64)
        rank[keep] = np.arange(len(keep))
        return uniq[keep], rank[inv.ravel()], df[keep]

    def _encode_batches(self, texts: list[str]) -> Iterator[tuple[Any, ...]]:
        if not self.fitted:
            raise ClusterClipError("chargram embedder is not fitted: fit() it on a sample of the corpus, or load a "
                                   "run's model with run_embedder()")
        if self._index is None:
            self._index = kernels.build_index(self.tags)
        table, used = kernels.new_table()
        for start in range(0, len(texts), self.batch_size):
            cps, bounds = code_points(texts[start:start + self.batch_size])
            out = np.zeros((len(bounds) - 1, self.dim), dtype=np.float32)
            coverage = np.zeros(len(bounds) - 1, dtype=np.float32)
            table, used = kernels.project(cps, bounds, *self.ngram_range, HASH_SEED, table, used, self._index,
                                          self.idf, self.scale, self.components, out, coverage)
            yield slice(start, start + len(out)), out, coverage

    def adopt(self, fitted: CharGramEmbedder) -> None:
        """Use the fitted model of ``fitted`` (another instance with the same options)."""
        self.tags, self.idf, self.scale = fitted.tags, fitted.idf, fitted.scale
        self.components, self._index = fitted.components, None

    def save(self, folder: str | os.PathLike[str]) -> list[Path]:
        """Write the fitted model into ``folder`` (atomic JSON and ``.npy`` files: :attr:`MODEL_FILES`)."""
        return self._write_model(folder, [], [self.tags, self.idf, self.scale, self.components])  # type: ignore

    @classmethod
    def load(cls, folder: str | os.PathLike[str], *, batch_size: int = EmbedderBase.DEFAULT_BATCH_SIZE,
             progress: bool = True) -> CharGramEmbedder:
        """The embedder saved in ``folder``; a missing or inconsistent file is a :class:`ClusterClipError`."""
        emb, vocab, (tags, idf, scale, comps) = cls._read_model(folder, batch_size, progress)
        rows = len(tags)
        if vocab != [] or tags.dtype != np.uint64 or tags.ndim != 1 or idf.shape != (rows,) \
                or scale.shape != (rows,) or comps.shape != (rows, emb.dim) or comps.dtype != np.int8 \
                or idf.dtype != np.float32 or scale.dtype != np.float32 or rows > emb.max_ngrams \
                or np.any(tags & kernels.LOW) or len(np.unique(tags)) != rows \
                or not (np.isfinite(idf).all() and np.isfinite(scale).all()):
            raise cls._mismatch(folder)
        emb.tags, emb.idf, emb.scale, emb.components = tags, idf, scale, np.ascontiguousarray(comps)
        return emb

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_index": None}
