"""The ``clusterclip`` parser (one sub-command per module of this package) and the entry point: logging,
and user errors as one-line messages."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from clusterclip import __version__
from clusterclip.cli.add import add_add_parser
from clusterclip.cli.cluster import add_cluster_parser
from clusterclip.cli.dedup import add_dedup_parser
from clusterclip.cli.embed import add_embed_parser
from clusterclip.cli.experiment import add_experiment_parser
from clusterclip.cli.export import add_export_parser
from clusterclip.cli.options import Formatter
from clusterclip.cli.plan import add_plan_parser
from clusterclip.cli.report import add_report_parser
from clusterclip.cli.run import add_run_parser
from clusterclip.cli.status import add_status_parser
from clusterclip.cli.tune import add_tune_parser
from clusterclip.errors import DISK_FULL_ERRNOS, ClusterClipError, DiskFullError, missing_extra
from clusterclip.settings import error_message
from clusterclip.store.replica import display

DESCRIPTION = """\
Balanced data sampling for language-model training (ClusterClip Sampling, arXiv 2402.14526):
embed every document, cluster the embeddings with spherical k-means, and plan a training order in
which every cluster is sampled about equally often while no document repeats more than --max-repeat
times. Every stage writes its artifacts into a run directory (see docs/run-directory.md).
"""
GRAMMAR = """\
command-line grammar (every command; `clusterclip COMMAND --help` has its options and examples):
  * The commands that create a run from INPUT files (run, embed, experiment, tune) take the
    inputs as positional arguments and the run directory as --out RUN_DIR; every other command
    takes RUN_DIR as its first positional argument. --out always names a run directory: export
    writes to --dest DIR.
  * An option means the same in every command: one that takes a comma-separated list (its help
    says so) takes it everywhere, and the list form of a single-value option has a plural name
    (run --strategies for plan's --strategy; experiment --max-repeats, --duplicate-modes).
  * Former spellings (export --out, run --strategy, experiment --max-repeat and --duplicates,
    run/embed --shard-size for --embed-shard-size) still work and print a one-line deprecation
    note on stderr.
"""
EXAMPLES = """\
examples:
  clusterclip run                                # the embedded default corpus (stdlib docstrings)
  clusterclip run data/*.jsonl.gz --out runs/web
  clusterclip embed data.parquet --out runs/web --embedder minilm
  clusterclip cluster runs/web --k 500
  clusterclip plan runs/web --max-repeat 4 --budget 2000000 --budget-unit tokens
  clusterclip plan runs/web --strategy clusterclip --order spread
  clusterclip plan runs/web --continue PLAN --consumed 3000 --max-repeat 2  # PLAN: under plans/
  clusterclip report runs/web
  clusterclip export runs/web --plan clusterclip-R4-tokens-B2epochs-s0 --format parquet --dest out/
"""
COMMANDS = (add_run_parser, add_embed_parser, add_cluster_parser, add_dedup_parser, add_add_parser, add_plan_parser,
            add_report_parser, add_export_parser, add_status_parser, add_experiment_parser, add_tune_parser)
"""Each adds one sub-command, in the order ``clusterclip --help`` lists them."""
NOISY = ("sentence_transformers", "transformers", "faiss", "urllib3", "filelock", "ray", "botocore", "aiobotocore",
         "s3fs", "fsspec")


def build_parser() -> argparse.ArgumentParser:
    """The ``clusterclip`` parser with every sub-command."""
    parser = argparse.ArgumentParser(prog="clusterclip", description=DESCRIPTION, epilog=f"{GRAMMAR}\n{EXAMPLES}",
                                     formatter_class=Formatter)
    parser.add_argument("--version", action="version", version=f"clusterclip {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for add in COMMANDS:
        add(sub)
    return parser


class Urls:
    """A text stream that writes every path of a working copy of object storage as its URL (what the user gave):
    the printed output of a command on a run directory in a bucket names the bucket."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(display(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


class UrlFilter(logging.Filter):
    """Log lines with working-copy paths written as their URLs (:class:`Urls`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "clusterclip-remote-" in message:
            record.msg, record.args = display(message), ()
        return True


def setup_logging(quiet: bool, verbose: bool) -> None:
    """Log messages on stderr: warnings only with ``quiet``, debug with ``verbose``, else info."""
    level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    logging.basicConfig(level=level, format="%(levelname)s %(message)s", stream=sys.stderr)
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, UrlFilter) for f in handler.filters):
            handler.addFilter(UrlFilter())
    logging.getLogger("clusterclip").setLevel(level)
    for noisy in NOISY:
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse, run, and turn user errors into one-line messages (exit status 2)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args: Any = build_parser().parse_args(argv)
    # Hugging Face tokenizers use every core unless told not to, and a process that forks after using them
    # (DataLoader workers, process pools) must tell them; `export` tokenizes in one process that never forks.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true" if args.command == "export" else "false")
    setup_logging(args.quiet, args.verbose)
    stdout, sys.stdout = sys.stdout, Urls(sys.stdout)
    try:
        return int(args.func(args) or 0)
    except ClusterClipError as exc:
        print(f"clusterclip: error: {display(error_message(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `clusterclip status RUN | head`: the reader left; say nothing more, fail nothing
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        if exc.errno not in DISK_FULL_ERRNOS:
            if exc.filename is None or exc.errno is None:
                raise
            # the file system refused a named file (a folder where a file belongs, no permission, an immutable
            # file): the file and the reason are the message, not a traceback
            print(f"clusterclip: error: {display(str(exc.filename))}: {exc.strerror}; fix or remove it and run the "
                  "command again",
                  file=sys.stderr)
            return 2
        # Stages name their own files (DiskFullError); this catches any write they do not wrap.
        print(f"clusterclip: error: {DiskFullError(exc.filename or 'a file', 'the run keeps its last complete state')}",
              file=sys.stderr)
        return 2
    except ImportError as exc:
        message = missing_extra(exc)
        if message is None:
            raise
        print(f"clusterclip: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("clusterclip: interrupted", file=sys.stderr)
        return 130
    finally:
        sys.stdout = stdout
