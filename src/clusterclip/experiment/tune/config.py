"""The search's settings (:class:`TuneConfig`): the grid, the constraint, the halving schedule and the budget."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from clusterclip.experiment.config import ExperimentConfig, _ints, _strs
from clusterclip.experiment.specs import clusterclip_spec, plain_spec, temperature_spec
from clusterclip.mixture.predictors import PREDICTORS
from clusterclip.plan.config import DEFAULT_TAU, ORDERS
from clusterclip.settings import (
    Settings,
    SettingsError,
    at_least,
    between,
    each,
    finite,
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
    jobs: int = setting(1, check=at_least(1),
                        help="proxy runs trained at once, each in its own process with --threads torch threads "
                             "(on a GPU they share it); the choice does not depend on it")

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
        caps = self.default_caps(cfg)
        low = [c for c in caps if c <= cfg.passes]
        if low:
            raise SettingsError("caps", f"{low} must exceed {{passes}} {cfg.passes:g}", type(self))
        specs = [plain_spec("random"), plain_spec("uniform"), *(temperature_spec(t) for t in self.taus)]
        specs += [clusterclip_spec(c, order) for order in self.orders for c in caps]
        return specs
