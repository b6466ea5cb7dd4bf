"""Options shared by several commands, derived from the settings declarations (never re-declared), and the
configs built back from them."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from clusterclip.cluster.config import ClusterConfig
from clusterclip.contract.plan import PLAN_FIELDS
from clusterclip.corpus.config import CORPUS_FIELDS, CorpusConfig
from clusterclip.embed.config import EmbedConfig
from clusterclip.engines import EngineConfig
from clusterclip.errors import ClusterClipError
from clusterclip.experiment.config import PRESETS, ExperimentConfig, ModelConfig, TrainConfig, preset_config
from clusterclip.pipeline import DEFAULT_EPOCHS, DEFAULT_STRATEGIES
from clusterclip.plan.chain import INHERITED
from clusterclip.plan.config import DEFAULT_ORDER, STRATEGIES, PlanConfig
from clusterclip.plan.strategies import STRATEGIES as STRATEGY_CLASSES
from clusterclip.plan.weights_file import load_weights
from clusterclip.settings import SettingsError, add_arguments, error_message, flag_of, from_args

EMBED_FIELDS = ("embedder", "batch_size", "shard_size", "device", "embed_part")
SECTIONS: dict[str, type] = {"model": ModelConfig, "train": TrainConfig}
"""Nested configurations of :class:`ExperimentConfig`, by field name (``train.lr`` is TrainConfig's ``lr``)."""


class Formatter(argparse.HelpFormatter):
    """Help in the one format of every command: prose paragraphs of the description wrapped to the terminal,
    indented blocks (the examples) kept as written, each option's default shown unless its help already says
    it or there is none to show (a required option, None, a flag), and renamed spellings left out."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        blocks = re.split(r"\n\s*\n", text.strip("\n"))
        return "\n\n".join(block if any(line[:1].isspace() for line in block.splitlines())
                             else textwrap.fill(" ".join(block.split()), width, initial_indent=indent,
                                                subsequent_indent=indent) for block in blocks) + "\n"

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if ("(default:" in text or action.required or default is None or default is False
                or default == argparse.SUPPRESS or (not action.option_strings and action.nargs not in ("?", "*"))):
            return text
        return f"{text} (default: %(default)s)"

    def _format_action_invocation(self, action: argparse.Action) -> str:
        old = getattr(action, "old", ())
        if old:
            action = copy.copy(action)
            action.option_strings = [s for s in action.option_strings if s not in old]
        return super()._format_action_invocation(action)


class Renamed(argparse._StoreAction):
    """A stored option that also answers to its former spellings (``old``): they still work, print a one-line
    deprecation note on stderr, and are left out of the help."""

    def __init__(self, option_strings: Sequence[str], dest: str, old: Sequence[str] = (), **kw: Any) -> None:
        super().__init__([*option_strings, *old], dest, **kw)
        self.old = tuple(old)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if option_string in self.old:
            new = next(s for s in self.option_strings if s not in self.old)
            print(f"clusterclip: note: `{parser.prog} {option_string}` is deprecated; use {new}", file=sys.stderr)
        super().__call__(parser, namespace, values, option_string)


def command(sub: Any, name: str, func: Callable[[argparse.Namespace], int], help: str, description: str,
            examples: Sequence[str], run_dir: str | None = None) -> argparse.ArgumentParser:
    """A sub-command running ``func``, its ``examples`` (command lines, ``# comments`` allowed) as the help's
    epilog; ``run_dir`` is the help of its RUN_DIR argument, the first positional argument of every command
    that works on an existing run (the commands that create one take ``--out RUN_DIR``)."""
    epilog = "examples:\n" + "\n".join(f"  {line}" for line in examples)
    p = sub.add_parser(name, help=help, description=description, epilog=epilog, formatter_class=Formatter)
    if run_dir:
        p.add_argument("run_dir", metavar="RUN_DIR", help=run_dir)
    p.set_defaults(func=func)
    return p


def add_common(p: argparse.ArgumentParser, force: bool = True) -> None:
    """``--force`` (unless ``force`` is False), ``--quiet`` and ``--verbose``."""
    if force:
        p.add_argument("--force", action="store_true", help="re-run stages even when their outputs are up to date")
    add_verbosity(p, "no progress bars or log messages")


def add_verbosity(p: argparse.ArgumentParser, quiet: str) -> None:
    """``-q/--quiet`` (help ``quiet``) and ``-v/--verbose``."""
    p.add_argument("-q", "--quiet", action="store_true", help=quiet)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def add_corpus(p: argparse.ArgumentParser) -> None:
    """The INPUT arguments and the corpus stage's options."""
    g = p.add_argument_group("corpus")
    g.add_argument("inputs", nargs="*", metavar="INPUT",
                   help="JSONL (.jsonl, .jsonl.gz, .jsonl.zst), Parquet, a folder of .txt files or a Hugging "
                        "Face dataset folder (save_to_disk); none: the embedded default corpus "
                        "(docstrings of the Python standard library)")
    add_arguments(g, CorpusConfig, CORPUS_FIELDS)


def add_inputs(p: argparse.ArgumentParser, **out: Any) -> None:
    """The corpus (INPUT arguments and reader options), ``--out`` (``out``: its keywords) and the embedding."""
    add_corpus(p)
    p.add_argument("--out", metavar="RUN_DIR", help="run directory to create or complete", **out)
    add_embed(p)


def add_embed(p: argparse.ArgumentParser) -> None:
    """The embed stage's options and the engine's."""
    g = p.add_argument_group("embedding")
    add_arguments(g, EmbedConfig, EMBED_FIELDS, overrides={"shard_size": {"action": Renamed, "old": ("--shard-size",)}})
    add_engine(g)


def add_engine(g: argparse._ArgumentGroup) -> None:
    """``--engine`` and ``--ray-address``."""
    add_arguments(g, EngineConfig)


def add_cluster(p: argparse.ArgumentParser, standalone: bool = False) -> None:
    """The cluster stage's options (and the engine's, for ``clusterclip cluster``)."""
    g = p.add_argument_group("clustering")
    add_arguments(g, ClusterConfig)
    if standalone:
        add_engine(g)


def add_plan(p: argparse.ArgumentParser, multi: bool) -> None:
    """The plan options (every setting of :data:`~clusterclip.contract.plan.PLAN_FIELDS`, then ``--weights``, the
    file behind the ``weights`` setting); ``multi`` plans several strategies: ``--strategies``, a comma-separated
    list (``--strategy``, its former spelling, still works), in place of ``--strategy``."""
    g = p.add_argument_group("sampling plan")
    fields = PLAN_FIELDS
    if multi:
        g.add_argument("--strategies", "--strategy", action=Renamed, old=("--strategy",),
                       default=",".join(DEFAULT_STRATEGIES),
                       help=f"strategies to plan, comma-separated: {', '.join(STRATEGIES)} (each as `clusterclip "
                            "plan --strategy`)")
        fields = tuple(f for f in PLAN_FIELDS if f != "strategy")
    budgets = {"budget": {"help": "draws (docs) or tokens to plan (default: --epochs passes over the corpus)"},
               "epochs": {"help": f"the budget in passes over the corpus (N documents, or all tokens, each) when "
                                  f"--budget is not given (default: {DEFAULT_EPOCHS}, so that the cap can act)"}}
    if multi:
        unit = {"default": "tokens", "help": "unit of the budget (default: tokens, where `clusterclip plan`'s is docs: "
                                             "run plans its strategies at equal tokens, so that they compare at the "
                                             "same training budget)"}
        add_arguments(g, PlanConfig, fields, overrides={**budgets, "budget_unit": unit})
    else:  # what a continuation inherits stays out of the namespace unless given (explicit_plan_settings)
        unit = {"help": "unit of the budget (default: docs, where `clusterclip run`'s is tokens: run compares its "
                        "strategies at equal tokens)"}
        add_arguments(g, PlanConfig, [f for f in fields if f not in INHERITED],
                      overrides={**budgets, "budget_unit": unit})
        add_arguments(g, PlanConfig, [f for f in fields if f in INHERITED], unset=True)
    g.add_argument("--weights", default=None,
                   help="JSON {cluster: weight} or CSV cluster,weight file (strategy weights); 0 drops a cluster")


def corpus_config(a: argparse.Namespace) -> CorpusConfig:
    return from_args(CorpusConfig, a, CORPUS_FIELDS)


def embed_config(a: argparse.Namespace) -> EmbedConfig:
    return from_args(EmbedConfig, a, EMBED_FIELDS)


def engine_config(a: argparse.Namespace) -> EngineConfig:
    return from_args(EngineConfig, a)


def cluster_config(a: argparse.Namespace) -> ClusterConfig:
    return from_args(ClusterConfig, a)


def explicit_plan_settings(a: argparse.Namespace) -> list[str]:
    """The settings a continuation would inherit that the command line gave (``plan``'s parser leaves the others
    out of the namespace)."""
    return [f for f in INHERITED if hasattr(a, flag_of(PlanConfig, f).lstrip("-").replace("-", "_"))]


def plan_configs(a: argparse.Namespace, strategies: Sequence[str]) -> list[PlanConfig]:
    """One plan per strategy, of :data:`~clusterclip.pipeline.DEFAULT_EPOCHS` epochs without a budget (or a
    continuation); the weights go to the strategies that take them, and one without clusters (``random``) always
    takes the default order (it has no clusters to spread)."""
    weights = load_weights(a.weights) if a.weights else None
    kinds = {s: STRATEGY_CLASSES.get(s) for s in strategies}
    if a.budget is None and a.epochs is None and getattr(a, "continue_plan", None) is None:
        a.epochs = DEFAULT_EPOCHS  # the one default of `run` and `plan`; a continuation's is what remains
    return [from_args(PlanConfig, a, PLAN_FIELDS, strategy=s,
                      weights=weights if kinds[s] is not None and kinds[s].USES_WEIGHTS else None,
                      order=a.order if kinds[s] is None or kinds[s].CLUSTERED else DEFAULT_ORDER) for s in strategies]


# ------------------------------------------------------------------------------ experiment and tune


def add_presets(p: argparse.ArgumentParser) -> None:
    """``--preset`` and its shorthand ``--quick``."""
    p.add_argument("--preset", choices=tuple(PRESETS), default=None,
                   help="starting values of every option: default (3 splits x 3 seeds), quick (320 docs, 1-layer "
                        "model, one split and seed, hashing embedder: checks the whole path in seconds, proves "
                        "nothing), skewed (6,000 docs, K=96: skewed cluster sizes where the cap binds)")
    p.add_argument("--quick", action="store_true", help="same as --preset quick")


def experiment_config(a: argparse.Namespace) -> ExperimentConfig:
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


def settings_error(exc: SettingsError) -> ClusterClipError:
    """The error of experiment or tune settings, naming the flags (nested sections included)."""
    return ClusterClipError(error_message(exc, partial(experiment_flag, owner=exc.owner)))
