"""``clusterclip tune``: choose cap, temperature and order for a corpus by proxy training runs.

Proxy runs take the experiment's data, model and training options (and its presets); the search takes
:class:`~clusterclip.experiment.tune.TuneConfig`'s. See ``docs/tune.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from clusterclip.cli.options import add_presets, add_verbosity, command, experiment_config, settings_error
from clusterclip.errors import ClusterClipError
from clusterclip.experiment.config import PROXY_FIELDS, TUNE_DATA_FIELDS, ExperimentConfig, ModelConfig, TrainConfig
from clusterclip.experiment.tune.config import FITTED_PREDICTORS, QUICK_SEEDS, QUICK_TUNE, TuneConfig
from clusterclip.experiment.tune.format import format_summary, print_event
from clusterclip.experiment.tune.search_stage import run_tune
from clusterclip.mixture.fromcsv import format_proposal, load_any, propose_from_swarm, write_weights
from clusterclip.settings import SettingsError, add_arguments, from_args

HELP = "choose cap, temperature, order (and tier weights) for a corpus by proxy training runs"
DESCRIPTION = """\
Search sampling plans for a corpus with small proxy models: random, uniform, temperature (--taus) and
ClusterClip (--caps x --orders). Each proxy run trains the experiment's model on one (held-out split,
seed) pair; successive halving keeps the best 1/--eta candidates and gives them more pairs, within
--max-runs / --max-minutes. The objective is the macro held-out loss (over --group-field when the corpus
has it, else over clusters), judged by its paired difference to random with a 95 % (expanded) bootstrap
interval, and no verdict from fewer than 6 (split, seed) pairs; a candidate must also keep the micro loss
within --max-micro-regression of random's. If none is better than random, random is chosen. The chosen
plan is written for the whole corpus into RUN_DIR (an ordinary plan), with the equivalent `clusterclip plan`
command; `clusterclip report RUN_DIR` shows the search.
Finished proxy runs are kept in RUN_DIR/tune/runs/, so a killed search resumes where it stopped; two
candidates whose plans are identical on a pair train once. --search weights searches per-cluster
mixtures under --weights-cap in rounds of fresh draws around the natural mixture (or, with a fitted
--predictor, its picks within a trust region around the measured mixtures), over groups merged (or a cap
raised) until the natural mixture fits every split (docs/tune.md); --strata with --tier-weight-grid adds a
stratified ClusterClip candidate per tier-weight vector and cap (--quality-scorer scores the field `quality`
when the corpus has none); --from-csv fits --swarm-predictor on a swarm file and proposes a mixture without
training, and says when it extrapolates.
"""
EXAMPLES = (
    "clusterclip tune data/minipile.jsonl.gz --out runs/tuned --max-minutes 90",
    "clusterclip tune data.jsonl --out runs/t --caps 8,12,18 --taus 0.3,0.7 --check-split-seeds 10,11",
    "clusterclip tune data.jsonl --out /tmp/tuned --quick",
    "clusterclip tune data.jsonl --out runs/tuned --jobs 2          # two proxy runs at once",
    "clusterclip tune data.jsonl --out runs/gpu --device cuda --docs 20000 --layers 6 --d-model 384",
    "clusterclip tune data.jsonl --out runs/w --search grid,weights --weight-rounds 3",
    "clusterclip tune d.jsonl --out q --strata cluster,quality:4 --tier-weight-grid '1,1,1,1;0,1,1,2'",
    "clusterclip tune --out /tmp/p --from-csv train_mixture_1m.csv --loss-csv train_pile_loss_1m.csv",
)


def add_tune_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``tune`` subcommand to ``clusterclip``'s subparsers."""
    p = command(sub, "tune", cmd_tune, HELP, DESCRIPTION, EXAMPLES)
    p.add_argument("inputs", nargs="*", metavar="INPUT", help="corpus files or folders (as for `clusterclip run`)")
    p.add_argument("--out", required=True, metavar="RUN_DIR",
                   help="run directory: the whole corpus, the chosen plan, and tune/")
    add_presets(p)
    add_arguments(p.add_argument_group("search"), TuneConfig, unset=True)
    add_arguments(p.add_argument_group("data (as for experiment)"), ExperimentConfig, TUNE_DATA_FIELDS, unset=True)
    add_arguments(p.add_argument_group("proxy runs"), ExperimentConfig, PROXY_FIELDS, unset=True)
    add_arguments(p.add_argument_group("proxy model"), ModelConfig, unset=True)
    add_arguments(p.add_argument_group("proxy training"), TrainConfig, unset=True)
    p.add_argument("--no-plan", action="store_true", help="search only; do not write the plan for the whole corpus")
    g = p.add_argument_group("swarm made elsewhere (no training)")
    g.add_argument("--from-csv", metavar="FILE", help="fit --swarm-predictor on this swarm (single-file format, or a "
                   "RegMix mixture file with --loss-csv) and write the proposed weights to "
                   "RUN_DIR/tune/proposed_weights.json")
    g.add_argument("--swarm-predictor", default=FITTED_PREDICTORS[0], choices=FITTED_PREDICTORS,
                   help="predictor fitted on the --from-csv swarm (lightgbm needs the extra)")
    g.add_argument("--loss-csv", metavar="FILE", help="RegMix loss file joined to --from-csv by its index column")
    g.add_argument("--target", default="pile-cc", help="RegMix loss column (exact or a unique fragment)")
    g.add_argument("--objective", dest="swarm_objective", default=None, help="objective column of a single-file swarm")
    add_verbosity(p, "no progress output")
    return p


def tune_configs(a: argparse.Namespace) -> tuple[ExperimentConfig, TuneConfig]:
    """The proxy runs' :class:`ExperimentConfig` (preset plus options) and the search's :class:`TuneConfig`;
    ``--quick`` also shrinks the grid and uses two seeds, so that a winner is possible."""
    quick = a.quick or a.preset == "quick"
    cfg = experiment_config(a)
    if quick and not hasattr(a, "seeds"):
        cfg = dataclasses.replace(cfg, seeds=QUICK_SEEDS)
    tune = from_args(TuneConfig, a, base=TuneConfig(**QUICK_TUNE) if quick else TuneConfig())
    return cfg, tune


def cmd_tune(a: argparse.Namespace) -> int:
    """Run the search, printing a line per proxy run, then the candidates, the choice and its command."""
    if a.from_csv:
        return cmd_from_csv(a)
    try:
        cfg, tune = tune_configs(a)
        res = run_tune(a.inputs, a.out, cfg, tune, progress=not a.quiet, on_event=None if a.quiet else print_event,
                       write_plan=not a.no_plan)
    except SettingsError as exc:
        raise settings_error(exc) from exc
    print(format_summary(res))
    return 0


def cmd_from_csv(a: argparse.Namespace) -> int:
    """Fit and propose from a swarm file; print the weights and the prediction, write the weights file."""
    if hasattr(a, "predictor"):
        raise ClusterClipError(f"--predictor steers the weight search (--search weights); --from-csv fits "
                               f"--swarm-predictor ({', '.join(FITTED_PREDICTORS)}): use that instead")
    swarm = load_any(a.from_csv, a.loss_csv, a.target, a.swarm_objective)
    res = propose_from_swarm(swarm, a.swarm_predictor, getattr(a, "plan_seed", 0))
    path = write_weights(Path(a.out) / "tune" / "proposed_weights.json", res["domains"], res["weights"])
    print(format_proposal(res) + f"\nWeights file: {path}")
    return 0
