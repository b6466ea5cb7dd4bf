"""``clusterclip add`` on minipile: drift share of a same-distribution split and of a held-out domain, and
the cost of an add against rebuilding the grown run from scratch.

    .venv/bin/python benchmarks/add/bench_add.py --corpus ../shared/data/minipile.jsonl.gz

Two scenarios, each in a temporary folder (``--tmp``), with ``--embedder`` (default: the default embedder):

* ``random``: a seeded random ``--new-share`` of the documents is held out; the run is built (corpus,
  embed, cluster) from the rest, then the held-out documents are added. New documents like the old ones
  should give a drift share near 5 % (the definition's rate on the old documents themselves).
* ``domain``: the documents of ``--domains`` are held out and added to a run built from the others.
* ``more`` (with ``--more``): a seeded half of the documents of ``--domains`` is held out and added to a run that
  holds the other half: more of known topics (the truth is 0 % new), a change of mixture only.

For ``random`` it also times the add against corpus + embed + cluster over all documents (the same
inputs read in one go), measured side by side in this process, and reports the ratio.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from clusterclip.add.workflow import add_documents
from clusterclip.cluster.config import ClusterConfig
from clusterclip.cluster.stage import cluster_stage
from clusterclip.corpus.config import CorpusConfig
from clusterclip.corpus.stage import corpus_stage
from clusterclip.embed.config import EmbedConfig
from clusterclip.embed.registry import DEFAULT_EMBEDDER
from clusterclip.embed.stage import embed_stage
from clusterclip.store import RunDir


def split(corpus: Path, out: Path, held_out: Callable[[int, dict], bool]) -> tuple[Path, Path]:
    """Write the corpus' lines into ``old.jsonl`` and ``new.jsonl`` by ``held_out(line_no, record)``."""
    old, new = out / "old.jsonl", out / "new.jsonl"
    opener = gzip.open if corpus.suffix == ".gz" else open
    with opener(corpus, "rt") as src, open(old, "w") as fo, open(new, "w") as fn:
        for i, line in enumerate(src):
            (fn if held_out(i, json.loads(line)) else fo).write(line)
    return old, new


def build(run: RunDir, inputs: list[Path], k: int, embedder: str) -> float:
    t0 = time.perf_counter()
    with run.lock():
        corpus_stage(run, inputs, CorpusConfig(id_field="id"), progress=False)
        embed_stage(run, EmbedConfig(embedder=embedder), progress=False)
        cluster_stage(run, ClusterConfig(k=k), progress=False)
    return time.perf_counter() - t0


def scenario(name: str, old: Path, new: Path, root: Path, k: int, rebuild: bool, embedder: str) -> dict:
    run = RunDir(root / name)
    build(run, [old], k, embedder)
    t0 = time.perf_counter()
    with run.lock():
        report = add_documents(run, [new], progress=False)
    seconds = time.perf_counter() - t0
    out = {"scenario": name, "embedder": embedder, "before": report["documents_before"],
           "added": report["documents_added"], "similarity_cut": report["similarity_cut"],
           "below_cut": report["below_cut"], "coverage_cut": report.get("coverage_cut"),
           "below_coverage_cut": report.get("below_coverage_cut"), "neighbour_cut": report.get("neighbour_cut"),
           "below_neighbour_cut": report.get("below_neighbour_cut"), "neighbour_level": report.get("neighbour_level"),
           "cluster_test_flagged": report.get("cluster_test_flagged"), "drift_share": report["drift_share"],
           "cluster_shift": report.get("cluster_shift"), "cluster_shift_chance": report.get("cluster_shift_chance"),
           "recommend_refit": report["recommend_refit"], "add_seconds": round(seconds, 2),
           "max_growth": max(report["cluster_growth"])}
    if rebuild:
        whole = build(RunDir(root / f"{name}-rebuilt"), [old, new], k, embedder)
        out.update(rebuild_seconds=round(whole, 2), add_over_rebuild=round(seconds / whole, 3))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="../shared/data/minipile.jsonl.gz")
    ap.add_argument("--new-share", type=float, default=0.2)
    ap.add_argument("--domains", default="python-docs,hacker-jargon")
    ap.add_argument("--k", type=int, default=50)
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--embedder", default=DEFAULT_EMBEDDER)
    ap.add_argument("--no-rebuild", action="store_true", help="skip timing the add against a rebuild")
    ap.add_argument("--more", action="store_true", help="also add back a seeded half of --domains' documents")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-add-", dir=args.tmp))
    try:
        rng = np.random.default_rng(0)
        draw = rng.random(10_000_000)
        a = root / "random"
        a.mkdir()
        old, new = split(Path(args.corpus), a, lambda i, r: draw[i] < args.new_share)
        print(json.dumps(scenario("random", old, new, a, args.k, not args.no_rebuild, args.embedder)))
        b = root / "domain"
        b.mkdir()
        domains = set(args.domains.split(","))
        old, new = split(Path(args.corpus), b, lambda i, r: r.get("domain") in domains)
        print(json.dumps(scenario(f"domain:{args.domains}", old, new, b, args.k, False, args.embedder)))
        if args.more:
            c = root / "more"
            c.mkdir()
            old, new = split(Path(args.corpus), c, lambda i, r: r.get("domain") in domains and draw[i] < 0.5)
            print(json.dumps(scenario(f"more:{args.domains}", old, new, c, args.k, False, args.embedder)))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
