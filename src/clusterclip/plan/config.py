"""Plan settings: the strategy, budget, cap, order, seed and strata of one plan.

``PlanConfig`` is validated on construction; ``to_json()`` is its normalised form (what the plan
stage hashes) and ``name()`` its folder under ``plans/``. Weight files are read by
:mod:`clusterclip.plan.weights_file`, the strata settings parsed by :mod:`clusterclip.plan.strata_spec`.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from clusterclip.plan import strata_spec, strategies
from clusterclip.plan.strategies import Strategy
from clusterclip.settings import Settings, SettingsError, at_least, between, is_text, one_of, optional, setting
from clusterclip.settings import is_int as is_int

if TYPE_CHECKING:
    from clusterclip.contract.plan import PlanSettings

STRATEGIES = tuple(strategies.STRATEGIES)
"""The names of the sampling strategies (``--strategy``) when this module was imported; the registry itself is
:data:`clusterclip.plan.strategies.STRATEGIES`, which validation reads."""
BUDGET_UNITS = ("docs", "tokens")
ORDERS = ("equal-rate", "spread")
DUPLICATES = ("none", "drop", "group-cap", "rehydrate")
"""How a plan treats the ``dedup`` stage's groups: ignore them, plan only each group's representative, cap each
group's draws together, or cap (and weigh) each group by the rehydration curve of its size (``plan.duplicates``)."""
DEFAULT_ORDER = "equal-rate"
DEFAULT_TAU = 0.5
TAU_LIMIT = 1e6
"""``--tau`` is refused beyond +-this: already at +-1000 every weight goes to the largest (smallest) cluster of any
real corpus, and ``tau * log(n_c)`` must stay within the float range."""
MAX_BUDGET = 1 << 53
STRATA_FIELDS = ("rehydrate_curve", "strata", "tier_weights", "tier_caps", "within", "quality_mix")
"""The settings of strata, quality-weighted draws and rehydration (recorded only when set)."""
"""Largest budget: quotas are water-filled in float64, exact for integers up to 2^53 (a plan of 2^53 draws
would be 64 PiB; the plan stage also checks free space for the plan it is about to write). ``build_plan``
accepts 0 (an empty order); the plan stage refuses it."""


def _strategy(x: Any) -> str | None:
    """A registered strategy (read at validation, so a strategy registered after import is accepted)."""
    return one_of(strategies.STRATEGIES)(x)


def _default_caps() -> str:
    caps = [f"{cls.DEFAULT_MAX_REPEAT} for {name}" for name, cls in strategies.STRATEGIES.items()
            if cls.DEFAULT_MAX_REPEAT is not None]
    return ", ".join([*caps, "none otherwise"])


def _budget(x: Any) -> str | None:
    if x is None or (is_int(x) and 0 <= x <= MAX_BUDGET):
        return None
    return f"must be an integer in 1..{MAX_BUDGET} (or None: one epoch), got {x!r}"


class PlanConfigError(SettingsError):
    """An invalid planning option, ``PlanConfigError(param, problem)``, or (one argument, no parameter)
    an invalid input array or weights file."""

    def __init__(self, param: str, problem: str | None = None, owner: type | None = None) -> None:
        if problem is None:
            param, problem = "", param
        super().__init__(param, problem, owner)


