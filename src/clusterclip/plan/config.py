"""Plan settings: the strategy, budget, cap, order and seed of one plan, and per-cluster weight files.

``PlanConfig`` is validated on construction; ``to_json()`` is its normalised form (what the plan
stage hashes) and ``name()`` its folder under ``plans/``.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterclip.plan import strategies
from clusterclip.plan.strategies import Strategy
from clusterclip.settings import Settings, SettingsError, at_least, between, one_of, optional, setting
from clusterclip.settings import is_int as is_int

STRATEGIES = tuple(strategies.STRATEGIES)
"""The names of the sampling strategies (``--strategy``) when this module was imported; the registry itself is
:data:`clusterclip.plan.strategies.STRATEGIES`, which validation reads."""
BUDGET_UNITS = ("docs", "tokens")
ORDERS = ("equal-rate", "spread")
DUPLICATES = ("none", "drop", "group-cap")
"""How a plan treats the ``dedup`` stage's groups: ignore them, plan only each group's representative, or
cap each group's draws together (``plan.duplicates``)."""
DEFAULT_ORDER = "equal-rate"
DEFAULT_TAU = 0.5
TAU_LIMIT = 1e6
"""``--tau`` is refused beyond +-this: already at +-1000 every weight goes to the largest (smallest) cluster of any
real corpus, and ``tau * log(n_c)`` must stay within the float range."""
MAX_BUDGET = 1 << 53
PLAN_FIELDS = ("strategy", "budget", "epochs", "budget_unit", "max_repeat", "tau", "order", "seed", "window",
               "duplicates")
"""The settings of :class:`PlanConfig` that are command-line options, in the order help and commands show them."""
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
                                   "group's kept document; group-cap: a group's members share one max_repeat")

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
        if self.duplicates == "group-cap" and self.budget_unit != "docs":
            raise PlanConfigError("duplicates", "'group-cap' needs --budget-unit docs (members differ in tokens)",
                                  type(self))
        if kind.USES_WEIGHTS:
            if self.weights is None:
                raise PlanConfigError("weights", f"must be given: {{strategy}} {self.strategy!r} needs per-cluster "
                                      "weights (see load_weights)", type(self))
            object.__setattr__(self, "weights", _normalise_weights(self.weights))
        elif self.weights is not None:
            users = " or ".join(repr(n) for n, c in strategies.STRATEGIES.items() if c.USES_WEIGHTS)
            raise PlanConfigError("weights", f"are only used by {{strategy}} {users}, not {self.strategy!r}",
                                  type(self))

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
        return "-".join(parts)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> PlanConfig:
        weights = obj.get("weights")
        return cls(strategy=obj.get("strategy", "clusterclip"), budget=obj.get("budget"),
                   budget_unit=obj.get("budget_unit", "docs"), max_repeat=obj.get("max_repeat"),
                   tau=DEFAULT_TAU if obj.get("tau") is None else obj["tau"],
                   weights=None if weights is None else tuple((int(c), float(w)) for c, w in weights),
                   seed=obj.get("seed", 0), window=obj.get("window"), order=obj.get("order", DEFAULT_ORDER),
                   duplicates=obj.get("duplicates", "none"), epochs=obj.get("epochs"))


def _normalise_weights(weights: Any) -> tuple[tuple[int, float], ...]:
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


def load_weights(path: str | os.PathLike[str]) -> tuple[tuple[int, float], ...]:
    """Per-cluster weights from a JSON object ``{"cluster": weight}`` or a CSV ``cluster,weight`` file.

    Clusters not named keep weight 1 (as in ``uniform``); weight 0 drops a cluster. The file is UTF-8 (a
    byte-order mark is ignored). A CSV header is a first row with no number in it (``cluster,weight``);
    any other row must be a cluster id (an integer; ``3.0`` is cluster 3) and a weight.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PlanConfigError(f"{path}: cannot read weights ({exc.strerror})") from exc
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise PlanConfigError(f"{path}: weights file is UTF-16 (it starts with a UTF-16 byte-order mark); save it as "
                              "UTF-8 text")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise PlanConfigError(f"{path}: weights file is not UTF-8 text (byte {exc.start}: "
                              f"{raw[exc.start:exc.start + 1]!r}); save it as UTF-8") from exc
    json_file = path.suffix.lower() == ".json" or text.lstrip().startswith("{")
    pairs = _json_weights(text, path) if json_file else _csv_weights(text, path)
    try:
        return _normalise_weights(pairs)
    except PlanConfigError as exc:
        raise PlanConfigError(f"{path}: {exc}") from None


def _json_weights(text: str, path: Path) -> list[tuple[int, float]]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanConfigError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from exc
    if not isinstance(obj, dict):
        raise PlanConfigError(f'{path}: expected a JSON object {{"cluster": weight, ...}}')
    pairs = []
    for k, v in obj.items():
        try:
            pairs.append((int(k), float(v)))
        except (TypeError, ValueError) as exc:
            raise PlanConfigError(f"{path}: entry {k!r}: {v!r} is not cluster id -> number") from exc
    return pairs


def _csv_weights(text: str, path: Path) -> list[tuple[Any, float]]:
    pairs: list[tuple[Any, float]] = []
    first = True
    for lineno, row in enumerate(csv.reader(text.splitlines()), start=1):
        if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
            continue
        cells = [c.strip() for c in row]
        numeric = [_number(c) is not None for c in cells]
        if first and not any(numeric):
            first = False
            continue  # a header: no number in it
        first = False
        if len(row) != 2:
            raise PlanConfigError(f"{path}:{lineno}: expected 'cluster,weight', got {','.join(row)!r}")
        if not all(numeric):
            bad = cells[numeric.index(False)]
            raise PlanConfigError(f"{path}:{lineno}: {bad!r} is not a number; expected 'cluster,weight' numbers, got "
                                  f"{','.join(row)!r}")
        c, w = _number(cells[0]), _number(cells[1])
        assert c is not None and w is not None
        if not (math.isfinite(c) and c == int(c) and c >= 0):
            raise PlanConfigError(f"{path}:{lineno}: cluster id {cells[0]!r} is not an integer >= 0 (row "
                                  f"{','.join(row)!r})")
        pairs.append((int(cells[0]) if cells[0].lstrip("+-").isdigit() else int(c), w))
    return pairs


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None
