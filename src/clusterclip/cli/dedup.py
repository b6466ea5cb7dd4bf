"""``clusterclip dedup``: near-duplicate groups inside the clusters (SemDeDup) and MinHash LSH near-copies."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from clusterclip.cli.options import add_common, add_engine, command, engine_config
from clusterclip.contract.corpus import CorpusIndex
from clusterclip.contract.dedup import DedupRecord
from clusterclip.dedup.config import DedupConfig
from clusterclip.dedup.stage import dedup_stage
from clusterclip.settings import add_arguments, from_args
from clusterclip.stages import writing
from clusterclip.store import RunDir

SNIPPET = 90
DESCRIPTION = (
    "Group near-duplicates: documents of one cluster whose embeddings have cosine >= 1 - eps (SemDeDup), "
    "confirmed by a word-set MinHash Jaccard >= --confirm, and documents of one cluster whose word-shingle "
    "MinHash Jaccard estimate is >= --jaccard. Documents with fewer than --min-shingles distinct shingles join "
    "only equal texts, and every removed document must have word-set Jaccard >= --verify to its group's kept "
    "document (else it is split off), so groups do not chain. Writes dedup/group.npy, dedup/kept.npy (the "
    "longest member of each group) and dedup/removed.parquet (removed -> kept), and prints the largest groups "
    "with their least similar member. Changing only --eps, --jaccard, --confirm, --verify or --min-shingles "
    "reuses the stored pairwise work. With --engine ray the semantic pass runs the clusters as Ray tasks (same "
    "groups; cosines within 1e-6).")


def add_dedup_parser(sub: Any) -> argparse.ArgumentParser:
    p = command(sub, "dedup", cmd_dedup, "near-duplicate groups inside the clusters", DESCRIPTION,
                ("clusterclip dedup runs/web",
                 "clusterclip dedup runs/web --eps 0.03 --jaccard 0.8",
                 "clusterclip plan runs/web --duplicates group-cap   # then plan over the groups"),
                run_dir="run directory with clusters")
    g = p.add_argument_group("dedup")
    add_arguments(g, DedupConfig)
    add_engine(g)
    add_common(p)
    return p


def cmd_dedup(a: argparse.Namespace) -> int:
    run, engine = RunDir(a.run_dir), engine_config(a)
    with writing(run), engine.session():
        rec = dedup_stage(run, from_args(DedupConfig, a), force=a.force, engine=engine.engine)
    print(f"{run.root}: {rec.groups:,} groups of {rec.documents:,} documents, {rec.removed:,} duplicates "
          f"({rec.removed_semantic:,} semantic, {rec.removed_lexical:,} lexical), largest group "
          f"{rec.largest_group}")
    for line in checked_lines(run, rec):
        print(line)
    return 0


def checked_lines(run: RunDir, rec: DedupRecord) -> list[str]:
    """What the checks refused, and the largest groups, each as its kept document and least similar member
    (ids, word-set Jaccard, cosine, the start of each text): a bad merge shows at a glance."""
    if rec.semantic_edges is None or rec.largest_groups is None:
        return []  # a record of an older version
    lines = [f"  semantic edges within eps: {rec.semantic_edges:,}, {rec.unconfirmed_semantic:,} refused (word-set "
             f"Jaccard < {rec.config.confirm} or too few words); lexical edges refused (too few words): "
             f"{rec.refused_lexical:,}; members split off by the star check: {rec.split_off:,}"]
    if not rec.largest_groups:
        return lines
    docs = np.unique([doc for g in rec.largest_groups for doc in (g["kept"], g["member"])]).astype(np.int64)
    texts = dict(zip(docs.tolist(), CorpusIndex(run).gather(docs).column("text").to_pylist(), strict=True))
    lines.append("  largest groups (kept document, then the member least like it):")
    for g in rec.largest_groups:
        lines += [f"    {g['size']:,} documents, mean cosine to the kept one {g['mean_cosine']:.3f}",
                  f"      kept   #{g['kept']} {g['kept_id']}: {snippet(texts[g['kept']])}",
                  f"      member #{g['member']} {g['member_id']} (word-set Jaccard {g['jaccard']:.2f}, cosine "
                  f"{g['cosine']:.3f}): {snippet(texts[g['member']])}"]
    return lines


def snippet(text: str, width: int = SNIPPET) -> str:
    """The start of ``text`` on one line (whitespace runs as one space), quoted."""
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= width else flat[:width].rstrip() + "…")