@dataclass(frozen=True)
class PlanConfig(Settings):
    """Options of one plan; validated on construction. ``name()`` is its folder under ``plans/``."""

    error_class = PlanConfigError

    strategy: str = setting("clusterclip", check=_strategy,
                            help="; ".join(f"{name}: {cls.SUMMARY}" for name, cls in strategies.STRATEGIES.items()))
    budget: int | None = setting(None, check=_budget,
                                 help="draws (docs) or tokens to plan (default: one epoch: N documents or all tokens)")
    epochs: int | None = setting(None, check=optional(at_least(1)),
                                 help="the budget in passes over the corpus (N documents, or all tokens, each) when "
                                      "--budget is not given (default: 1)")
    budget_unit: str = setting("docs", choices=BUDGET_UNITS, help="unit of the budget")
    max_repeat: int | None = setting(None, check=optional(at_least(1)),
                                     help=f"cap on how often one document may appear (default: {_default_caps()})")
    tau: float = setting(DEFAULT_TAU, check=between(-TAU_LIMIT, TAU_LIMIT, closed=True),
                         help="temperature: cluster weight n_c**tau (1: natural, 0: uniform)")
    weights: tuple[tuple[int, float], ...] | None = setting(
        None, help="(cluster, weight) pairs of strategy weights (see load_weights); 0 drops a cluster")
    seed: int = setting(0, check=at_least(0), help="plan seed")
    window: int | None = setting(None, check=optional(at_least(1)),
                                 help="window (in draws) of the mixture statistics (default: budget/100)")
    order: str = setting(DEFAULT_ORDER, choices=ORDERS,
                         help="equal-rate: the paper's schedule, balanced first, clipped clusters drop out as they "
                              "run out; spread: the same draws with each cluster's spread evenly over the whole "
                              "run (cluster strategies only)")
    duplicates: str = setting("none", choices=DUPLICATES,
                              help="near-duplicate groups of `clusterclip dedup`: none: ignored; drop: plan only each "
                                   "group's kept document; group-cap: a group's members share one max_repeat; "
                                   "rehydrate: a group of m copies is drawn at the rate and up to the cap that "
                                   "--rehydrate-curve gives m (FineWeb-2's rehydration)")
    rehydrate_curve: str | None = setting(
        None, check=optional(is_text),
        help="--duplicates rehydrate: SIZE:TIMES pairs; a group of m copies may be drawn TIMES times for the last "
             "SIZE <= m, and is drawn TIMES times as often as a single document of its cluster (default: FineWeb-2's "
             f"{strata_spec.curve_text(strata_spec.FINEWEB2_CURVE)})")
    strata: str | None = setting(
        None, check=optional(is_text),
        help="balance over strata: cluster,FIELD:TIERS (TIERS quantile tiers of a numeric field) or cluster,FIELD "
             "(the values of a categorical one), fields kept with --keep-fields; clusters are balanced as the "
             "strategy says, the tiers inside a cluster by --tier-weights (default: no strata)")
    tier_weights: str | None = setting(
        None, check=optional(is_text),
        help="per-document draw rate of each tier inside its cluster, e.g. 0,1,1,2,4 (tiers of the first field: tier 0 "
             "never, tier 4 four times as often as tier 1) or FIELD=LABEL:W,...;FIELD2=... (default: 1 each)")
    tier_caps: str | None = setting(
        None, check=optional(is_text), flag="--max-repeats-by-tier",
        help="cap on how often a document of each tier may appear, written as --tier-weights, e.g. 0,1,2,3,4 "
             "(default: --max-repeat for every tier)")
    within: str | None = setting(
        None, check=optional(is_text),
        help="quality-weighted draws inside each cluster by the numeric FIELD (kept with --keep-fields): a document's "
             "rate grows with its quality rank in its cluster, mixed with an even draw by --quality-mix (default: "
             "an even draw)")
    quality_mix: float = setting(
        0.5, check=between(0, 1, closed=True),
        help="--within: 0 draws a cluster's documents evenly (diversity only), 1 at a rate proportional to their "
             "quality rank (the best twice the mean, the worst never)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.epochs is not None and self.budget is not None:
            raise PlanConfigError("epochs", "and {budget} are two budgets: give one", type(self))
        if self.epochs == 1:
            object.__setattr__(self, "epochs", None)  # one epoch is the default: the same plan
        kind = self.strategy_class
        if self.order != DEFAULT_ORDER and not kind.CLUSTERED:
            raise PlanConfigError("order", f"{self.order!r} applies to the cluster strategies, not {{strategy}} "
                                  f"{self.strategy!r} (which is {kind.SUMMARY})", type(self))
        if self.duplicates in ("group-cap", "rehydrate") and self.budget_unit != "docs":
            raise PlanConfigError("duplicates", f"{self.duplicates!r} needs --budget-unit docs (members differ in "
                                  "tokens)", type(self))
        self._normalise_strata()
        if kind.USES_WEIGHTS:
            if self.weights is None:
                raise PlanConfigError("weights", f"must be given: {{strategy}} {self.strategy!r} needs per-cluster "
                                      "weights (see load_weights)", type(self))
            object.__setattr__(self, "weights", normalise_weights(self.weights))
        elif self.weights is not None:
            users = " or ".join(repr(n) for n, c in strategies.STRATEGIES.items() if c.USES_WEIGHTS)
            raise PlanConfigError("weights", f"are only used by {{strategy}} {users}, not {self.strategy!r}",
                                  type(self))

    def _normalise_strata(self) -> None:
        """Parse the strata settings and keep their canonical spelling; refuse those that need another."""
        try:
            canon = strata_spec.canonical(self.strata, self.tier_weights, self.tier_caps, self.rehydrate_curve,
                                          self.duplicates == "rehydrate")
        except strata_spec.SpecError as exc:
            raise PlanConfigError(exc.param, str(exc), type(self)) from None
        for name, value in canon.items():
            object.__setattr__(self, name, value)
        if self.within is None and self.quality_mix != 0.5:
            raise PlanConfigError("quality_mix", "applies with {within} FIELD", type(self))
        if self.within is not None and any(c in self.within for c in ",:;="):
            raise PlanConfigError("within", f"names one numeric field, got {self.within!r}", type(self))

    def field_names(self) -> list[str]:
        """The per-document fields the strata settings read (``--strata`` axes, ``--within``), in order."""
        axes = strata_spec.parse_strata(self.strata) if self.strata is not None else ()
        return list(dict.fromkeys([*(a.field for a in axes), *([self.within] if self.within else [])]))

    @property
    def stratified(self) -> bool:
        """Whether the plan samples strata inside the clusters: field tiers, quality-weighted draws, or the
        rehydration of duplicate groups (:mod:`clusterclip.plan.strata`)."""
        return self.strata is not None or self.within is not None or self.duplicates == "rehydrate"

    def strata_json(self) -> dict[str, Any]:
        """The strata settings that are set, as :meth:`to_json` records them."""
        out: dict[str, Any] = {k: getattr(self, k) for k in ("strata", "tier_weights", "tier_caps", "within")
                               if getattr(self, k) is not None}
        if self.within is not None:
            out["quality_mix"] = float(self.quality_mix)
        if self.rehydrate_curve is not None:
            out["rehydrate_curve"] = self.rehydrate_curve
        return out

    @property
    def strategy_class(self) -> type[Strategy]:
        """The class of the strategy (:data:`clusterclip.plan.strategies.STRATEGIES`)."""
        return strategies.STRATEGIES[self.strategy]

    def budget_for(self, total: int) -> int:
        """The budget in force for a corpus of ``total`` documents or tokens: ``budget``, else ``epochs`` x it."""
        return int(self.budget) if self.budget is not None else total * (self.epochs or 1)

    @property
    def effective_max_repeat(self) -> int | None:
        """The cap in force: ``max_repeat``, or the strategy's default (4 for clusterclip, no cap otherwise)."""
        if self.max_repeat is not None:
            return int(self.max_repeat)
        if self.duplicates == "rehydrate":
            return None  # the rehydration curve caps each group
        return self.strategy_class.DEFAULT_MAX_REPEAT

    def to_json(self) -> dict[str, Any]:
        """Normalised options: equal plans have equal JSON (defaults resolved, unused options None)."""
        dup = {} if self.duplicates == "none" else {"duplicates": self.duplicates}
        epochs = {} if self.epochs is None else {"epochs": int(self.epochs)}
        return {
            "strategy": self.strategy,
            "budget": None if self.budget is None else int(self.budget),
            "budget_unit": self.budget_unit,
            "max_repeat": self.effective_max_repeat,
            "tau": float(self.tau) if self.strategy_class.USES_TAU else None,
            "weights": [[c, w] for c, w in self.weights] if self.weights is not None else None,
            "seed": int(self.seed),
            "window": None if self.window is None else int(self.window),
            "order": self.order,
            **epochs,
            **dup,
            **self.strata_json(),
        }

    def name(self) -> str:
        """Stable, filesystem-safe folder name, unique per option set."""
        parts = [self.strategy]
        if self.strategy_class.USES_TAU:
            parts.append(f"t{float(self.tau):g}")
        if self.weights is not None:
            digest = hashlib.sha256(json.dumps(self.to_json()["weights"]).encode()).hexdigest()[:10]
            parts.append(f"w{digest}")
        cap = self.effective_max_repeat
        parts.append(f"R{cap}" if cap is not None else "Rinf")
        parts.append(self.budget_unit)
        epochs = "Bepoch" if self.epochs is None else f"B{int(self.epochs)}epochs"
        parts.append(epochs if self.budget is None else f"B{int(self.budget)}")
        parts.append(f"s{int(self.seed)}")
        if self.window is not None:
            parts.append(f"win{int(self.window)}")
        if self.order != DEFAULT_ORDER:
            parts.append(self.order)
        if self.duplicates != "none":
            parts.append(self.duplicates)
        strata = self.strata_json()
        if strata:
            parts.append("strata" + hashlib.sha256(json.dumps(strata, sort_keys=True).encode()).hexdigest()[:10])
        return "-".join(parts)

    @classmethod
    def from_recorded(cls, settings: PlanSettings) -> PlanConfig:
        """The settings a plan's record holds (:class:`clusterclip.contract.plan.PlanSettings`), validated against the
        strategy registry."""
        return cls.from_json(settings.to_json())

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> PlanConfig:
        weights = obj.get("weights")
        return cls(strategy=obj.get("strategy", "clusterclip"), budget=obj.get("budget"),
                   budget_unit=obj.get("budget_unit", "docs"), max_repeat=obj.get("max_repeat"),
                   tau=DEFAULT_TAU if obj.get("tau") is None else obj["tau"],
                   weights=None if weights is None else tuple((int(c), float(w)) for c, w in weights),
                   seed=obj.get("seed", 0), window=obj.get("window"), order=obj.get("order", DEFAULT_ORDER),
                   duplicates=obj.get("duplicates", "none"), epochs=obj.get("epochs"),
                   **{k: obj[k] for k in STRATA_FIELDS if obj.get(k) is not None})


def normalise_weights(weights: Any) -> tuple[tuple[int, float], ...]:
    items = weights.items() if isinstance(weights, dict) else weights
    out: dict[int, float] = {}
    for item in items:
        try:
            c, w = item
            c_f, w_f = float(c), float(w)
        except (TypeError, ValueError, OverflowError) as exc:
            raise PlanConfigError(f"weights must be (cluster, weight) pairs, got {item!r}") from exc
        if isinstance(c, bool) or not math.isfinite(c_f) or c_f != int(c_f) or c_f < 0:
            raise PlanConfigError(f"weights: cluster ids are integers >= 0, got {c!r}")
        c_int = int(c) if is_int(c) else int(c_f)
        if not math.isfinite(w_f) or w_f < 0:
            raise PlanConfigError(f"weights: cluster {c_int} has weight {w!r}; weights must be finite and >= 0")
        if c_int in out:
            raise PlanConfigError(f"weights: cluster {c_int} is given twice")
        out[c_int] = w_f
    if not out:
        raise PlanConfigError("weights: no clusters given")
    return tuple(sorted(out.items()))
