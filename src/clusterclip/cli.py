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
from clusterclip.add import READ_FIELDS, AddConfig
from clusterclip.cluster import ClusterConfig
from clusterclip.corpus import CORPUS_FIELDS, CorpusConfig, ReadOptions
from clusterclip.errors import ClusterClipError
from clusterclip.pipeline import DEFAULT_STRATEGIES, EmbedOptions
from clusterclip.plan import PLAN_FIELDS, STRATEGIES, PlanConfig, load_weights
from clusterclip.settings import add_arguments, error_message, from_args
from clusterclip.store import layout as A

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
  clusterclip plan runs/web --continue clusterclip-R4-docs-Bepoch-s0 --consumed 300000 --max-repeat 2
  clusterclip report runs/web
"""


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.help and "(default:" in action.help:
            return action.help
        return super()._get_help_string(action)



EMBED_FIELDS = ("embedder", "batch_size", "shard_size", "device")


def _add_common(p: argparse.ArgumentParser, force: bool = True) -> None:
    if force:
        p.add_argument("--force", action="store_true", help="re-run stages even when their outputs are up to date")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars or log messages")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def _add_corpus(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("corpus")
    g.add_argument("inputs", nargs="*", metavar="INPUT",
                   help="JSONL (.jsonl, .jsonl.gz, .jsonl.zst), Parquet, a folder of .txt files or a Hugging "
                        "Face dataset folder (save_to_disk); none: the embedded default corpus "
                        "(docstrings of the Python standard library)")
    add_arguments(g, CorpusConfig, CORPUS_FIELDS)


def _add_embed(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("embedding")
    add_arguments(g, EmbedOptions, EMBED_FIELDS)
    _add_engine(g)


def _add_engine(g: argparse._ArgumentGroup) -> None:
    add_arguments(g, EmbedOptions, ("engine", "ray_address"))


def _add_cluster(p: argparse.ArgumentParser, standalone: bool = False) -> None:
    g = p.add_argument_group("clustering")
    add_arguments(g, ClusterConfig)
    if standalone:
        _add_engine(g)


def _add_plan(p: argparse.ArgumentParser, multi: bool) -> None:
    g = p.add_argument_group("sampling plan")
    several = {"default": ",".join(DEFAULT_STRATEGIES), "choices": None,
               "help": f"comma-separated strategies to plan: {', '.join(STRATEGIES)}"}
    add_arguments(g, PlanConfig, PLAN_FIELDS[:5], overrides={"strategy": several} if multi else None)
    g.add_argument("--weights", default=None,
                   help="JSON {cluster: weight} or CSV cluster,weight file (strategy weights); 0 drops a cluster")
    add_arguments(g, PlanConfig, PLAN_FIELDS[5:])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="clusterclip", description=DESCRIPTION, formatter_class=_Formatter)
    parser.add_argument("--version", action="version", version=f"clusterclip {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    _add_stage_commands(sub)
    _add_output_commands(sub)

    from clusterclip.experiment.cli import add_experiment_parser

    add_experiment_parser(sub)
    return parser


def _command(sub: Any, name: str, func: Any, help: str, description: str, run_dir: str | None = None,
             ) -> argparse.ArgumentParser:
    """A sub-command running ``func``; ``run_dir`` is the help of its RUN_DIR argument, if it takes one."""
    p = sub.add_parser(name, help=help, description=description, formatter_class=_Formatter)
    if run_dir:
        p.add_argument("run_dir", metavar="RUN_DIR", help=run_dir)
    p.set_defaults(func=func)
    return p


def _add_stage_commands(sub: Any) -> None:
    p = _command(sub, "run", cmd_run, "every stage: corpus, embeddings, clusters, plans, summary",
                 "Run the whole pipeline into a run directory; finished stages are skipped.")
    _add_corpus(p)
    p.add_argument("--out", default="clusterclip-run", help="run directory")
    _add_embed(p)
    _add_cluster(p)
    _add_plan(p, multi=True)
    _add_common(p)

    p = _command(sub, "embed", cmd_embed, "read the corpus and embed every document",
                 "Corpus and embed stages: writes corpus/, tokens.npy and embeddings/.")
    _add_corpus(p)
    p.add_argument("--out", required=True, help="run directory")
    _add_embed(p)
    _add_common(p)

    p = _command(sub, "cluster", cmd_cluster, "spherical k-means over the embeddings",
                 "Fit centroids on a sample and assign every document: centroids.npy, labels.npy, scores.npy, "
                 "sizes.npy.", run_dir="run directory with embeddings")
    _add_cluster(p, standalone=True)
    p.add_argument("--refit", action="store_true",
                   help="fit new centroids over all documents (after `clusterclip add`; the default k follows "
                        "the new count); plans built on the old clusters become stale")
    _add_common(p)

    p = _command(sub, "add", cmd_add, "append new documents to a finished run",
                 "Append NEW_INPUT documents after the corpus: new corpus parts, embeddings of the new documents "
                 "only, assignment to the existing (frozen) centroids, and a drift report (drift.json) that "
                 "recommends `cluster --refit` when many new documents are far from every centroid. Killed, "
                 "re-run it to finish; re-run after it finished, it changes nothing.",
                 run_dir="finished run directory (corpus, embed and cluster stages)")
    p.add_argument("new_inputs", nargs="+", metavar="NEW_INPUT", help="files or folders to add (formats as for run)")
    g = p.add_argument_group("reader options (default: those the corpus stage recorded)")
    add_arguments(g, ReadOptions, READ_FIELDS, unset=True)
    add_arguments(p, AddConfig)
    _add_engine(p.add_argument_group("engine"))
    _add_common(p, force=False)

    p = _command(sub, "plan", cmd_plan, "build a sampling plan from the clusters",
                 "Write plans/<name>/plan.npy (int64 document indices in training order) and its statistics.",
                 run_dir="run directory with clusters")
    _add_plan(p, multi=False)
    g = p.add_argument_group("continuing a plan mid-training (docs/workflows.md)")
    g.add_argument("--continue", dest="continue_plan", metavar="PLAN", default=None,
                   help="plan name under plans/ to continue: plan the rest of the run under the options given "
                        "here, counting the parent's first --consumed draws against the cap; --budget is the "
                        "continuation's own length (default: what remains of the parent)")
    g.add_argument("--consumed", type=int, default=None, metavar="N",
                   help="positions of the --continue plan already trained on (e.g. step x global batch size)")
    p.add_argument("--json", action="store_true",
                   help="print the plan's path and statistics as JSON (default: a one-line summary; -q: nothing)")
    _add_common(p)


def _add_output_commands(sub: Any) -> None:
    p = _command(sub, "report", cmd_report, "HTML report with plots",
                 "Write RUN_DIR/report/report.html and its PNGs; prints the path.",
                 run_dir="run directory with clusters (and plans)")
    _add_common(p)

    from clusterclip.export import ExportConfig

    p = _command(sub, "export", cmd_export, "write the planned stream for a trainer (JSONL, Parquet, hf, litdata, "
                 "Megatron)", "Write the documents in plan order (repeats expanded) in a trainer's format; see "
                 "docs/export.md.", run_dir="run directory with at least one plan")
    p.add_argument("--plan", default=None, help="plan name under plans/ (default: the only plan)")
    p.add_argument("--out", required=True, help="output folder")
    add_arguments(p, ExportConfig, overrides={"append_eos": {"action": "store_true"}})
    _add_common(p)

    p = _command(sub, "status", cmd_status, "which stages of a run directory are finished",
                 "Which stages are finished, from their records.", run_dir="run directory")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--verify", action="store_true",
                   help="also check every artifact of every stage against the SHA-256 in its record (reads "
                        "every artifact; plain status reads only records); exit status 1 on a problem")
    p.set_defaults(quiet=False, verbose=False)


# ------------------------------------------------------------------------------------------ commands


def _corpus_config(a: argparse.Namespace) -> CorpusConfig:
    return from_args(CorpusConfig, a, CORPUS_FIELDS)


def _embed_options(a: argparse.Namespace) -> EmbedOptions:
    return from_args(EmbedOptions, a, (*EMBED_FIELDS, "engine", "ray_address"))


def _cluster_config(a: argparse.Namespace) -> ClusterConfig:
    return from_args(ClusterConfig, a)


def _plan_configs(a: argparse.Namespace, strategies: Sequence[str]) -> list[PlanConfig]:
    """One plan per strategy; ``random`` always takes the equal-rate order (it has no clusters to spread)."""
    weights = load_weights(a.weights) if a.weights else None
    return [from_args(PlanConfig, a, PLAN_FIELDS, strategy=s, weights=weights if s == "weights" else None,
                      order="equal-rate" if s == "random" else a.order) for s in strategies]


def cmd_run(a: argparse.Namespace) -> int:
    from clusterclip.pipeline import format_summary, run_pipeline

    strategies = [s.strip() for s in a.strategy.split(",") if s.strip()]
    summary = run_pipeline(a.inputs, a.out, _corpus_config(a), _embed_options(a), _cluster_config(a),
                           _plan_configs(a, strategies), force=a.force, progress=not a.quiet)
    print(format_summary(summary))
    return 0


def cmd_embed(a: argparse.Namespace) -> int:
    from clusterclip.pipeline import embed_corpus, engine_session
    from clusterclip.store import RunDir

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
    from clusterclip.store import RunDir

    run = RunDir(a.run_dir)
    with run.lock(), engine_session(a.engine, a.ray_address):
        rec = cluster_stage(run, _cluster_config(a), force=a.force, progress=not a.quiet, engine=a.engine,
                            refit=a.refit)
    print(f"{run.root}: k={rec['k']} clusters (sizes {rec['size_min']}..{rec['size_max']}), "
          f"mean cosine {rec['objective']:.4f}, trained on {rec['sample_size']:,} documents")
    return 0


def cmd_add(a: argparse.Namespace) -> int:
    from clusterclip.add import add_documents, format_drift
    from clusterclip.store import RunDir

    run = RunDir(a.run_dir)
    with run.lock():
        run.clean_temp_files()
        recorded = run.require(A.CORPUS_STAGE, verify=False)["config"]
        read = from_args(ReadOptions, a, READ_FIELDS, base=ReadOptions(**{f: recorded[f] for f in READ_FIELDS}))
        report = add_documents(run, a.new_inputs, read, from_args(AddConfig, a), progress=not a.quiet,
                               engine=a.engine)
    print(format_drift(report, run))
    return 0


def cmd_plan(a: argparse.Namespace) -> int:
    from clusterclip.plan import continuation, plan_stage
    from clusterclip.store import RunDir

    run = RunDir(a.run_dir)
    (cfg,) = _plan_configs(a, [a.strategy])
    if (a.continue_plan is None) != (a.consumed is None):
        raise ClusterClipError("--continue PLAN and --consumed N go together: continue PLAN after N positions")
    with run.lock():
        run.clean_temp_files()  # what a plan killed mid-write (e.g. disk full) left behind
        if a.continue_plan is None:
            rec = plan_stage(run, cfg, force=a.force)
        else:
            cfg, parent = continuation(run, cfg, a.continue_plan, a.consumed)
            rec = plan_stage(run, cfg, force=a.force, continues=parent)
    path = run.path(A.plan_path(rec["name"], A.PLAN_ORDER))
    if a.json:
        print(json.dumps({"plan": str(path), "name": rec["name"], "identity": rec.get("identity"),
                          "stats": rec.get("stats", {})}, indent=2, default=str))
    elif not a.quiet:
        from clusterclip.pipeline import format_summary

        stats = {k: v for k, v in rec.get("stats", {}).items() if v is not None}
        summary = format_summary({"run_dir": str(run.root), "plans": {rec["name"]: stats}})
        print(f"{summary.splitlines()[-1].removeprefix('plan:').strip()} ({path})")
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    from clusterclip.report import build_report

    print(build_report(a.run_dir, progress=not a.quiet))
    return 0


def cmd_export(a: argparse.Namespace) -> int:
    from clusterclip.export import ExportConfig, export_plan
    from clusterclip.store import RunDir

    written = export_plan(RunDir(a.run_dir), a.plan, a.out, from_args(ExportConfig, a))
    for path in written:
        print(path)
    return 0


def cmd_status(a: argparse.Namespace) -> int:
    from clusterclip.pipeline import format_audit, format_summary, summarize
    from clusterclip.store import RunDir

    run = RunDir(a.run_dir)
    if not run.root.is_dir():
        raise ClusterClipError(f"{run.root}: not a run directory")
    summary = summarize(run)
    audit = run.audit() if a.verify else None
    if a.json:
        print(json.dumps(summary if audit is None else {**summary, "verify": audit}, indent=2, default=str))
    else:
        print(format_summary(summary) if audit is None else f"{format_summary(summary)}\n{format_audit(audit)}")
    return 1 if audit and any(audit.values()) else 0


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
        print(f"clusterclip: error: {error_message(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("clusterclip: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
