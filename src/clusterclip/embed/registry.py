"""Embedders by name: the choices, their default batch sizes, and building one (:func:`get_embedder`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from clusterclip.embed.base import Embedder
from clusterclip.embed.hashing import HashingEmbedder
from clusterclip.embed.lsa import LsaEmbedder
from clusterclip.embed.minilm import MiniLMEmbedder
from clusterclip.embed.static import StaticEmbedder
from clusterclip.embed.static_vocab import StaticVocabEmbedder
from clusterclip.errors import ClusterClipError

DEFAULT_SHARD_SIZE = 65_536
"""Embeddings per shard file (``--shard-size``)."""
EMBEDDERS = ("static", "minilm", "hashing", "lsa", "static-vocab")
DEFAULT_EMBEDDER = "lsa"
"""Chosen by the multi-corpus benchmark (``docs/embedders.md``): the only CPU embedder at MiniLM's level on
every corpus there."""

FITTED_EMBEDDERS = (LsaEmbedder, StaticVocabEmbedder)
"""Embedders fitted on a sample of the corpus by the embed stage, their model stored in the run directory."""

DEFAULT_BATCH_SIZES = {"static": StaticEmbedder.DEFAULT_BATCH_SIZE, "minilm": MiniLMEmbedder.DEFAULT_BATCH_SIZE,
                       "hashing": HashingEmbedder.DEFAULT_BATCH_SIZE, "lsa": LsaEmbedder.DEFAULT_BATCH_SIZE,
                       "static-vocab": StaticVocabEmbedder.DEFAULT_BATCH_SIZE}
"""Texts per encoder call when no batch size is given, by embedder name."""


def get_embedder(name: str, *, batch_size: int | None = None, device: str = "cpu", seed: int = 0,
                 progress: bool = True, **kw: Any) -> Embedder:
    """Build an embedder by name (one of :data:`EMBEDDERS`); models load lazily, on first use.

    ``batch_size=None`` takes the embedder's own ``DEFAULT_BATCH_SIZE`` (:data:`DEFAULT_BATCH_SIZES`).
    ``seed`` only matters for ``hashing`` (its projection), ``lsa`` (its sample and SVD) and ``static-vocab``
    (its sample); ``device`` for ``minilm`` and for the static model's one-time distillation. Other keywords
    go to the embedder's constructor (e.g. ``dim``, ``vocab_limit``, ``cache_dir``, ``max_length``).
    """
    key = name.strip().lower()
    common: dict[str, Any] = {"progress": progress}
    if batch_size is not None:
        common["batch_size"] = batch_size
    factories: dict[str, Any] = {
        "minilm": lambda: MiniLMEmbedder(device=device, **common, **kw),
        "static": lambda: StaticEmbedder(device=device, **common, **kw),
        "hashing": lambda: HashingEmbedder(seed=seed, **common, **kw),
        "lsa": lambda: LsaEmbedder(seed=seed, **common, **kw),
        "static-vocab": lambda: StaticVocabEmbedder(seed=seed, device=device, **common, **kw),
    }
    if key not in factories:
        raise ClusterClipError(f"unknown embedder {name!r}; choose one of {', '.join(EMBEDDERS)}")
    try:
        return factories[key]()
    except TypeError as exc:
        raise ClusterClipError(f"embedder {key!r}: {exc}") from exc


def encode_texts(name: str, texts: Sequence[str], *, seed: int = 0, progress: bool = True, **kw: Any) -> np.ndarray:
    """Embed a list of texts outside a run directory with embedder ``name``; ``lsa`` and ``static-vocab`` are
    first fitted on a seeded sample of ``texts`` itself (as the embed stage fits them on the corpus)."""
    emb = get_embedder(name, seed=seed, progress=progress, **kw)
    if isinstance(emb, FITTED_EMBEDDERS):
        pick = np.random.default_rng(seed).choice(len(texts), size=min(emb.sample_size, len(texts)), replace=False)
        emb.fit([texts[i] for i in np.sort(pick)])
    return emb.encode(texts)
