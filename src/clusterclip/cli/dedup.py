"""``clusterclip dedup``: near-duplicate groups inside the clusters (SemDeDup) and MinHash LSH near-copies."""

from __future__ import annotations

import argparse
from typing import Any

from clusterclip.cli.options import add_common, add_engine, command, engine_config
from clusterclip.dedup.config import DedupConfig
from clusterclip.dedup.stage import dedup_stage
from clusterclip.settings import add_arguments, from_args
from clusterclip.store import RunDir

DESCRIPTION = (
    "Group near-duplicates: documents of one cluster whose embeddings have cosine >= 1 - eps (SemDeDup) and "
    "documents of one cluster whose word-shingle MinHash Jaccard estimate is >= --jaccard. Writes "
    "dedup/group.npy, dedup/kept.npy (the longest member of each group) and dedup/removed.parquet "
    "(removed -> kept). Changing only --eps or --jaccard reuses the stored pairwise work. With --engine ray the "
    "semantic pass runs the clusters as Ray tasks (same groups; cosines within 1e-6).")


def add_dedup_parser(sub: Any) -> argparse.ArgumentParser:
    p = command(sub, "dedup", cmd_dedup, "near-duplicate groups inside the clusters", DESCRIPTION,
                run_dir="run directory with clusters")
    g = p.add_argument_group("dedup")
    add_arguments(g, DedupConfig)
    add_engine(g)
    add_common(p)
    return p


def cmd_dedup(a: argparse.Namespace) -> int:
    run, engine = RunDir(a.run_dir), engine_config(a)
    with run.lock(), engine.session():
        rec = dedup_stage(run, from_args(DedupConfig, a), force=a.force, engine=engine.engine)
    print(f"{run.root}: {rec.groups:,} groups of {rec.documents:,} documents, {rec.removed:,} duplicates "
          f"({rec.removed_semantic:,} semantic, {rec.removed_lexical:,} lexical), largest group "
          f"{rec.largest_group}")
    return 0
