"""The ``static-vocab`` embedder: ``static`` distilled with the corpus' own words as extra tokens."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.contract.embed import model_dir
from clusterclip.embed.base import MINILM_ID, EmbedderBase, FittedEmbedder, digest, minilm_path
from clusterclip.embed.distill import (
    STATIC_RECIPE,
    distill_static_model,
    is_static_model_dir,
    static_cache_dir,
    vocabulary_hash,
)
from clusterclip.embed.minilm import MiniLMEmbedder
from clusterclip.embed.static import StaticEmbedder
from clusterclip.errors import ClusterClipError
from clusterclip.progress import progress_note
from clusterclip.store import TMP_PREFIX, atomic_path, load_json, save_json

WORD_PATTERN = r"(?u)[^\W_]{2,}"
"""Corpus-vocabulary words: runs of 2+ letters or digits in MiniLM-normalised text (``_`` splits words, as
MiniLM's pre-tokenizer does)."""


def corpus_vocabulary(texts: Sequence[str], *, min_df: int = 2, max_words: int = 25_000) -> list[str]:
    """The words of ``texts`` that MiniLM splits into pieces, most frequent first: the vocabulary to distil.

    Texts are normalised by MiniLM's own normaliser (lowercase, accents stripped), so every word is
    spelled as its tokenizer will see it. Kept: :data:`WORD_PATTERN` words of at most 50 characters, not
    all digits, not a MiniLM token, that the pre-tokenizer leaves whole and that occur in at least
    ``min_df`` texts (capped at their number); the ``max_words`` with the highest document frequency,
    ties in alphabetical order. Deterministic for the same texts.
    """
    from sklearn.feature_extraction.text import CountVectorizer
    from tokenizers import Tokenizer

    texts = list(texts)
    if not texts or max_words < 1:
        return []
    tok = Tokenizer.from_file(str(minilm_path() / "tokenizer.json"))
    base = tok.get_vocab()
    vec = CountVectorizer(preprocessor=tok.normalizer.normalize_str, lowercase=False, token_pattern=WORD_PATTERN,
                          min_df=min(min_df, len(texts)), binary=True, dtype=np.int32)
    try:
        x = vec.fit_transform(texts)
    except ValueError:
        return []
    df = np.diff(x.tocsc().indptr)
    names = vec.get_feature_names_out()
    pre = tok.pre_tokenizer
    ok = np.array([i for i, w in enumerate(names)
                   if w not in base and len(w) <= 50 and not w.isdigit()
                   and [p for p, _ in pre.pre_tokenize_str(w)] == [w]], dtype=np.int64)
    if not len(ok):
        return []
    order = ok[np.argsort(-df[ok], kind="stable")]
    return [str(w) for w in names[order[:max_words]]]


class StaticVocabEmbedder(StaticEmbedder, FittedEmbedder):
    """``static`` distilled with the corpus' own words, so its domain terms are whole tokens.

    :meth:`fit` takes the :func:`corpus_vocabulary` of a seeded sample of the corpus (the embed stage
    draws ``sample_size`` documents; words in at least ``min_df`` of them that MiniLM splits into pieces,
    the ``max_words`` most frequent) and distils MiniLM with those words added
    (:func:`distill_static_model` ``extra_words``): ``hypernym`` or ``postgresql`` then get one vector of
    their own instead of the mean of ``hyper ##ny ##m``. The distilled model is cached per vocabulary hash
    (:func:`static_cache_dir`), so a corpus with the same vocabulary reuses it; the embed stage copies it
    into the run directory (``embeddings/static-vocab``, listed with checksums), from which ``add`` and
    Ray actors apply the same model. Encoding is :class:`StaticEmbedder`'s: WordPiece matches the longest
    vocabulary entry first, so known corpus words stay whole and other words fall back to word pieces.
    """

    name = "static-vocab"
    SUMMARY = "static distilled with the corpus' own words, stored in the run"
    MODEL_DIR = model_dir("static-vocab")
    """The model's folder in the run directory (listed with checksums in the embed record)."""
    MODEL_FILES = ("static-vocab.json", "vocabulary.json", "tokenizer.json", "model.safetensors", "config.json",
                   "clusterclip.json")
    """Options, the corpus words, then the model2vec folder (tokenizer with the words added, token vectors,
    model2vec config, distillation provenance)."""
    OPTIONS = ("dim", "seed", "sample_size", "min_df", "max_words", "max_length", "vocab_limit")

    def __init__(self, *, seed: int = 0, sample_size: int = 20_000, min_df: int = 2, max_words: int = 25_000,
                 **static: Any) -> None:
        """``static`` are :class:`StaticEmbedder`'s options (``dim``, ``max_length``, ``vocab_limit``,
        ``cache_dir``, ``batch_size``, ``device``, ``progress``), ``model_path`` excepted."""
        if "model_path" in static:
            raise ClusterClipError("static-vocab embedder: model_path is not an option (the model is distilled "
                                   "for the corpus)")
        super().__init__(**static)
        if not 1 <= self.dim <= MiniLMEmbedder.dim or sample_size < 2 or min_df < 1 or max_words < 0:
            raise ClusterClipError(f"static-vocab embedder: 1 <= dim <= {MiniLMEmbedder.dim}, sample_size >= 2, "
                                   "min_df >= 1, max_words >= 0 required")
        self.seed, self.sample_size, self.min_df, self.max_words = seed, sample_size, min_df, max_words
        self.cache_dir = static.get("cache_dir")
        self.distilled = False
        self.words: list[str] | None = None
        self.model_name: str | None = None

    @property
    def fitted(self) -> bool:
        return self.words is not None

    def config(self) -> dict[str, Any]:
        """Every option of the fit and the transform (the distilled model is an output of the embed stage)."""
        return {"name": self.name, "source_model": MINILM_ID,
                "source_sha256": digest(minilm_path() / "model.safetensors"), "dim": self.dim,
                "max_length": self.max_length, "vocab_limit": self.vocab_limit, "seed": self.seed,
                "sample_size": self.sample_size, "min_df": self.min_df, "max_words": self.max_words,
                "word_pattern": WORD_PATTERN, "recipe": STATIC_RECIPE}

    def ensure_model(self) -> Path:
        """The fitted model's folder (in the cache, or in a run directory once loaded from there)."""
        if not self.fitted:
            raise ClusterClipError("static-vocab embedder is not fitted: fit() it on a sample of the corpus, or "
                                   "load a run's model with run_embedder()")
        return self.path

    @staticmethod
    def _cached(path: Path, vocab_hash: str) -> bool:
        """Whether ``path`` holds a complete model distilled with the vocabulary of ``vocab_hash``."""
        if not (is_static_model_dir(path) and (path / "vocabulary.json").is_file()):
            return False
        try:
            prov, words = load_json(path / "clusterclip.json"), load_json(path / "vocabulary.json")
        except (ValueError, OSError):
            return False
        return isinstance(prov, dict) and prov.get("vocabulary_sha256") == vocab_hash \
            and isinstance(words, list) and vocabulary_hash(words) == vocab_hash

    def fit(self, texts: Sequence[str]) -> StaticVocabEmbedder:
        """Take the corpus vocabulary of ``texts`` and distil MiniLM with it, or reuse the cached model
        distilled with the same vocabulary; returns self."""
        words = corpus_vocabulary(texts, min_df=self.min_df, max_words=self.max_words)
        vhash = vocabulary_hash(words)
        path = static_cache_dir(self.dim, self.vocab_limit, self.cache_dir, vocab_hash=vhash)
        if not self._cached(path, vhash):
            if path.exists():
                trash = Path(tempfile.mkdtemp(prefix=TMP_PREFIX + path.name + ".old.", dir=path.parent))
                os.replace(path, trash / path.name)
                shutil.rmtree(trash, ignore_errors=True)
            progress_note(f"distilling all-MiniLM-L6-v2 with {len(words):,} corpus words into {path} (once per "
                          "corpus vocabulary; a minute or two)", self.progress)
            distill_static_model(path, dim=self.dim, vocab_limit=self.vocab_limit, extra_words=words,
                                 device=self.device, progress=self.progress)
        self.adopt_model(words, path, path.name)
        return self

    def adopt_model(self, words: list[str], path: Path, model_name: str | None) -> None:
        self.words, self.path, self.model_name = words, path, model_name
        self._loaded = False

    def adopt(self, fitted: StaticVocabEmbedder) -> None:
        """Use the model of ``fitted`` (another instance with the same options)."""
        self.adopt_model(list(fitted.words or []), fitted.path, fitted.model_name)

    def save(self, folder: str | os.PathLike[str]) -> list[Path]:
        """Copy the fitted model into ``folder`` with this embedder's options (atomic files; see
        :attr:`MODEL_FILES`)."""
        src = self.ensure_model()
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        paths = [folder / f for f in self.MODEL_FILES]
        for path in paths[1:]:
            if not (path.exists() and path.samefile(src / path.name)):
                with atomic_path(path) as tmp:
                    shutil.copyfile(src / path.name, tmp)
        save_json(paths[0], {"config": self.config(), "model": self.model_name,
                             "vocabulary_sha256": vocabulary_hash(self.words or []), "words": len(self.words or [])})
        return paths

    @classmethod
    def load(cls, folder: str | os.PathLike[str], *, batch_size: int = EmbedderBase.DEFAULT_BATCH_SIZE,
             progress: bool = True) -> StaticVocabEmbedder:
        """The embedder saved in ``folder``; a missing or inconsistent file is a :class:`ClusterClipError`."""
        folder = Path(folder)
        missing = [str(folder / f) for f in cls.MODEL_FILES if not (folder / f).is_file()]
        if missing:
            raise ClusterClipError(f"fitted static-vocab model missing ({', '.join(missing)}); re-run `clusterclip "
                                   "embed --force`")
        try:
            meta, words = load_json(folder / cls.MODEL_FILES[0]), load_json(folder / "vocabulary.json")
            prov = load_json(folder / "clusterclip.json")
            emb = cls(**{k: meta["config"][k] for k in cls.OPTIONS}, batch_size=batch_size, progress=progress)
            vhash = meta["vocabulary_sha256"]
        except (KeyError, TypeError, ValueError, OSError) as exc:
            raise ClusterClipError(f"{folder}: unreadable fitted static-vocab model ({exc}); re-run `clusterclip "
                                   "embed --force`") from None
        if not isinstance(words, list) or vocabulary_hash(words) != vhash or not isinstance(prov, dict) \
                or prov.get("vocabulary_sha256") != vhash:
            raise ClusterClipError(f"{folder}: fitted static-vocab model files do not fit together; re-run "
                                   "`clusterclip embed --force`")
        emb.adopt_model([str(w) for w in words], folder, meta.get("model"))
        return emb

    def _load(self) -> None:
        if self._loaded:
            return
        super()._load()
        rows = self._emb.shape[0]
        if self._tok.get_vocab_size() != rows or rows < len(self.words or []):
            self._loaded = False
            raise ClusterClipError(f"{self.path}: tokenizer and token vectors of the static-vocab model do not "
                                   "fit together; re-run `clusterclip embed --force`")

    def __getstate__(self) -> dict[str, Any]:
        """Pickled with its loaded model (Ray actors need no access to the cache or the run directory)."""
        if self.fitted:
            self._load()
        return dict(self.__dict__)
