"""``clusterclip experiment``: train a small GPT per sampling strategy and compare held-out losses.

The options are derived from the configuration classes (:mod:`clusterclip.experiment.config`), so
defaults, checks and help are declared once.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from clusterclip.cli.options import Renamed, add_presets, add_verbosity, command, experiment_config, settings_error
from clusterclip.contract.experiment import EXPERIMENT_RESULTS
from clusterclip.experiment.config import (
    DATA_FIELDS,
    MEASURING_FIELDS,
    SAMPLING_FIELDS,
    ExperimentConfig,
    ModelConfig,
    TrainConfig,
)
from clusterclip.settings import SettingsError, add_arguments

HELP = "train a small GPT per sampling strategy and compare held-out losses"
DESCRIPTION = """\
Hold out a stratified split (per cluster and per --group-field value), run the pipeline on the rest,
and train one small decoder-only transformer per (strategy, seed) for the same token budget with the
same model, optimiser and seeds; only the sampling plan differs. Writes RUN_DIR/experiment/results.json
(rewritten after every training run; a restart skips finished runs), results.md and PNG plots.
Options left unset take the value of the preset (the defaults shown, or --quick's).

Every strategy is compared with random over (split, seed) pairs: the mean paired difference, its 95 %
bootstrap interval and a verdict (better / worse / inconclusive: does the interval exclude zero?).
"""
EXAMPLES = (
    "clusterclip experiment data/minipile.jsonl.gz --out runs/exp",
    "clusterclip experiment data.jsonl --out runs/k48 --k 48 --max-repeats 9,12,18 --seeds 0,1,2,3",
    "clusterclip experiment data.jsonl --out /tmp/exp --quick",
    "clusterclip experiment data.jsonl --out runs/exp --split-seeds 0,1,2,3,4 --seeds 0,1",
    "clusterclip experiment data.jsonl --out runs/d --strategies clusterclip --duplicate-modes drop",
    "clusterclip experiment data/minipile.jsonl.gz --out runs/skewed --preset skewed",
)
RENAMED = {"max_repeats": ("--max-repeat",), "duplicates": ("--duplicates",)}
"""Former spellings of list options: a list's flag is plural, and ``--max-repeat``/``--duplicates`` mean one value
in ``plan`` and ``run``."""


def add_experiment_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``experiment`` subcommand to ``clusterclip``'s subparsers."""
    p = command(sub, "experiment", cmd_experiment, HELP, DESCRIPTION, EXAMPLES)
    p.add_argument("inputs", nargs="*", metavar="INPUT",
                   help="corpus files or folders (as for `clusterclip run`); none: the embedded default corpus")
    p.add_argument("--out", required=True, metavar="RUN_DIR",
                   help="run directory of the training split; results go to RUN_DIR/experiment/")
    add_presets(p)
    add_arguments(p.add_argument_group("data"), ExperimentConfig, DATA_FIELDS, unset=True)
    add_arguments(p.add_argument_group("sampling"), ExperimentConfig, SAMPLING_FIELDS, unset=True,
                  overrides={name: {"action": Renamed, "old": old} for name, old in RENAMED.items()})
    add_arguments(p.add_argument_group("model"), ModelConfig, unset=True)
    add_arguments(p.add_argument_group("training"), TrainConfig, unset=True)
    add_arguments(p.add_argument_group("measurement and hardware"), ExperimentConfig, MEASURING_FIELDS, unset=True)
    p.add_argument("--force", action="store_true", help="discard results of a different configuration in RUN_DIR")
    add_verbosity(p, "no progress output")
    return p


def _print_proxy(key: str, run: dict[str, Any], finished: int, total: int) -> None:
    print(f"experiment: {key}: macro {run['heldout_macro_cluster']:.4f} micro {run['heldout_micro']:.4f} "
          f"({run['seconds']:.0f}s, {finished}/{total})", file=sys.stderr, flush=True)


def cmd_experiment(a: argparse.Namespace) -> int:
    """Run the experiment, printing a line per finished proxy run, then the markdown table and where the
    results are."""
    from pathlib import Path

    from clusterclip.experiment.proxy_runs import run_experiment
    from clusterclip.experiment.results import markdown_table

    try:
        results = run_experiment(a.inputs, a.out, experiment_config(a), force=a.force, progress=not a.quiet,
                                 on_run=None if a.quiet else _print_proxy)
    except SettingsError as exc:
        raise settings_error(exc) from exc
    print(markdown_table(results))
    print(Path(a.out) / EXPERIMENT_RESULTS)
    return 0
