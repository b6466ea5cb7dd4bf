"""``clusterclip embed``: the corpus and embed stages."""

from __future__ import annotations

import argparse
from typing import Any

from clusterclip.cli.options import add_common, add_inputs, command, corpus_config, embed_config, engine_config
from clusterclip.pipeline import embed_corpus
from clusterclip.stages import writing
from clusterclip.store import RunDir


def add_embed_parser(sub: Any) -> argparse.ArgumentParser:
    p = command(sub, "embed", cmd_embed, "read the corpus and embed every document",
                "Corpus and embed stages: writes corpus/, tokens.npy and embeddings/.",
                ("clusterclip embed data/*.jsonl.gz --out runs/web",
                 "clusterclip embed data.parquet --out runs/web --text-field content --embedder minilm"))
    add_inputs(p, required=True)
    add_common(p)
    return p


def cmd_embed(a: argparse.Namespace) -> int:
    engine = engine_config(a)
    with writing(RunDir(a.out)) as run, engine.session():
        rec = embed_corpus(run, a.inputs, corpus_config(a), embed_config(a), force=a.force, progress=not a.quiet,
                           engine=engine.engine)
    print(f"{run.root}: {rec.count:,} embeddings of dim {rec.dim} ({rec.embedder_config})")
    return 0
