"""``clusterclip experiment``: the subcommand's parser and handler (registered by ``clusterclip.cli``).

Also runnable alone as ``python -m clusterclip.experiment.cli INPUT --out DIR`` (same options).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from clusterclip.errors import ClusterClipError

if TYPE_CHECKING:
    from clusterclip.experiment.run import ExperimentConfig

HELP = "train a small GPT per sampling strategy and compare held-out losses"
DESCRIPTION = """\
Hold out a stratified split (per cluster and per --group-field value), run the pipeline on the rest,
and train one small decoder-only transformer per (strategy, seed) for the same token budget with the
same model, optimiser and seeds; only the sampling plan differs. Writes OUT/experiment/results.json
(rewritten after every training run; a restart skips finished runs), results.md and PNG plots.
Options left unset take the value of the preset (default, or --quick).

examples:
  clusterclip experiment data/minipile.jsonl.gz --out runs/exp
  clusterclip experiment data.jsonl --out runs/exp-k48 --k 48 --max-repeat 9,12,18 --seeds 0,1,2,3
  clusterclip experiment data.jsonl --out /tmp/exp --quick
"""


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _strs(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("inputs", nargs="*", metavar="INPUT",
                   help="corpus files or folders (as for `clusterclip run`); none: the embedded default corpus")
    p.add_argument("--out", required=True, help="run directory of the training split; results go to OUT/experiment/")
    p.add_argument("--quick", action="store_true",
                   help="tiny preset (320 docs, 1-layer model, one seed, hashing embedder): checks the whole path "
                        "in seconds, proves nothing")
    g = p.add_argument_group("data")
    g.add_argument("--text-field", default=None, help="field holding the text (default: text)")
    g.add_argument("--group-field", default=None,
                   help="ground-truth field for per-domain metrics and stratification (default: domain)")
    g.add_argument("--docs", type=int, default=None,
                   help="documents sampled from the input, natural mixture kept; 0: all (1000)")
    g.add_argument("--max-words", type=int, default=None, help="cut documents to this many words; 0: no cut (120)")
    g.add_argument("--heldout", type=float, default=None, help="held-out fraction per stratum (0.2)")
    g.add_argument("--split-seed", type=int, default=None, help="seed of subset, split and k-means (0)")
    g.add_argument("--embedder", choices=("static", "minilm", "hashing"), default=None, help="embedder (static)")
    g.add_argument("--k", type=int, default=None, help="number of clusters (24)")
    g = p.add_argument_group("sampling")
    g.add_argument("--strategies", type=_strs, default=None,
                   help="comma-separated: random, uniform, temperature, clusterclip, clusterclip-spread "
                        "(the planner's --order spread), and the diagnostic clusterclip-shuffled (ClusterClip's "
                        "draws in random order) (the first four)")
    g.add_argument("--passes", type=float, default=None,
                   help="token budget in passes over the training split (6); --max-repeat must exceed it")
    g.add_argument("--max-repeat", type=_ints, default=None, help="clusterclip caps to sweep, comma-separated (9,12)")
    g.add_argument("--tau", type=float, default=None, help="temperature strategy: weight n_c**tau (0.5)")
    g.add_argument("--seeds", type=_ints, default=None, help="seeds of plan and model init, comma-separated (0,1,2)")
    g = p.add_argument_group("model and training")
    g.add_argument("--vocab-size", type=int, default=None, help="byte-level BPE vocabulary (2048)")
    g.add_argument("--context", type=int, default=None, help="sequence length (128)")
    g.add_argument("--layers", dest="n_layer", type=int, default=None, help="transformer blocks (2)")
    g.add_argument("--heads", dest="n_head", type=int, default=None, help="attention heads (4)")
    g.add_argument("--d-model", type=int, default=None, help="model width (128)")
    g.add_argument("--batch-size", type=int, default=None, help="sequences per step (8)")
    g.add_argument("--lr", type=float, default=None, help="peak learning rate (3e-3)")
    g.add_argument("--device", default=None, help="cpu or cuda (cpu)")
    g.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (1: small models gain nothing from more on a shared machine)")
    p.add_argument("--force", action="store_true", help="discard results of a different configuration in OUT")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def add_experiment_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``experiment`` subcommand to ``clusterclip``'s subparsers."""
    p = subparsers.add_parser("experiment", help=HELP, description=DESCRIPTION,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    _configure(p)
    p.set_defaults(func=cmd_experiment)
    return p


def config_from_args(a: argparse.Namespace) -> ExperimentConfig:
    """The preset (default or quick) with every option the user set applied over it."""
    from clusterclip.experiment.run import ExperimentConfig, quick_config

    base = quick_config() if a.quick else ExperimentConfig()
    names = {f.name for f in dataclasses.fields(ExperimentConfig)}
    mapping = {"max_repeat": "max_repeats"}
    overrides = {}
    for key, value in vars(a).items():
        field = mapping.get(key, key)
        if field in names and value is not None:
            overrides[field] = value
    for key in ("docs", "max_words"):
        if overrides.get(key) == 0:
            overrides[key] = None
    return dataclasses.replace(base, **overrides)


def cmd_experiment(a: argparse.Namespace) -> int:
    """Run the experiment and print the markdown table and where the results are."""
    from pathlib import Path

    from clusterclip.experiment.run import markdown_table, run_experiment

    results = run_experiment(a.inputs, a.out, config_from_args(a), force=a.force, progress=not a.quiet)
    print(markdown_table(results))
    print(Path(a.out) / "experiment" / "results.json")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry point with the same error handling as ``clusterclip``."""
    import logging

    parser = argparse.ArgumentParser(prog="clusterclip experiment", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    _configure(parser)
    a = parser.parse_args(argv)
    level = logging.WARNING if a.quiet else logging.DEBUG if a.verbose else logging.INFO
    logging.basicConfig(level=level, format="%(levelname)s %(message)s", stream=sys.stderr)
    for noisy in ("faiss", "faiss.loader", "sentence_transformers", "transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        return cmd_experiment(a)
    except ClusterClipError as exc:
        print(f"clusterclip: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
