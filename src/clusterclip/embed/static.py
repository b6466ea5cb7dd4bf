"""The ``static`` embedder: a model2vec static model, by default distilled from all-MiniLM-L6-v2."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.embed.base import MINILM_ID, EmbedderBase, digest, minilm_path
from clusterclip.embed.distill import (
    STATIC_MAX_LENGTH,
    STATIC_RECIPE,
    distill_static_model,
    is_static_model_dir,
    static_cache_dir,
)
from clusterclip.errors import ClusterClipError
from clusterclip.progress import progress_note


class StaticEmbedder(EmbedderBase):
    """A model2vec static model: a document is the mean of its tokens' vectors, then L2-normalised.

    By default the model is distilled from all-MiniLM-L6-v2 on first use and cached at
    :func:`static_cache_dir`; ``model_path`` uses any existing model2vec folder instead. Texts are cut to
    ``max_length`` tokens (as model2vec does, characters beyond ``max_length`` x the median token length
    are dropped before tokenising, which keeps very long documents cheap).
    """

    name = "static"
    SUMMARY = "model2vec model distilled from all-MiniLM-L6-v2 (fast)"
    REBUILD_OPTIONS = ("dim", "max_length", "vocab_limit")
    DEFAULT_MAX_LENGTH = STATIC_MAX_LENGTH

    def __init__(self, *, dim: int = 256, batch_size: int = EmbedderBase.DEFAULT_BATCH_SIZE,
                 max_length: int | None = DEFAULT_MAX_LENGTH, vocab_limit: int | None = None,
                 cache_dir: str | os.PathLike[str] | None = None,
                 model_path: str | os.PathLike[str] | None = None, device: str = "cpu", progress: bool = True) -> None:
        super().__init__(batch_size, progress)
        self.dim = dim
        self.max_length = max_length
        self.vocab_limit = vocab_limit
        self.device = device
        self.distilled = model_path is None
        self.path = Path(model_path) if model_path is not None else static_cache_dir(dim, vocab_limit, cache_dir)
        self._loaded = False

    def ensure_model(self) -> Path:
        """The model folder, distilling it first when it is the default and not cached yet."""
        if not is_static_model_dir(self.path):
            if not self.distilled:
                raise ClusterClipError(f"{self.path}: not a model2vec model folder "
                                       "(needs config.json, model.safetensors, tokenizer.json)")
            _distiller_installed()
            progress_note(f"distilling the static embedder from all-MiniLM-L6-v2 into {self.path} (once; about "
                          "a minute)", self.progress)
            distill_static_model(self.path, dim=self.dim, vocab_limit=self.vocab_limit, device=self.device,
                                 progress=self.progress)
        return self.path

    def config(self) -> dict[str, Any]:
        """Model checksum and provenance, dim and truncation (batch size does not change results)."""
        path = self.ensure_model()
        cfg: dict[str, Any] = {
            "name": self.name,
            "model": path.name if self.distilled else str(path),
            "model_sha256": digest(path / "model.safetensors"),
            "dim": self.dim,
            "max_length": self.max_length,
        }
        if self.distilled:
            cfg.update(source_model=MINILM_ID, vocab_limit=self.vocab_limit, recipe=STATIC_RECIPE)
        return cfg

    def _load(self) -> None:
        if self._loaded:
            return
        from model2vec import StaticModel

        model = StaticModel.from_pretrained(str(self.ensure_model()), normalize=True)
        if model.token_mapping is not None or model.weights is not None:
            raise ClusterClipError(f"{self.path}: vocabulary-quantised model2vec models are not supported")
        self._emb = np.ascontiguousarray(model.embedding, dtype=np.float32)
        if self._emb.shape[1] != self.dim:
            raise ClusterClipError(f"{self.path}: model has dim {self._emb.shape[1]}, expected {self.dim}")
        self._tok = model.tokenizer
        if self.max_length is None:
            self._tok.no_truncation()
        else:
            self._tok.enable_truncation(self.max_length)
        self._unk = model.unk_token_id
        self._char_cut = self.max_length * model.median_token_length if self.max_length else None
        self._loaded = True

    def _encode_batches(self, texts: list[str]) -> Iterator[tuple[Any, ...]]:
        from scipy.sparse import csr_matrix

        self._load()
        n_vocab = self._emb.shape[0]
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start:start + self.batch_size]
            full = np.fromiter(map(len, batch), dtype=np.float64, count=len(batch))
            if self._char_cut is not None:
                batch = [t[:self._char_cut] for t in batch]
            ids = [e.ids for e in self._tok.encode_batch_fast(batch, add_special_tokens=False)]
            lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
            flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum()))
            rows = np.repeat(np.arange(len(ids)), lengths)
            if self._unk is not None:
                known = flat != self._unk
                flat, rows = flat[known], rows[known]
            counts = np.bincount(rows, minlength=len(ids)).astype(np.float32)
            weights = 1.0 / np.maximum(counts, 1.0)
            doc_tokens = csr_matrix((weights[rows], (rows, flat)), shape=(len(ids), n_vocab), dtype=np.float32)
            # known tokens among those read, times the share of the text read (characters, then tokens, cut)
            read = np.ones(len(batch)) if self._char_cut is None else \
                np.minimum(1.0, self._char_cut / np.maximum(full, 1))
            coverage = counts / np.maximum(lengths, 1) * read
            yield slice(start, start + len(batch)), np.asarray(doc_tokens @ self._emb, dtype=np.float32), coverage


def _distiller_installed() -> None:
    """Check that what the distillation needs is installed before announcing it (without the seconds of importing
    it), so a core install fails at once with the extra to install (the CLI turns the ImportError into one line)
    instead of after "distilling ... about a minute"."""
    import importlib.util

    minilm_path()
    for module in ("torch", "transformers"):
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # ValueError: blocked in sys.modules
            found = False
        if not found:
            raise ModuleNotFoundError(f"No module named {module!r}", name=module)
