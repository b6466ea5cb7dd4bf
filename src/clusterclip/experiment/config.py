"""Every setting of the experiment, declared once: data and sampling here, the model's shape in
:class:`ModelConfig`, the optimiser recipe in :class:`TrainConfig`; :class:`ExperimentConfig` nests both.

Torch-free on purpose: the command line derives its options from these classes without importing torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from clusterclip.contract.experiment import ExperimentSettings
from clusterclip.corpus.config import CorpusConfig
from clusterclip.corpus.quality import QUALITY_FIELD, SCORERS
from clusterclip.corpus.records import ReadOptions
from clusterclip.embed.registry import DEFAULT_EMBEDDER, EMBEDDERS
from clusterclip.experiment import spec_grammar
from clusterclip.experiment.specs import DEFAULT_ONLINE_UPDATES, ONLINE_RULES, plan_options
from clusterclip.plan.config import DEFAULT_TAU, DUPLICATES, TAU_LIMIT, PlanConfig
from clusterclip.settings import (
    Settings,
    SettingsError,
    at_least,
    between,
    each,
    one_of,
    optional,
    setting,
)
from clusterclip.store import config_hash

RUNTIME_FIELDS = ("seeds", "split_seeds", "strategies", "max_repeats", "duplicates", "online_updates", "device",
                  "threads", "quality_scorer")
"""Settings that may change between restarts of one experiment: adding seeds, split seeds or strategies
reuses the finished runs (a cap, ``online_updates`` or the quality scorer a stratified plan reads is part of the
specs of the runs it changes); every other setting changes the numbers of every run."""
DATA_FIELDS = ("text_field", "group_field", "docs", "max_words", "heldout", "split_seeds", "split_seed", "embedder",
               "k")
SAMPLING_FIELDS = ("strategies", "quality_scorer", "passes", "max_repeats", "duplicates", "tau", "online_updates",
                   "seeds")
TUNE_DATA_FIELDS = (*DATA_FIELDS, "quality_scorer")
MEASURING_FIELDS = ("objective", "curve_docs", "small_clusters", "device", "threads")
PROXY_FIELDS = ("passes", "seeds", "curve_docs", "small_clusters", "device", "threads")
"""Groups of :class:`ExperimentConfig`'s settings as the commands show them: ``experiment`` takes data, sampling
and measuring; ``tune`` takes data (with the quality scorer its stratified candidates may read) and the proxy
runs' settings (its grid replaces the strategies)."""
OBJECTIVES = ("lm", "sft")
"""What a proxy learns and is scored on: the next token of whole documents (``lm``), or the responses of
conversation records (``sft``, :mod:`clusterclip.experiment.sft`)."""
MIN_BPE_VOCAB = 300
POSITIVE = between(0, math.inf)


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _strs(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def torch_device(value: object) -> str | None:
    """A torch device name this code supports (cpu, cuda, cuda:N), else the problem."""
    if isinstance(value, str) and re.fullmatch(r"cpu|cuda(:\d+)?", value):
        return None
    return f"must be cpu, cuda or cuda:N, got {value!r}"


def _count_or_all(text: str) -> int | None:
    """Command-line count where 0 means no limit (None)."""
    return int(text) or None


def _read_setting(name: str, help: str, owner: type = ReadOptions) -> Any:
    """The :class:`~clusterclip.corpus.ReadOptions` (or ``owner``'s) declaration of ``name`` (default and check),
    with the experiment's own help."""
    f = next(f for f in dataclasses.fields(owner) if f.name == name)
    return setting(f.default, check=f.metadata["check"], help=help)


@dataclass(frozen=True)
class ModelConfig(Settings):
    """Shape of the GPT. The experiment trains its byte-level BPE to ``vocab_size`` tokens and builds
    the model with the vocabulary the tokenizer actually has."""

    vocab_size: int = setting(2048, check=at_least(2), help="vocabulary size (of the byte-level BPE)")
    context: int = setting(128, check=at_least(8), help="sequence length in tokens")
    n_layer: int = setting(2, check=at_least(1), flag="--layers", help="transformer blocks")
    n_head: int = setting(4, check=at_least(1), flag="--heads", help="attention heads")
    d_model: int = setting(128, check=at_least(1), help="model width")
    dropout: float = setting(0.0, check=between(0, 1, closed=True), help="dropout probability")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.d_model % self.n_head:
            raise SettingsError("d_model", f"{self.d_model} is not divisible by {{n_head}} {self.n_head}", type(self))


@dataclass(frozen=True)
class TrainConfig(Settings):
    """Optimiser recipe shared by every run: AdamW, linear warm-up, cosine decay, gradient clipping."""

    batch_size: int = setting(8, check=at_least(1), help="sequences per step")
    lr: float = setting(3e-3, check=between(0, 10), help="peak learning rate, in (0, 10)")
    min_lr_ratio: float = setting(0.1, check=between(0, 1, closed=True),
                                  help="the cosine decay ends at lr x this ratio")
    warmup_steps: int = setting(100, check=at_least(0), help="linear warm-up steps (at most a tenth of the run)")
    weight_decay: float = setting(0.1, check=between(0, 10, closed=True),
                                  help="AdamW weight decay of the matrices, in [0, 10]")
    grad_clip: float = setting(1.0, check=between(0, 1e6, closed=True), help="gradient norm clip; 0: none")
    curve_points: int = setting(8, check=at_least(1), help="points of the loss curves")


@dataclass(frozen=True)
class ExperimentConfig(Settings):
    """Every option of an experiment, validated on construction. Settings in ``RUNTIME_FIELDS`` may
    change between restarts; a change to any other (``model`` and ``train`` included) needs ``force``."""

    docs: int | None = setting(1000, check=optional(at_least(1)), parse=_count_or_all, cli_none="0 for all",
                               help="documents sampled from the input, natural mixture kept; 0: all")
    max_words: int | None = setting(120, check=optional(at_least(1)), parse=_count_or_all, cli_none="0 for no cut",
                                    help="cut documents to this many words; 0: no cut")
    heldout: float = setting(0.2, check=between(0, 1), help="held-out fraction per (cluster, domain) stratum")
    split_seed: int = setting(0, check=at_least(0), help="seed of subset, split and k-means (one split)")
    split_seeds: tuple[int, ...] = setting(
        (0, 1, 2), check=each(at_least(0), nonempty=False, distinct=True), parse=_ints,
        help="held-out splits, comma-separated: each draws its own subset, split and k-means and trains every "
             "(strategy, seed) on it; empty: the one --split-seed")
    text_field: str = _read_setting("text_field", help="field holding the text")
    group_field: str | None = _read_setting("group_field",
                                            help="ground-truth field for per-domain metrics and stratification")
    quality_scorer: str | None = _read_setting(
        "quality_scorer", owner=CorpusConfig,
        help=f"score the input's documents into the numeric field {QUALITY_FIELD!r} that a stratified strategy may "
             f"read (clusterclip:strata=[cluster,{QUALITY_FIELD}:4]; docs/experiment.md): {', '.join(SCORERS)} "
             "(default: none, the input's own fields)")
    embedder: str = setting(DEFAULT_EMBEDDER, choices=EMBEDDERS, help="embedder of the pipeline")
    k: int = setting(24, check=at_least(2), help="number of clusters")
    strategies: tuple[str, ...] = setting(
        ("random", "uniform", "temperature", "clusterclip"), check=spec_grammar.check_items,
        parse=spec_grammar.join_items,
        help="comma-separated: random, uniform, temperature, clusterclip, clusterclip-spread (the planner's "
             "order spread), the diagnostic clusterclip-shuffled (ClusterClip's draws in random order), "
             "online[:bandit|odm|gradient] (ClusterClip's plan steered while it trains, docs/sampling.md); any "
             "planner strategy with plan options (clusterclip:max_repeat=15,order=spread; weights:FILE,max_repeat=12), "
             "and plan:PATH (a finished plan's strategy and options over its run's clusters): docs/experiment.md, "
             "Strategy specs")
    passes: float = setting(6.0, check=POSITIVE,
                            help="token budget in passes over the training split; every max-repeat must exceed it")
    max_repeats: tuple[int, ...] = setting((9, 12), check=each(at_least(1), nonempty=False), parse=_ints,
                                           flag="--max-repeats", help="clusterclip caps to sweep, comma-separated")
    duplicates: tuple[str, ...] = setting(
        ("none",), check=each(one_of(DUPLICATES), distinct=True), parse=_strs, flag="--duplicate-modes",
        help="clusterclip's near-duplicate handling to sweep, comma-separated: none (the per-document cap), drop "
             "(plan the kept documents only), group-cap (a group's members share the cap), rehydrate (a group is "
             "drawn by the rehydration curve of its size); all but none run `clusterclip dedup` on the training "
             "split (docs/dedup.md)")
    tau: float = setting(DEFAULT_TAU, check=between(-TAU_LIMIT, TAU_LIMIT, closed=True),
                         help="temperature strategy: cluster weight n_c**tau")
    online_updates: int = setting(DEFAULT_ONLINE_UPDATES, check=at_least(1),
                                  help="online strategies: times the controller changes the weights over a run")
    seeds: tuple[int, ...] = setting((0, 1, 2), check=each(at_least(0), distinct=True), parse=_ints,
                                     help="seeds of plan and model initialisation, comma-separated")
    objective: str = setting("lm", choices=OBJECTIVES,
                             help="lm: train on every token and score held-out documents; sft: conversation "
                                  "records (chat, sharegpt, alpaca, openorca), trained and scored on the response "
                                  "tokens only, as supervised fine-tuning masks the prompt")
    curve_docs: int = setting(100, check=at_least(1), help="held-out documents scored at every curve point")
    small_clusters: float = setting(0.2, check=between(0, 1),
                                    help="fraction of clusters (the smallest) behind the small_* metrics")
    device: str = setting("cpu", check=torch_device, help="torch device: cpu, cuda or cuda:N (a GPU)")
    threads: int | None = setting(1, check=optional(at_least(1)), parse=_count_or_all, cli_none="0 for torch's default",
                                  help="torch CPU threads; 0: torch's default (small models gain nothing "
                                       "from more on a shared machine)")
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.model.vocab_size < MIN_BPE_VOCAB:
            raise SettingsError("model.vocab_size", f"must be at least {MIN_BPE_VOCAB} for a byte-level BPE (256 "
                                f"bytes, end-of-text and merges), got {self.model.vocab_size}", type(self))
        online = [s for s in self.strategies if s in ONLINE_RULES]
        if self.objective == "sft" and online:
            raise SettingsError("strategies", f"{','.join(online)} steers on every token's loss; drop it under "
                                "{objective} sft (its losses count the response tokens only)", type(self))
        sweeps = self._check_item_caps()
        if not sweeps:
            if set(self.duplicates) - {"none"}:
                raise SettingsError("duplicates", f"{','.join(self.duplicates)} applies to the clusterclip strategies; "
                                    "add one to {strategies}", type(self))
        elif not self.max_repeats:
            raise SettingsError("max_repeats", "must hold at least one cap for the clusterclip and online strategies",
                                type(self))
        low = [r for r in (self.max_repeats if sweeps else ()) if r <= self.passes]
        if low:
            raise SettingsError(
                "max_repeats",
                f"{list(low)} must exceed {{passes}} {self.passes:g}: the budget repeats every document "
                f"{self.passes:g} times on average, so a cap below that is infeasible and a cap equal to it makes "
                f"ClusterClip identical to random; use caps above the number of passes "
                f"(e.g. {math.ceil(self.passes * 1.5)}) or lower {{passes}}", type(self))

    def _check_item_caps(self) -> bool:
        """Refuse an item's own ``max_repeat`` at or below the passes (as ``max_repeats``; a ``plan:`` item's cap is
        known once its plan is read); whether an item sweeps ``max_repeats``."""
        items = [spec_grammar.parse_item(text) for text in self.strategies]
        for item in items:
            cap = item.options.get("max_repeat")
            if cap is not None and cap <= self.passes:
                raise SettingsError("strategies", f"item {item.text!r}: max_repeat {cap} must exceed {{passes}} "
                                    f"{self.passes:g} (a lower cap is infeasible, an equal one is random)", type(self))
        return any(spec_grammar.sweeps_caps(item) for item in items)

    def uses_groups(self) -> bool:
        """Whether a strategy plans over near-duplicate groups (the training split needs its dedup stage)."""
        return any(s.get("duplicates", "none") != "none" for s in self.strategy_specs())

    def input_fields(self) -> tuple[str, ...]:
        """The input's per-document fields that the strategies' plans read (``strata``, ``within``) over the split's
        clusters: the corpus stage of the input keeps them (or, for ``quality``, ``quality_scorer`` writes it)."""
        names = [n for s in self.strategy_specs() if "clusters" not in s
                 for n in PlanConfig(**plan_options(s)).field_names()]
        return tuple(dict.fromkeys(names))

    def splits(self) -> tuple[int, ...]:
        """The split seeds trained on: ``split_seeds``, or ``split_seed`` alone when that is empty."""
        return tuple(dict.fromkeys(self.split_seeds)) or (self.split_seed,)

    def results_hash(self) -> str:
        """Hash of every setting that changes the numbers of a run: the whole tree, ``model`` and
        ``train`` included, except ``RUNTIME_FIELDS``. Finished runs are reused only under the same hash.

        Which device is a runtime choice, but a GPU trains in bfloat16 autocast: its runs are hashed apart
        from CPU runs (whose hashes are unchanged by this), and any GPU reuses any other's."""
        d = self.recorded()
        for key in RUNTIME_FIELDS:
            d.pop(key)
        if self.device.startswith("cuda"):
            d["precision"] = "bfloat16-autocast"
        return config_hash(d)

    def recorded(self) -> dict[str, Any]:
        """The settings as records and hashes hold them: ``objective`` only when not ``lm``, so experiments run
        before it existed keep their hashes."""
        d = asdict(self)
        if d["objective"] == "lm":
            del d["objective"]
        return d

    @classmethod
    def from_recorded(cls, settings: ExperimentSettings) -> ExperimentConfig:
        """The settings an experiment's record holds (:class:`clusterclip.contract.experiment.ExperimentSettings`),
        validated (lists as the tuples they were, ``model`` and ``train`` as their classes)."""
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in dataclasses.asdict(settings).items()}
        return cls(**{**values, "model": ModelConfig(**settings.model), "train": TrainConfig(**settings.train)})

    def strategy_specs(self) -> list[dict[str, Any]]:
        """One entry per trained strategy: name and the :class:`PlanConfig` options it needs (files and plans that
        items name are read here: :func:`.spec_grammar.resolve`)."""
        specs = [spec for text in self.strategies for spec in spec_grammar.resolve(text, self)]
        return list({spec["name"]: spec for spec in specs}.values())


