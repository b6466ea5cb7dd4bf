"""How ``clusterclip add`` grows the corpus and embed stages: new embedding shards after the existing ones,
and both records rewritten for the grown run (the cluster stage grows itself:
:func:`clusterclip.cluster.grow_clusters`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from clusterclip.add.new_docs import NewDocs, corpus_part_files
from clusterclip.corpus import ReadStats
from clusterclip.embed import encode_shards, run_embedder
from clusterclip.errors import ClusterClipError
from clusterclip.progress import progress_bar
from clusterclip.stages import grow_stage
from clusterclip.store import RunDir, config_hash, save_npy
from clusterclip.store import layout as A
from clusterclip.store.lineage import REGROW


def embed_new(run: RunDir, embed_rec: Mapping[str, Any], new_parts: Sequence[str], n_new: int,
              progress: bool) -> list[dict[str, Any]]:
    """Embed the new documents into shards after the existing ones, with the recorded embedder."""
    emb = run_embedder(run)
    if emb.config() != embed_rec["config"]["embedder"]:
        raise ClusterClipError(f"{run.root}: cannot rebuild the embed stage's embedder ({emb.name}) with the "
                               "recorded options; embed the whole corpus again instead of adding to it")
    shard_size = int(embed_rec["config"]["shard_size"])
    first = len(embed_rec["shards"])
    shards = []
    with progress_bar(f"add: embed ({emb.name})", "doc", n_new, progress) as bar:
        blocks = encode_shards(emb, [run.path(p) for p in new_parts], 0, shard_size, n_new, bar)
        for i, shard in enumerate(blocks):
            rel = A.embed_shard(first + i)
            save_npy(run.path(rel), shard)
            shards.append({"file": rel, "rows": len(shard)})
    return shards


def grow_corpus_record(run: RunDir, journal: Mapping[str, Any], new: NewDocs, seconds: float) -> dict[str, Any]:
    """Rewrite the corpus record for the new parts and tokens; the add is listed in ``additions`` (and its
    inputs and reader options in the config's ``added``)."""
    corpus, n_old = journal["base"]["corpus"], int(journal["base"]["corpus"]["count"])
    entry = {"key": journal["key"], "inputs": journal["inputs"], "input_hashes": journal["input_hashes"],
             "command": journal["command"], "cluster_command": journal["base"]["cluster"].get("command"),
             "first_index": n_old, "count": len(new.ids), "parts": new.parts,
             "skipped": new.stats.skipped, "duplicates_skipped": new.duplicates}
    groups = Counter(corpus.get("groups", {})) + new.groups
    config = {**corpus["config"], "added": [*corpus["config"].get("added", []),
                                            {"inputs": journal["inputs"], "read": journal["read"]}]}
    known = {rel: meta for rel, meta in corpus["artifacts"].items() if rel != A.TOKENS}
    return grow_stage(
        run, corpus, config_hash({"base": corpus["inputs_hash"], "added": journal["key"]}),
        [*corpus_part_files(corpus), *new.parts, A.TOKENS], seconds, known, (), config=config,
        count=n_old + len(new.ids), tokens=int(corpus["tokens"]) + int(new.tokens.sum()),
        skipped=corpus["skipped"] + new.stats.skipped,
        skipped_examples=(corpus.get("skipped_examples", []) + new.stats.examples)[:ReadStats.max_examples],
        groups=dict(sorted(groups.items(), key=lambda kv: -kv[1])),
        inputs=[*corpus.get("inputs", []), *journal["fingerprint"]],
        additions=[*corpus.get("additions", []), entry], regrow=[*corpus.get(REGROW, []), journal["command"]])


def grow_embed_record(run: RunDir, embed_rec: Mapping[str, Any], count: int,
                      shards: Sequence[dict[str, Any]], command: Sequence[str]) -> dict[str, Any]:
    """Rewrite the embed record for the new shards, built from the grown corpus (``command``: the add's)."""
    return grow_stage(run, embed_rec, run.output_hash(A.CORPUS_STAGE),
                      [*embed_rec["artifacts"], *(s["file"] for s in shards)], 0.0, dict(embed_rec["artifacts"]),
                      (A.CORPUS_STAGE,), count=count, shards=[*embed_rec["shards"], *shards],
                      regrow=[*embed_rec.get(REGROW, []), list(command)])
