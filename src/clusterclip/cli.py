"""``clusterclip`` command line: one thin subcommand per stage; the logic lives in the modules."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from clusterclip import __version__
from clusterclip.errors import ClusterClipError

log = logging.getLogger("clusterclip")

DESCRIPTION = """\
Balanced data sampling for language-model training (ClusterClip Sampling, arXiv 2402.14526):
embed every document, cluster the embeddings with spherical k-means, and plan a training order in
which every cluster is sampled about equally often while no document repeats more than --max-repeat
times. Every stage writes its artifacts into a run directory (see docs/run-directory.md).

examples:
  clusterclip run                                   # the embedded default corpus (stdlib docstrings)
  clusterclip run data/*.jsonl.gz --out runs/web
  clusterclip embed data.parquet --out runs/web --embedder minilm
  clusterclip cluster runs/web --k 500
  clusterclip plan runs/web --strategy clusterclip --max-repeat 4 --budget 2000000 --budget-unit tokens
  clusterclip plan runs/web --strategy clusterclip --order spread
  clusterclip report runs/web
"""


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    pass


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true", help="re-run stages even when their outputs are up to date")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars or log messages")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def _add_corpus(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("corpus")
    g.add_argument("inputs", nargs="*", metavar="INPUT",
                   help="JSONL (.jsonl, .jsonl.gz, .jsonl.zst), Parquet, a folder of .txt files or a Hugging "
                        "Face dataset folder (save_to_disk); none: the embedded default corpus "
                        "(docstrings of the Python standard library)")
    g.add_argument("--text-field", default="text", help="field or column holding the document text")
    g.add_argument("--id-field", default=None,
                   help="field holding a unique document id (default: FILE:LINE of each record)")
    g.add_argument("--group-field", default="domain",
                   help="optional ground-truth field kept for reports and experiments (never used to cluster)")
    g.add_argument("--split", default="train", help="split to read from a Hugging Face DatasetDict")
    g.add_argument("--on-bad-record", choices=("error", "skip"), default="error",
                   help="stop at the first bad record, or skip bad records and count them")
    g.add_argument("--tokenizer", default=None,
                   help="Hugging Face tokenizer name or path for token counts (default: a word/punctuation "
                        "regex count)")


def _add_embed(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("embedding")
    g.add_argument("--embedder", choices=("static", "minilm", "hashing"), default="static",
                   help="static: model2vec model distilled from all-MiniLM-L6-v2 (fast, the default); minilm: "
                        "all-MiniLM-L6-v2 transformer (best quality, ~100x slower on CPU); hashing: no model, "
                        "hashed word n-grams with a seeded projection")
    g.add_argument("--batch-size", type=int, default=64, help="documents per encoder batch")
    g.add_argument("--shard-size", type=int, default=65_536, help="embeddings per shard file")
    g.add_argument("--device", default="cpu", help="torch device of the minilm encoder (cpu, cuda)")
    _add_engine(g)


def _add_engine(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="where embedding and cluster assignment run: this process, or Ray Data actors "
                        "(same results)")
    g.add_argument("--ray-address", default=None,
                   help="address of an existing Ray cluster (default: start a local Ray instance)")


def _add_cluster(p: argparse.ArgumentParser, standalone: bool = False) -> None:
    g = p.add_argument_group("clustering")
    g.add_argument("--k", type=int, default=None,
                   help="number of clusters (default: sqrt(N/2) clipped to [2, 10000])")
    g.add_argument("--cluster-seed", type=int, default=0, help="k-means seed")
    g.add_argument("--niter", type=int, default=25, help="k-means iterations")
    g.add_argument("--nredo", type=int, default=1, help="k-means restarts; the best objective is kept")
    g.add_argument("--points-per-centroid", type=int, default=256,
                   help="training sample size per centroid (sample = k x this, at most N)")
    g.add_argument("--init", choices=("kmeans++", "random", "afkmc2"), default="kmeans++",
                   help="centroid seeding: greedy k-means++ (robust), or faiss' random or AFK-MC2 seeding")
    if standalone:
        _add_engine(g)


def _add_plan(p: argparse.ArgumentParser, multi: bool) -> None:
    g = p.add_argument_group("sampling plan")
    if multi:
        g.add_argument("--strategy", default="clusterclip,uniform,random",
                       help="comma-separated strategies to plan: clusterclip, uniform, random, temperature, "
                            "weights")
    else:
        g.add_argument("--strategy", default="clusterclip",
                       choices=("clusterclip", "uniform", "random", "temperature", "weights"),
                       help="clusterclip: balanced + repetition cap; uniform: balanced; random: epochs of "
                            "permutations; temperature: cluster weights n_c**tau; weights: --weights file")
    g.add_argument("--budget", type=int, default=None,
                   help="draws (docs) or tokens to plan (default: one epoch: N documents or all tokens)")
    g.add_argument("--budget-unit", choices=("docs", "tokens"), default="docs", help="unit of --budget")
    g.add_argument("--max-repeat", type=int, default=None,
                   help="cap on how often one document may appear (default: 4 for clusterclip, none otherwise)")
    g.add_argument("--tau", type=float, default=0.5, help="temperature: cluster weight n_c**tau")
    g.add_argument("--weights", default=None,
                   help="JSON {cluster: weight} or CSV cluster,weight file (strategy weights); 0 drops a cluster")
    g.add_argument("--order", choices=("equal-rate", "spread"), default="equal-rate",
                   help="equal-rate: the paper's schedule, balanced first, clipped clusters drop out as they run "
                        "out; spread: the same draws with each cluster's spread evenly over the whole run "
                        "(cluster strategies only; random ignores it)")
    g.add_argument("--seed", type=int, default=0, help="plan seed")
    g.add_argument("--window", type=int, default=None,
                   help="window (in draws) of the mixture statistics (default: budget/100)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="clusterclip", description=DESCRIPTION, formatter_class=_Formatter)
    parser.add_argument("--version", action="version", version=f"clusterclip {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("run", help="every stage: corpus, embeddings, clusters, plans, summary",
                       description="Run the whole pipeline into a run directory; finished stages are skipped.",
                       formatter_class=_Formatter)
    _add_corpus(p)
    p.add_argument("--out", default="clusterclip-run", help="run directory")
    _add_embed(p)
    _add_cluster(p)
    _add_plan(p, multi=True)
    _add_common(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("embed", help="read the corpus and embed every document",
                       description="Corpus and embed stages: writes corpus/, tokens.npy and embeddings/.",
                       formatter_class=_Formatter)
    _add_corpus(p)
    p.add_argument("--out", required=True, help="run directory")
    _add_embed(p)
    _add_common(p)
    p.set_defaults(func=cmd_embed)

    p = sub.add_parser("cluster", help="spherical k-means over the embeddings",
                       description="Fit centroids on a sample and assign every document: centroids.npy, "
                                   "labels.npy, scores.npy, sizes.npy.", formatter_class=_Formatter)
    p.add_argument("run_dir", metavar="RUN_DIR", help="run directory with embeddings")
    _add_cluster(p, standalone=True)
    _add_common(p)
    p.set_defaults(func=cmd_cluster)

    p = sub.add_parser("plan", help="build a sampling plan from the clusters",
                       description="Write plans/<name>/plan.npy (int64 document indices in training order) "
                                   "and its statistics.", formatter_class=_Formatter)
    p.add_argument("run_dir", metavar="RUN_DIR", help="run directory with clusters")
    _add_plan(p, multi=False)
    _add_common(p)
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("report", help="HTML report with plots", formatter_class=_Formatter,
                       description="Write RUN_DIR/report/report.html and its PNGs; prints the path.")
    p.add_argument("run_dir", metavar="RUN_DIR", help="run directory with clusters (and plans)")
    _add_common(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("export", help="write the planned stream as JSONL or Parquet shards",
                       formatter_class=_Formatter,
                       description="Write the documents in plan order (repeats expanded) as shards.")
    p.add_argument("run_dir", metavar="RUN_DIR", help="run directory with at least one plan")
    p.add_argument("--plan", default=None, help="plan name under plans/ (default: the only plan)")
    p.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl", help="shard format")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--shard-size", type=int, default=100_000, help="documents per shard")
    p.add_argument("--memory-mb", type=int, default=4096,
                   help="corpus text held at once; a larger corpus is read once per window of the plan")
    _add_common(p)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("status", help="which stages of a run directory are finished",
                       formatter_class=_Formatter)
    p.add_argument("run_dir", metavar="RUN_DIR", help="run directory")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_status, quiet=False, verbose=False)

    from clusterclip.experiment.cli import add_experiment_parser

    add_experiment_parser(sub)
    return parser


# ------------------------------------------------------------------------------------------ commands


def _corpus_config(a: argparse.Namespace):
    from clusterclip.corpus import CorpusConfig

    return CorpusConfig(text_field=a.text_field, id_field=a.id_field, group_field=a.group_field,
                        on_bad_record=a.on_bad_record, split=a.split, tokenizer=a.tokenizer)


def _embed_options(a: argparse.Namespace):
    from clusterclip.pipeline import EmbedOptions

    if a.batch_size < 1 or a.shard_size < 1:
        raise ClusterClipError("--batch-size and --shard-size must be at least 1")
    return EmbedOptions(embedder=a.embedder, batch_size=a.batch_size, shard_size=a.shard_size, device=a.device,
                        engine=a.engine)


def _cluster_config(a: argparse.Namespace):
    from clusterclip.cluster import ClusterConfig

    return ClusterConfig(k=a.k, seed=a.cluster_seed, niter=a.niter, nredo=a.nredo,
                         points_per_centroid=a.points_per_centroid, init=a.init)


def _plan_configs(a: argparse.Namespace, strategies: Sequence[str]):
    from clusterclip.sampling import PlanConfig, load_weights

    weights = load_weights(a.weights) if a.weights else None
    out = []
    for s in strategies:
        if s == "weights" and weights is None:
            raise ClusterClipError("strategy 'weights' needs --weights FILE")
        out.append(PlanConfig(strategy=s, budget=a.budget, budget_unit=a.budget_unit, max_repeat=a.max_repeat,
                              tau=a.tau, weights=weights if s == "weights" else None, seed=a.seed,
                              window=a.window, order="equal-rate" if s == "random" else a.order))
    return out


def cmd_run(a: argparse.Namespace) -> int:
    from clusterclip.pipeline import format_summary, run_pipeline

    strategies = [s.strip() for s in a.strategy.split(",") if s.strip()]
    summary = run_pipeline(a.inputs, a.out, _corpus_config(a), _embed_options(a), _cluster_config(a),
                           _plan_configs(a, strategies), force=a.force, progress=not a.quiet,
                           ray_address=a.ray_address)
    print(format_summary(summary))
    return 0


def cmd_embed(a: argparse.Namespace) -> int:
    from clusterclip.pipeline import embed_corpus, engine_session
    from clusterclip.rundir import RunDir

    run = RunDir(a.out)
    with run.lock(), engine_session(a.engine, a.ray_address):
        run.clean_temp_files()
        rec = embed_corpus(run, a.inputs, _corpus_config(a), _embed_options(a), force=a.force,
                           progress=not a.quiet)
    print(f"{run.root}: {rec['count']:,} embeddings of dim {rec['dim']} ({rec['config']['embedder']})")
    return 0


def cmd_cluster(a: argparse.Namespace) -> int:
    from clusterclip.cluster import cluster_stage
    from clusterclip.pipeline import engine_session
    from clusterclip.rundir import RunDir

    run = RunDir(a.run_dir)
    with run.lock(), engine_session(a.engine, a.ray_address):
        rec = cluster_stage(run, _cluster_config(a), force=a.force, progress=not a.quiet, engine=a.engine)
    print(f"{run.root}: k={rec['k']} clusters (sizes {rec['size_min']}..{rec['size_max']}), "
          f"mean cosine {rec['objective']:.4f}, trained on {rec['sample_size']:,} documents")
    return 0


def cmd_plan(a: argparse.Namespace) -> int:
    from clusterclip.rundir import RunDir
    from clusterclip.sampling import plan_stage

    run = RunDir(a.run_dir)
    (cfg,) = _plan_configs(a, [a.strategy])
    with run.lock():
        rec = plan_stage(run, cfg, force=a.force)
    print(f"{run.root / 'plans' / cfg.name() / 'plan.npy'}")
    print(json.dumps(rec.get("stats", {}), indent=2, default=str))
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    from clusterclip.report import build_report

    print(build_report(a.run_dir, progress=not a.quiet))
    return 0


def cmd_export(a: argparse.Namespace) -> int:
    from clusterclip.export import export_plan
    from clusterclip.rundir import RunDir

    written = export_plan(RunDir(a.run_dir), a.plan, a.out, fmt=a.format, shard_size=a.shard_size,
                          memory_mb=a.memory_mb)
    for path in written:
        print(path)
    return 0


def cmd_status(a: argparse.Namespace) -> int:
    from clusterclip.pipeline import format_summary, summarize
    from clusterclip.rundir import RunDir

    run = RunDir(a.run_dir)
    if not run.root.is_dir():
        raise ClusterClipError(f"{run.root}: not a run directory")
    summary = summarize(run)
    print(json.dumps(summary, indent=2, default=str) if a.json else format_summary(summary))
    return 0


def _setup_logging(quiet: bool, verbose: bool) -> None:
    level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    logging.basicConfig(level=level, format="%(levelname)s %(message)s", stream=sys.stderr)
    logging.getLogger("clusterclip").setLevel(level)
    for noisy in ("sentence_transformers", "transformers", "faiss", "urllib3", "filelock", "ray"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse, run, and turn user errors into one-line messages (exit status 2)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args: Any = build_parser().parse_args(argv)
    _setup_logging(args.quiet, args.verbose)
    try:
        return int(args.func(args) or 0)
    except ClusterClipError as exc:
        print(f"clusterclip: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("clusterclip: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