QUICK: dict[str, Any] = dict(
    docs=320, split_seeds=(), max_words=60, k=6, passes=3.0, max_repeats=(5,), seeds=(0,), curve_docs=64,
    embedder="hashing",
    model=ModelConfig(vocab_size=400, context=64, n_layer=1, n_head=2, d_model=64),
    train=TrainConfig(batch_size=8, warmup_steps=20, curve_points=4),
)


SKEWED: dict[str, Any] = dict(
    docs=3000, k=128, max_words=60, passes=3.0, max_repeats=(4, 6),
    strategies=(*ExperimentConfig().strategies, "clusterclip-spread"),
)
"""A regime where the clip matters: K=128 on 3,000 documents gives strongly skewed cluster sizes, so
uniform repeats its smallest clusters about passes x (mean size / smallest size) times while the caps
bind (``benchmarks/experiment/skewed_regime.py`` measures it)."""
PRESETS: dict[str, dict[str, Any]] = {"default": {}, "quick": QUICK, "skewed": SKEWED}


def quick_config(**overrides: Any) -> ExperimentConfig:
    """The ``--quick`` preset (seconds per run; exercises every code path, proves nothing)."""
    return ExperimentConfig(**{**QUICK, **overrides})


def preset_config(name: str, **overrides: Any) -> ExperimentConfig:
    """A named preset of :data:`PRESETS` with ``overrides`` applied."""
    if name not in PRESETS:
        raise SettingsError("preset", f"unknown preset {name!r}; choose from {', '.join(PRESETS)}", ExperimentConfig)
    return ExperimentConfig(**{**PRESETS[name], **overrides})
