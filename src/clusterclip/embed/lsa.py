"""The ``lsa`` embedder: TF-IDF and truncated SVD fitted on a sample of the corpus, stored in the run."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.contract.embed import model_dir
from clusterclip.embed.base import EmbedderBase, FittedEmbedder
from clusterclip.errors import ClusterClipError
from clusterclip.progress import progress_steps


class LsaEmbedder(FittedEmbedder):
    """Latent semantic analysis fitted on the corpus: TF-IDF over a fitted vocabulary, truncated SVD to ``dim``.

    :meth:`fit` learns, from a seeded sample of the corpus (the embed stage draws ``sample_size``
    documents), a vocabulary of at most ``max_features`` words (lowercase runs of 2+ word characters,
    English stop words dropped, in at least ``min_df`` and at most ``max_df`` of the sample's documents),
    their IDF, and the top ``dim`` right singular vectors of the sublinear-TF-IDF matrix (randomized SVD
    seeded by ``seed``, signs fixed). A document is then its L2-normalised TF-IDF row projected on those
    vectors (``U S`` of the SVD), L2-normalised: each document on its own, so the stage streams. The
    fitted model is saved into the run directory as JSON and ``.npy`` (:meth:`save`, :meth:`load`),
    listed with checksums in the embed record, so later processes and Ray actors apply the same transform.
    Words the corpus' own vocabulary has are what separates its topics: on corpora unlike the data a
    pretrained model saw, this beats MiniLM (``docs/embedders.md``).
    """

    name = "lsa"
    SUMMARY = ("TF-IDF and truncated SVD fitted on a sample of the corpus, stored in the run (fast, best clusters "
               "on the benchmark corpora)")
    TOKEN_PATTERN = r"(?u)\b\w\w+\b"
    MODEL_DIR = model_dir("lsa")
    """The fitted model's folder in the run directory (listed with checksums in the embed record)."""
    MODEL_FILES = ("lsa.json", "vocabulary.json", "idf.npy", "components.npy")
    """Options, vocabulary (column order), IDF per column, SVD components ``[dim, vocab]``."""
    LOAD_OPTIONS = ("dim", "seed", "sample_size", "min_df", "max_df", "max_features")

    def __init__(self, *, dim: int = 256, seed: int = 0, sample_size: int = 20_000, min_df: int = 2,
                 max_df: float = 0.5, max_features: int = 32_768, batch_size: int = EmbedderBase.DEFAULT_BATCH_SIZE,
                 progress: bool = True) -> None:
        super().__init__(batch_size, progress)
        if dim < 1 or sample_size < 2 or min_df < 1 or not 0 < max_df <= 1 or max_features < 1:
            raise ClusterClipError("lsa embedder: dim, min_df, max_features >= 1, sample_size >= 2, "
                                   "0 < max_df <= 1 required")
        self.dim, self.seed, self.sample_size = dim, seed, sample_size
        self.min_df, self.max_df, self.max_features = min_df, max_df, max_features
        self.vocabulary: list[str] | None = None
        self.idf: np.ndarray | None = None
        self.components: np.ndarray | None = None
        self._counter: Any = None
        self._all_words: Any = None

    def config(self) -> dict[str, Any]:
        """Every option of the fit and the transform (the fitted arrays are outputs of the embed stage)."""
        return {"name": self.name, "dim": self.dim, "seed": self.seed, "sample_size": self.sample_size,
                "min_df": self.min_df, "max_df": self.max_df, "max_features": self.max_features,
                "token_pattern": self.TOKEN_PATTERN, "lowercase": True, "stop_words": "sklearn-english",
                "tf": "1+log", "norm": "l2", "svd": "randomized, n_iter 5", "recipe": 1}

    @property
    def fitted(self) -> bool:
        return self.components is not None

    def fit(self, texts: Sequence[str]) -> LsaEmbedder:
        """Learn vocabulary, IDF and SVD components from ``texts`` (deterministic for a seed); returns self."""
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.utils.extmath import randomized_svd

        texts = list(texts)
        vec = TfidfVectorizer(lowercase=True, token_pattern=self.TOKEN_PATTERN, stop_words="english",
                              min_df=min(self.min_df, len(texts)), max_df=self.max_df,
                              max_features=self.max_features, sublinear_tf=True, dtype=np.float32)
        with progress_steps(f"fit {self.name}", 2, self.progress) as step:
            step(f"vocabulary and TF-IDF of {len(texts):,} documents")
            try:
                x = vec.fit_transform(texts)
            except ValueError:
                vec.set_params(max_df=1.0, min_df=1)
                x = vec.fit_transform(texts)
            k = min(self.dim, *x.shape)
            step(f"SVD of {x.shape[0]:,} x {x.shape[1]:,} words to {k} dimensions")
            _, _, vt = randomized_svd(x, n_components=k, n_iter=5, random_state=self.seed)
        components = np.zeros((self.dim, x.shape[1]), dtype=np.float32)
        components[:k] = vt
        self.vocabulary = [str(t) for t in vec.get_feature_names_out()]
        self.idf = np.asarray(vec.idf_, dtype=np.float32)
        self.components = components
        self._counter = None
        return self

    def adopt(self, fitted: LsaEmbedder) -> None:
        """Use the fitted model of ``fitted`` (another instance with the same options)."""
        self.vocabulary, self.idf, self.components = fitted.vocabulary, fitted.idf, fitted.components
        self._counter = None

    def save(self, folder: str | os.PathLike[str]) -> list[Path]:
        """Write the fitted model into ``folder`` (atomic files: :attr:`MODEL_FILES`)."""
        return self._write_model(folder, self.vocabulary or [], [self.idf, self.components])  # type: ignore[list-item]

    @classmethod
    def load(cls, folder: str | os.PathLike[str], *, batch_size: int = EmbedderBase.DEFAULT_BATCH_SIZE,
             progress: bool = True) -> LsaEmbedder:
        """The embedder saved in ``folder``; a missing or inconsistent file is a :class:`ClusterClipError`."""
        emb, vocab, (idf, comps) = cls._read_model(folder, batch_size, progress)
        if not isinstance(vocab, list) or idf.shape != (len(vocab),) or comps.shape != (emb.dim, len(vocab)) \
                or not (np.isfinite(idf).all() and np.isfinite(comps).all()):
            raise cls._mismatch(folder)
        emb.vocabulary, emb.idf, emb.components = [str(t) for t in vocab], idf.astype(np.float32), comps
        return emb

    def _counts(self, texts: Sequence[str]) -> Any:
        if self._counter is None:
            from sklearn.feature_extraction.text import CountVectorizer

            self._counter = CountVectorizer(lowercase=True, token_pattern=self.TOKEN_PATTERN,
                                            vocabulary={t: i for i, t in enumerate(self.vocabulary or [])},
                                            dtype=np.float32)
        return self._counter.transform(texts).tocsr()

    def _content_tokens(self, texts: Sequence[str]) -> np.ndarray:
        """Each text's words that could be in the vocabulary (the token pattern, English stop words out)."""
        if self._all_words is None:
            from sklearn.feature_extraction.text import HashingVectorizer

            self._all_words = HashingVectorizer(lowercase=True, token_pattern=self.TOKEN_PATTERN, stop_words="english",
                                                alternate_sign=False, norm=None, n_features=1 << 18, dtype=np.float32)
        return np.asarray(self._all_words.transform(texts).sum(axis=1), dtype=np.float64).ravel()

    def _encode_batches(self, texts: list[str]) -> Iterator[tuple[Any, ...]]:
        if not self.fitted:
            raise ClusterClipError("lsa embedder is not fitted: fit() it on a sample of the corpus, or load a "
                                   "run's model with run_embedder()")
        from sklearn.preprocessing import normalize

        comps_t = np.ascontiguousarray(self.components.T)  # type: ignore[union-attr]
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start:start + self.batch_size]
            x = self._counts(batch)
            known = np.asarray(x.sum(axis=1), dtype=np.float64).ravel()
            seen = np.maximum(self._content_tokens(batch), known)
            coverage = np.divide(known, seen, out=np.zeros_like(known), where=known > 0)
            np.log(x.data, out=x.data)
            x.data += 1.0
            x.data *= self.idf[x.indices]  # type: ignore[index]
            x = normalize(x, copy=False)
            yield slice(start, start + x.shape[0]), np.asarray(x @ comps_t, dtype=np.float32), coverage

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_counter": None, "_all_words": None}
