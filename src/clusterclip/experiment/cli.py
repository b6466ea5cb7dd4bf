"""``clusterclip experiment``: the subcommand's parser and handler (registered by ``clusterclip.cli``).

The options are derived from the configuration classes (:mod:`clusterclip.experiment.config`), so
defaults, checks and help are declared once. Also runnable alone as
``python -m clusterclip.experiment.cli INPUT --out DIR`` (same options).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from functools import partial
from typing import Any

from clusterclip.errors import ClusterClipError
from clusterclip.experiment.config import PRESETS, ExperimentConfig, ModelConfig, TrainConfig, preset_config
from clusterclip.settings import SettingsError, add_arguments, error_message, flag_of, from_args

HELP = "train a small GPT per sampling strategy and compare held-out losses"
DESCRIPTION = """\
Hold out a stratified split (per cluster and per --group-field value), run the pipeline on the rest,
and train one small decoder-only transformer per (strategy, seed) for the same token budget with the
same model, optimiser and seeds; only the sampling plan differs. Writes OUT/experiment/results.json
(rewritten after every training run; a restart skips finished runs), results.md and PNG plots.
Options left unset take the value of the preset (the defaults shown, or --quick's).

examples:
  clusterclip experiment data/minipile.jsonl.gz --out runs/exp
  clusterclip experiment data.jsonl --out runs/exp-k48 --k 48 --max-repeat 9,12,18 --seeds 0,1,2,3
  clusterclip experiment data.jsonl --out /tmp/exp --quick
  clusterclip experiment data.jsonl --out runs/exp --split-seeds 0,1,2,3,4 --seeds 0,1
  clusterclip experiment data/minipile.jsonl.gz --out runs/skewed --preset skewed

Every strategy is compared with random over (split, seed) pairs: the mean paired difference, its 95 %
bootstrap interval and a verdict (better / worse / inconclusive: does the interval exclude zero?).
"""
DATA = ("text_field", "group_field", "docs", "max_words", "heldout", "split_seeds", "split_seed", "embedder", "k")
SAMPLING = ("strategies", "passes", "max_repeats", "tau", "seeds")
MEASURING = ("curve_docs", "small_clusters", "device", "threads")
SECTIONS: dict[str, type] = {"model": ModelConfig, "train": TrainConfig}
"""Nested configurations of :class:`ExperimentConfig`, by field name (``train.lr`` is TrainConfig's ``lr``)."""


def _configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("inputs", nargs="*", metavar="INPUT",
                   help="corpus files or folders (as for `clusterclip run`); none: the embedded default corpus")
    p.add_argument("--out", required=True, help="run directory of the training split; results go to OUT/experiment/")
    add_preset_arguments(p)
    add_arguments(p.add_argument_group("data"), ExperimentConfig, DATA, unset=True)
    add_arguments(p.add_argument_group("sampling"), ExperimentConfig, SAMPLING, unset=True)
    add_arguments(p.add_argument_group("model"), ModelConfig, unset=True)
    add_arguments(p.add_argument_group("training"), TrainConfig, unset=True)
    add_arguments(p.add_argument_group("measurement and hardware"), ExperimentConfig, MEASURING, unset=True)
    p.add_argument("--force", action="store_true", help="discard results of a different configuration in OUT")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def add_preset_arguments(p: argparse.ArgumentParser) -> None:
    """``--preset`` and its shorthand ``--quick``."""
    p.add_argument("--preset", choices=tuple(PRESETS), default=None,
                   help="starting values of every option: default (3 splits x 3 seeds), quick (320 docs, 1-layer "
                        "model, one split and seed, hashing embedder: checks the whole path in seconds, proves "
                        "nothing), skewed (6,000 docs, K=96: skewed cluster sizes where the cap binds)")
    p.add_argument("--quick", action="store_true", help="same as --preset quick")


def add_experiment_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``experiment`` subcommand (and ``tune``, which shares its options) to ``clusterclip``'s subparsers."""
    from clusterclip.experiment.tune_cli import add_tune_parser

    p = subparsers.add_parser("experiment", help=HELP, description=DESCRIPTION,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    _configure(p)
    p.set_defaults(func=cmd_experiment)
    add_tune_parser(subparsers)
    return p


def config_from_args(a: argparse.Namespace) -> ExperimentConfig:
    """The preset (``--preset``, ``--quick`` or the default) with every option the user set applied over it;
    ``--split-seed`` alone means that one split."""
    name = a.preset or ("quick" if a.quick else "default")
    base = preset_config(name)
    if getattr(a, "split_seed", None) is not None and getattr(a, "split_seeds", None) is None:
        base = dataclasses.replace(base, split_seeds=())
    return from_args(ExperimentConfig, a, base=base, model=from_args(ModelConfig, a, base=base.model),
                     train=from_args(TrainConfig, a, base=base.train))


def experiment_flag(param: str, owner: type | None = ExperimentConfig) -> str:
    """The flag of a parameter named in an error: ``train.lr`` -> ``--lr``, ``max_repeats`` -> ``--max-repeat``."""
    section, _, name = param.rpartition(".")
    return flag_of(SECTIONS.get(section, owner), name)


def _print_run(key: str, run: dict[str, Any], finished: int, total: int) -> None:
    print(f"experiment: {key}: macro {run['heldout_macro_cluster']:.4f} micro {run['heldout_micro']:.4f} "
          f"({run['seconds']:.0f}s, {finished}/{total})", file=sys.stderr, flush=True)


def cmd_experiment(a: argparse.Namespace) -> int:
    """Run the experiment, printing a line per finished run, then the markdown table and where the results are."""
    from pathlib import Path

    from clusterclip.experiment.results import markdown_table
    from clusterclip.experiment.run import run_experiment

    try:
        results = run_experiment(a.inputs, a.out, config_from_args(a), force=a.force, progress=not a.quiet,
                                 on_run=None if a.quiet else _print_run)
    except SettingsError as exc:
        raise ClusterClipError(error_message(exc, partial(experiment_flag, owner=exc.owner))) from exc
    print(markdown_table(results))
    print(Path(a.out) / "experiment" / "results.json")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry point: ``clusterclip experiment`` with the same arguments and error handling."""
    from clusterclip import cli

    return cli.main(["experiment", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
