"""The search's settings (:class:`TuneConfig`): the grid, the constraint, the halving schedule and the budget."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any

from clusterclip.experiment.config import ExperimentConfig, _ints, _read_setting, _strs
from clusterclip.experiment.spec_grammar import resolve
from clusterclip.experiment.specs import clusterclip_spec, plain_spec, temperature_spec
from clusterclip.mixture.predictors import PREDICTORS
from clusterclip.plan.config import DEFAULT_TAU, ORDERS, PlanConfig
from clusterclip.settings import (
    Settings,
    SettingsError,
    at_least,
    between,
    each,
    finite,
    is_text,
    one_of,
    optional,
    setting,
)

QUICK_TUNE: dict[str, Any] = {"taus": (DEFAULT_TAU,), "caps": (5,)}
"""What ``--quick`` changes in the search: one temperature and one cap (it also trains two seeds)."""
QUICK_SEEDS = (0, 1)
SEARCHES = ("grid", "weights")
NO_PREDICTOR = "none"
FITTED_PREDICTORS = tuple(PREDICTORS)
"""The predictors of :mod:`clusterclip.mixture.predictors` a search or ``--from-csv`` (``--swarm-predictor``) fits."""
PREDICTOR_NAMES = (NO_PREDICTOR, *FITTED_PREDICTORS)
"""The weight search's ``--predictor``: ``none`` (the default: every round draws afresh from round 0's
distribution; the ablation of docs/tune.md found no fitted predictor better) or a fitted predictor."""


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in _strs(text))


def tier_name(weights: str, cap: int) -> str:
    """A stratified candidate's name: ``clusterclip-tiers-<weights>-R<cap>`` (``0,1,1,2``: ``0-1-1-2``)."""
    return f"clusterclip-tiers-{re.sub(r'[^0-9A-Za-z_.]+', '-', weights).strip('-')}-R{cap}"


