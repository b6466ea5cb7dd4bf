"""How the embed stage grows when ``clusterclip add`` appends documents: the new documents are embedded with
the recorded embedder into shards after the existing ones, and the record rewritten."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clusterclip.contract.corpus import CORPUS_STAGE, CorpusRecord
from clusterclip.contract.corpus_texts import Parts
from clusterclip.contract.embed import EMBED_STAGE, EmbedRecord, shards_confidence
from clusterclip.embed.load import run_embedder
from clusterclip.embed.stage import encode_shards, write_shard
from clusterclip.errors import ClusterClipError
from clusterclip.progress import progress_bar
from clusterclip.stages import grow_stage
from clusterclip.stages.growth import Growth
from clusterclip.store import RunDir
from clusterclip.store.lineage import REGROW


def embed_new(run: RunDir, base: EmbedRecord, new_parts: Sequence[str], n_new: int,
              progress: bool) -> list[dict[str, Any]]:
    """Embed the new documents (the corpus parts ``new_parts``) into shards after the existing ones, with the
    recorded embedder and part of conversations; returns the new shards' entries."""
    emb = run_embedder(run)
    if emb.config() != base.embedder_config:
        raise ClusterClipError(f"{run.root}: cannot rebuild the embed stage's embedder ({emb.name}) with the "
                               "recorded options; embed the whole corpus again instead of adding to it")
    first = len(base.shards)
    shards = []
    texts = Parts(base.part, CorpusRecord.require(run, verify=False).config.text_options())
    with progress_bar(f"add: embed ({emb.name})", "doc", n_new, progress) as bar:
        blocks = encode_shards(emb, [run.path(p) for p in new_parts], 0, base.shard_size, n_new, bar, texts)
        for i, (shard, conf) in enumerate(blocks):
            entry = write_shard(run, first + i, shard, conf)
            shards.append({k: entry[k] for k in ("file", "rows", "confidence")})
    return shards


def grow_embed_record(run: RunDir, growth: Growth) -> EmbedRecord:
    """Rewrite the embed record for the new shards, built from the grown corpus (its ``regrow`` lists the add's
    command)."""
    base, shards = growth.base[EMBED_STAGE], growth.shards
    assert isinstance(base, EmbedRecord)
    files = [f for s in shards for f in (s["file"], s["confidence"])]
    grown = [*base.shards, *shards]
    summary = shards_confidence(run, grown)
    return grow_stage(run, base, run.output_hash(CORPUS_STAGE), [*base.artifacts, *files],
                      0.0, dict(base.artifacts), (CORPUS_STAGE,), count=growth.count, shards=grown,
                      confidence=summary, **{REGROW: [*(base.regrow or []), list(growth.journal["command"])]})
