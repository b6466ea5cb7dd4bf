"""Settings of the embed stage (:class:`EmbedConfig`), their choices taken from the embedder registry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clusterclip.contract.record_kinds import PARTS
from clusterclip.embed.registry import DEFAULT_EMBEDDER, DEFAULT_SHARD_SIZE, EMBEDDERS, default_batch_sizes
from clusterclip.settings import Settings, at_least, is_text, optional, setting


@dataclass(frozen=True)
class EmbedConfig(Settings):
    """Options of the embed stage; validated on construction. ``extra`` goes to the embedder's constructor."""

    embedder: str = setting(DEFAULT_EMBEDDER, choices=tuple(EMBEDDERS),
                            help="; ".join(f"{name}: {cls.SUMMARY}" for name, cls in EMBEDDERS.items()))
    batch_size: int | None = setting(None, check=optional(at_least(1)),
                                     help="documents per encoder batch (default: the embedder's own: "
                                          + ", ".join(f"{n} {b}" for n, b in default_batch_sizes().items()) + ")")
    shard_size: int = setting(DEFAULT_SHARD_SIZE, check=at_least(1), flag="--embed-shard-size",
                              help="embeddings per shard file (export's --shard-size is rows per export shard)")
    device: str = setting("cpu", check=is_text, help="torch device of the minilm encoder (cpu, cuda)")
    embed_part: str = setting("all", choices=PARTS,
                              help="what of a conversation record is embedded: every turn (as the ClusterClip "
                                   "authors embed prompt and output), the prompt (system and user turns), the "
                                   "response (assistant turns) or the last user turn; a plain-text document, or a "
                                   "conversation without that part, is embedded whole")
    extra: dict[str, Any] = field(default_factory=dict)

    def command_fields(self) -> list[str]:
        """The settings a rebuild command names: the embedder, the shard size, the part embedded, and what
        else changes this embedder's vectors (its ``COMMAND_FLAGS``)."""
        return ["embedder", "shard_size", "embed_part", *EMBEDDERS[self.embedder].COMMAND_FLAGS]