@dataclass(frozen=True)
class TuneConfig(Settings):
    """The search: the grid, the constraint, the halving schedule and the budget."""

    taus: tuple[float, ...] = setting((0.3, DEFAULT_TAU, 0.7), check=each(finite(), nonempty=False), parse=_floats,
                                      help="temperature grid, comma-separated (cluster weight n_c**tau)")
    caps: tuple[int, ...] = setting((), check=each(at_least(1), nonempty=False, distinct=True), parse=_ints,
                                    help="ClusterClip max-repeat grid, comma-separated; empty: 1.5, 2 and 3 x passes")
    orders: tuple[str, ...] = setting(ORDERS, check=each(one_of(ORDERS), nonempty=False), parse=_strs,
                                      help="ClusterClip orders to try, comma-separated")
    max_micro_regression: float = setting(
        0.02, check=between(0, 100, closed=True),
        help="a candidate may not raise the micro held-out loss above random's by more than this (nats/token): "
             "macro gains bought with the natural distribution's loss are refused")
    eta: int = setting(3, check=at_least(2), help="successive halving keeps the best 1/eta and gives them eta x pairs")
    max_runs: int | None = setting(None, check=optional(at_least(1)), parse=lambda t: int(t) or None,
                                   cli_none="0 for no limit",
                                   help="stop after this many proxy runs (finished ones reused count too); 0: no limit")
    max_minutes: float | None = setting(90.0, check=optional(between(0, 1e6, closed=True)),
                                        parse=lambda t: float(t) or None, cli_none="0 for no limit",
                                        help="stop starting search runs after this many minutes (the decision "
                                             "uses the last complete rung); 0: no limit")
    check_split_seeds: tuple[int, ...] = setting(
        (), check=each(at_least(0), nonempty=False, distinct=True), parse=_ints,
        help="split seeds never seen by the search: every candidate is rerun there and the choice compared "
             "with the best fixed candidate, comma-separated")
    plan_seed: int = setting(0, check=at_least(0), help="seed of the chosen plan for the whole corpus")
    search: tuple[str, ...] = setting(("grid",), check=each(one_of(SEARCHES)), parse=_strs,
                                      help="what to search, comma-separated: grid (the strategies above), weights "
                                           "(per-cluster mixtures under --weights-cap, docs/tune.md), or both")
    weights_cap: int | None = setting(None, check=optional(at_least(1)), parse=lambda t: int(t) or None,
                                      cli_none="0 for the default",
                                      help="max_repeat of the weight candidates; 0: 2 x passes")
    weight_rounds: int = setting(3, check=at_least(1), help="rounds of the weight search (the first is not predicted)")
    weight_runs: int = setting(6, check=at_least(2), help="weight candidates per round")
    weight_pairs: int = setting(2, check=at_least(1),
                                help="(split, seed) pairs each weight candidate is measured on in the rounds; the "
                                     "best 1/eta then get every search pair")
    max_groups: int = setting(8, check=at_least(2),
                              help="weights are searched over at most this many groups of clusters (Ward merge of "
                                   "the reference split's centroids); K <= this: one group per cluster")
    predictor: str = setting(NO_PREDICTOR, choices=PREDICTOR_NAMES,
                             help="how the weight search picks rounds after the first: none draws afresh from round "
                                  "0's distribution (as good as a fitted predictor in docs/tune.md's ablation, and "
                                  "cheaper); loglinear, linear or lightgbm (the extra) fit the objective on the runs "
                                  "so far and pick inside a trust region")
    weight_candidates: int = setting(2000, check=at_least(2), help="mixtures ranked per round by a fitted --predictor")
    strata: str | None = _read_setting(
        "strata", owner=PlanConfig,
        help="strata of the stratified ClusterClip candidates, as `clusterclip plan --strata` (cluster,quality:4; "
             "cluster,source): the fields the proxy data keeps (quality: --quality-scorer scores it); needs "
             "--tier-weight-grid (default: none)")
    tier_weight_grid: str | None = setting(
        None, check=optional(is_text),
        help="tier weights to search over --strata, ';'-separated, each as `clusterclip plan --tier-weights` "
             "('1,1,1,1;0,1,1,2'): one ClusterClip candidate (equal-rate order) per vector and cap, "
             "clusterclip-tiers-<weights>-R<cap> (default: none)")
    jobs: int = setting(1, check=at_least(1),
                        help="proxy runs trained at once, each in its own process with --threads torch threads "
                             "(on a GPU they share it); the choice does not depend on it")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.tier_vectors() and self.strata is None:
            raise SettingsError("tier_weight_grid", "needs {strata}: the strata whose tiers it weighs (e.g. "
                                "cluster,quality:4)", type(self))
        if self.strata is not None and not self.tier_vectors():
            raise SettingsError("strata", "applies with {tier_weight_grid}: the tier weights to search (e.g. "
                                "'1,1,1,1;0,1,1,2')", type(self))
        seen: dict[str | None, str] = {}
        for weights in self.tier_vectors():
            try:
                canon = PlanConfig(strategy="clusterclip", strata=self.strata, tier_weights=weights).tier_weights
            except SettingsError as exc:
                if exc.param == "strata":
                    raise SettingsError("strata", exc.problem, type(self)) from None
                raise SettingsError("tier_weight_grid", f"{weights!r}: {exc.problem}", type(self)) from None
            for key in (canon, tier_name(weights, 0)):
                if key in seen:
                    raise SettingsError("tier_weight_grid", f"{seen[key]!r} and {weights!r} are the same weights (or "
                                        "name); give each vector once", type(self))
                seen[key] = weights

    def tier_vectors(self) -> list[str]:
        """The vectors of ``tier_weight_grid`` (none without it)."""
        return [w.strip() for w in (self.tier_weight_grid or "").split(";") if w.strip()]

    def default_caps(self, cfg: ExperimentConfig) -> tuple[int, ...]:
        """``caps``, or 1.5, 2 and 3 x passes (each above the passes)."""
        return self.caps or tuple(sorted({max(math.floor(cfg.passes * f), math.floor(cfg.passes) + 1)
                                          for f in (1.5, 2, 3)}))

    def weight_cap(self, cfg: ExperimentConfig) -> int:
        """The weight candidates' ``max_repeat``: ``weights_cap``, else 2 x passes (above the passes)."""
        cap = self.weights_cap or max(math.floor(cfg.passes * 2), math.floor(cfg.passes) + 1)
        if cap <= cfg.passes:
            raise SettingsError("weights_cap", f"{cap} must exceed {{passes}} {cfg.passes:g}", type(self))
        return cap

    def check_unseen(self, cfg: ExperimentConfig) -> None:
        """Refuse check split seeds that the search trains on: the comparison on them would not be unseen."""
        seen = sorted(set(self.check_split_seeds) & set(cfg.splits()))
        if seen:
            raise SettingsError("check_split_seeds", f"{seen} are split seeds the search trains on ({cfg.splits()}); "
                                "unseen splits must differ from them", type(self))

    def grid(self, cfg: ExperimentConfig) -> list[dict[str, Any]]:
        """Every candidate's spec (``random`` first), named as the experiment names strategies; only random
        without ``grid`` in ``search``."""
        if "grid" not in self.search:
            return [plain_spec("random")]
        caps = self.grid_caps(cfg)
        specs = [plain_spec("random"), plain_spec("uniform"), *(temperature_spec(t) for t in self.taus)]
        specs += [clusterclip_spec(c, order) for order in self.orders for c in caps]
        return specs + [spec for item in self.tier_items(caps) for spec in resolve(item, cfg)]

    def grid_caps(self, cfg: ExperimentConfig) -> tuple[int, ...]:
        """The grid's ClusterClip caps (:meth:`default_caps`); refused at or below the passes."""
        caps = self.default_caps(cfg)
        low = [c for c in caps if c <= cfg.passes]
        if low:
            raise SettingsError("caps", f"{low} must exceed {{passes}} {cfg.passes:g}", type(self))
        return caps

    def tier_items(self, caps: tuple[int, ...]) -> list[str]:
        """The stratified candidates as ``--strategies`` items (:mod:`~clusterclip.experiment.spec_grammar`): one
        per ``tier_weight_grid`` vector and cap, over ``strata``."""
        return [f"clusterclip:strata=[{self.strata}],tier_weights=[{w}],max_repeat={c},name={tier_name(w, c)}"
                for w in self.tier_vectors() for c in caps]

    def proxy_config(self, cfg: ExperimentConfig) -> ExperimentConfig:
        """``cfg`` for the proxy runs: its strategies are random and the stratified candidates, so that the data
        preparation keeps (or scores) the per-document fields they read (:meth:`ExperimentConfig.input_fields`);
        ``cfg`` itself without them (the strategies change no run's numbers)."""
        if not self.tier_vectors() or "grid" not in self.search:
            return cfg
        return replace(cfg, strategies=("random", *self.tier_items(self.grid_caps(cfg))))
