"""Settings of the embed stage (:class:`EmbedConfig`) and the command line that rebuilds it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from clusterclip.corpus import CorpusConfig, corpus_command
from clusterclip.embed.registry import DEFAULT_BATCH_SIZES, DEFAULT_EMBEDDER, DEFAULT_SHARD_SIZE, EMBEDDERS
from clusterclip.settings import Settings, at_least, command_flags, is_text, optional, setting


@dataclass(frozen=True)
class EmbedConfig(Settings):
    """Options of the embed stage; validated on construction. ``extra`` goes to the embedder's constructor."""

    embedder: str = setting(DEFAULT_EMBEDDER, choices=EMBEDDERS,
                            help="lsa: TF-IDF and truncated SVD fitted on a sample of the corpus, stored in the run "
                                 "(fast, best clusters on the benchmark corpora); "
                                 "static: model2vec model distilled from all-MiniLM-L6-v2 (fast); "
                                 "static-vocab: static distilled with the corpus' own words, stored in the run; "
                                 "minilm: all-MiniLM-L6-v2 transformer (~100x slower on CPU); "
                                 "hashing: no model, hashed word n-grams with a seeded projection")
    batch_size: int | None = setting(None, check=optional(at_least(1)),
                                     help="documents per encoder batch (default: the embedder's own: "
                                          + ", ".join(f"{n} {b}" for n, b in DEFAULT_BATCH_SIZES.items()) + ")")
    shard_size: int = setting(DEFAULT_SHARD_SIZE, check=at_least(1), help="embeddings per shard file")
    device: str = setting("cpu", check=is_text, help="torch device of the minilm encoder (cpu, cuda)")
    extra: dict[str, Any] = field(default_factory=dict)


def embed_command(inputs: Sequence[str | os.PathLike[str]], corpus: CorpusConfig, embed: EmbedConfig) -> list[str]:
    """The ``clusterclip embed`` command line that builds the corpus and embed stages with these settings."""
    names = ["embedder", "shard_size", *(("batch_size", "device") if embed.embedder == "minilm" else ())]
    return [*corpus_command(inputs, corpus), *command_flags(EmbedConfig, asdict(embed), names)]
