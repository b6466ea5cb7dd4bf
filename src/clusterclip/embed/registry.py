"""The embedders (``--embedder``), one line each, and building one by name (:func:`get_embedder`).

An embedder is a class over :class:`~clusterclip.embed.base.EmbedderBase` that carries its own name, help,
default batch size, rebuild options and command flags; adding one is its module plus one line in
:data:`EMBEDDERS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from clusterclip.embed.base import Embedder, EmbedderBase, FittedEmbedder
from clusterclip.embed.chargram import CharGramEmbedder
from clusterclip.embed.charwb import CharWbEmbedder
from clusterclip.embed.hashing import HashingEmbedder
from clusterclip.embed.lsa import LsaEmbedder
from clusterclip.embed.minilm import MiniLMEmbedder
from clusterclip.embed.static import StaticEmbedder
from clusterclip.embed.static_vocab import StaticVocabEmbedder
from clusterclip.embed.subword import SubwordEmbedder
from clusterclip.embed.subword_fast import FastSubwordEmbedder
from clusterclip.errors import ClusterClipError

EMBEDDERS: dict[str, type[EmbedderBase]] = {cls.name: cls for cls in (
    LsaEmbedder,
    SubwordEmbedder,
    FastSubwordEmbedder,
    StaticEmbedder,
    StaticVocabEmbedder,
    MiniLMEmbedder,
    HashingEmbedder,
    CharWbEmbedder,
    CharGramEmbedder,
)}
"""Every embedder by name, in the order ``--help`` lists them."""
DEFAULT_EMBEDDER = "lsa"
"""Chosen by the multi-corpus benchmark (``docs/embedders.md``); ``subword-fast`` was measured against it on the
issue 47 corpora and did not win on most of them (``benchmarks/RESULTS.md``)."""
DEFAULT_SHARD_SIZE = 65_536
"""Embeddings per shard file (``--embed-shard-size``)."""


def fitted_embedders() -> tuple[type[FittedEmbedder], ...]:
    """The embedders the embed stage fits on a corpus sample and stores in the run directory."""
    return tuple(cls for cls in EMBEDDERS.values() if issubclass(cls, FittedEmbedder))


def default_batch_sizes() -> dict[str, int]:
    """Texts per encoder call when no batch size is given, by embedder name."""
    return {name: cls.DEFAULT_BATCH_SIZE for name, cls in EMBEDDERS.items()}


def embedder_class(name: str) -> type[EmbedderBase]:
    """The embedder class named ``name`` (case and surrounding space ignored); an unknown name is an error
    listing the choices."""
    key = name.strip().lower()
    if key not in EMBEDDERS:
        raise ClusterClipError(f"unknown embedder {name!r}; choose one of {', '.join(EMBEDDERS)}")
    return EMBEDDERS[key]


def get_embedder(name: str, *, batch_size: int | None = None, device: str = "cpu", seed: int = 0,
                 progress: bool = True, **kw: Any) -> EmbedderBase:
    """Build an embedder by name (one of :data:`EMBEDDERS`); models load lazily, on first use.

    ``batch_size=None`` takes the embedder's own ``DEFAULT_BATCH_SIZE``. ``seed`` and ``device`` go to
    embedders that take them (``hashing``'s projection, a fitted embedder's sample and SVD; ``minilm`` and the
    static model's one-time distillation). Other keywords go to the embedder's constructor (e.g. ``dim``,
    ``vocab_limit``, ``cache_dir``, ``max_length``).
    """
    return embedder_class(name).create(batch_size=batch_size, device=device, seed=seed, progress=progress, **kw)


def encode_texts(name: str, texts: Sequence[str], *, seed: int = 0, progress: bool = True, **kw: Any) -> np.ndarray:
    """Embed a list of texts outside a run directory with embedder ``name``; a fitted embedder (``lsa``,
    ``static-vocab``) is first fitted on a seeded sample of ``texts`` itself (as the embed stage fits it on the
    corpus)."""
    emb = get_embedder(name, seed=seed, progress=progress, **kw)
    if isinstance(emb, FittedEmbedder):
        pick = np.random.default_rng(seed).choice(len(texts), size=min(emb.sample_size, len(texts)), replace=False)
        emb.fit([texts[i] for i in np.sort(pick)])
    return emb.encode(texts)


__all__ = ["DEFAULT_EMBEDDER", "DEFAULT_SHARD_SIZE", "EMBEDDERS", "Embedder", "default_batch_sizes",
           "embedder_class", "encode_texts", "fitted_embedders", "get_embedder"]
