"""``clusterclip run``: every stage into one run directory."""

from __future__ import annotations

import argparse
from typing import Any

from clusterclip.cli.options import (
    add_cluster,
    add_common,
    add_inputs,
    add_plan,
    cluster_config,
    command,
    corpus_config,
    embed_config,
    engine_config,
    plan_configs,
)
from clusterclip.pipeline import DEFAULT_RUN_DIR, run_pipeline
from clusterclip.summary import format_summary


def add_run_parser(sub: Any) -> argparse.ArgumentParser:
    p = command(sub, "run", cmd_run, "every stage: corpus, embeddings, clusters, plans, summary",
                "Run the whole pipeline into a run directory; finished stages are skipped.",
                ("clusterclip run                               # the embedded default corpus -> ./clusterclip-run",
                 "clusterclip run data/*.jsonl.gz --out runs/web",
                 "clusterclip run data/*.parquet --out runs/web --engine ray",
                 "clusterclip run data.jsonl --out runs/web --strategies clusterclip,random --max-repeat 4"))
    add_inputs(p, default=DEFAULT_RUN_DIR)
    add_cluster(p)
    add_plan(p, multi=True)
    add_common(p)
    return p


def cmd_run(a: argparse.Namespace) -> int:
    strategies = [s.strip() for s in a.strategies.split(",") if s.strip()]
    summary = run_pipeline(a.inputs, a.out, corpus_config(a), embed_config(a), cluster_config(a),
                           plan_configs(a, strategies), force=a.force, progress=not a.quiet, engine=engine_config(a))
    print(format_summary(summary))
    return 0
