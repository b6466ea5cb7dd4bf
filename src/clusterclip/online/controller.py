"""The online mixture controller: per-cluster weights updated from the losses training reports.

A :class:`Controller` is a frozen, JSON-serialisable state of ``O(clusters)`` numbers; :meth:`Controller.update`
turns one window of per-cluster loss sums and sample counts into the next state. The two update rules are pure
functions of that state:

* :func:`bandit_step` (default, ``"bandit"``): EXP3 on per-cluster loss as in Online Data Mixing (ODM; Albalak,
  Pan, Raffel and Wang 2023, "Efficient Online Data Mixing For Language Model Pre-Training", arXiv:2312.02406).
* :func:`gradient_step` (``"gradient"``): exponentiated gradient on each cluster's loss decrease, the
  multiplicative update of DoReMi (Xie et al. 2023, arXiv:2305.10429) and Aioli (Chen et al. 2024,
  arXiv:2411.05735) driven by how fast a cluster's loss falls.

Both end in :func:`guard`: smoothing towards the previous weights and a floor towards uniform, so no cluster
starves. Clusters with no samples in a window keep their estimate.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from clusterclip.plan.config import PlanConfig
from clusterclip.settings import Settings, SettingsError, at_least, between, is_int, optional, setting

RULES = ("bandit", "gradient")
"""The update rules: ODM's EXP3 bandit on loss (the default) and exponentiated gradient on loss decrease."""
CONTROLLER_FORMAT = 2
"""Version of :meth:`Controller.to_json`: 2 adds ``explore`` and ``horizon`` (a state of format 1, written
before, reads as ODM's schedule, which it used)."""
READ_FORMATS = (1, 2)
WEIGHT_DECIMALS = 10
"""Weights are rounded to this many decimals before they name a plan, so a chain's bytes do not hang on the
last bits of ``exp``."""
TINY = 1e-12
"""Losses and weights below this are treated as 0 (no relative decrease of a zero loss, no log of a zero weight)."""
ODM = "odm"
DEFAULT_EXPLORE = 0.05
"""The bandit's default exploration: uniform weights for the first 5 % of the run's training steps, whatever K."""
SUM_TOLERANCE = 1e-6
"""How far from 1 a state's weights may sum (they are rounded nowhere, so only float error)."""


class ControllerError(SettingsError):
    """An invalid controller setting, state or report (one line naming the field)."""


def _explore(x: Any) -> str | None:
    if x == ODM or (_number(x) and 0 < x <= 1):
        return None
    return f"must be {ODM!r} (ODM's schedule) or a share of the run in (0, 1], got {x!r}"


def _number(x: Any) -> bool:
    return is_int(x) or (isinstance(x, (float, np.floating)) and math.isfinite(x))


def guard(new: np.ndarray, prev: np.ndarray, floor: float, smoothing: float) -> np.ndarray:
    """``new`` mixed with the previous weights (share ``smoothing``), normalised, then mixed with uniform so
    every cluster keeps at least ``floor / K``: ``floor / K + (1 - floor) * w``. Sums to 1."""
    w = (1.0 - smoothing) * new / new.sum() + smoothing * prev / prev.sum()
    return floor / w.size + (1.0 - floor) * w / w.sum()


def uniform_steps(k: int, explore: str | float = ODM, horizon: float | None = None) -> float:
    """The training steps during which the bandit's weights stay exactly uniform: ODM's ``K ln K``
    (``explore="odm"``, or while the run's ``horizon`` in steps is unknown), else ``explore x horizon``."""
    if explore == ODM or horizon is None:
        return k * math.log(k) if k > 1 else 0.0
    return float(explore) * float(horizon)


def exploration(k: int, rounds: float, explore: str | float = ODM, horizon: float | None = None) -> float:
    """The exploration rate ``eps`` after ``rounds`` rounds (at least 1): ``min(1, sqrt(u / rounds)) / K`` with
    ``u`` the :func:`uniform_steps`. With ODM's ``u = K ln K`` this is ODM's ``min(1/K, sqrt(ln K / (K t)))``;
    ``eps = 1/K`` keeps the weights uniform, so ODM's schedule holds them there for ``K ln K`` steps (110 at
    K = 32, 92,000 at 10^4) and a share of the run for ``explore`` x the run, at any K."""
    if k <= 1:
        return 1.0
    return min(1.0, math.sqrt(uniform_steps(k, explore, horizon) / max(rounds, 1.0))) / k


def bandit_step(weights: np.ndarray, estimate: np.ndarray, sums: np.ndarray, counts: np.ndarray, eps: float,
                eta: float | None, alpha: float, steps: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """One EXP3 update of ODM (Albalak et al. 2023, Algorithm 1) over a window of ``steps`` training steps.

    The reward of cluster ``c`` is the mean over its samples of ODM's importance-weighted loss ``loss / p_c``
    (``p_c`` its weight while they were drawn). The estimate is ODM's per-step moving average ``R_c <- alpha R_c
    + (1 - alpha) r_c`` applied over the window's steps, ``R_c <- alpha^steps R_c + (1 - alpha^steps) r_c``
    (clusters without samples keep theirs), and the weights ``(1 - K eps) softmax(eta R) + eps`` with the
    exploration ``eps`` (:func:`exploration`) and ``eta = eps`` unless given. Returns ``(weights, estimate)``.
    """
    k = weights.size
    seen = counts > 0
    reward = np.divide(sums, counts * np.maximum(weights, TINY), out=np.zeros(k), where=seen)
    keep = alpha ** max(int(steps), 1)
    estimate = np.where(seen, keep * estimate + (1.0 - keep) * reward, estimate)
    z = (eps if eta is None else eta) * estimate
    soft = np.exp(z - z.max())
    return (1.0 - k * eps) * soft / soft.sum() + eps, estimate


def gradient_step(weights: np.ndarray, estimate: np.ndarray, sums: np.ndarray, counts: np.ndarray,
                  eta: float | None) -> tuple[np.ndarray, np.ndarray]:
    """One exponentiated-gradient update on loss decrease (DoReMi's multiplicative weights, Xie et al. 2023;
    Aioli, Chen et al. 2024): ``w_c <- w_c exp(eta g_c)`` with ``g_c = (L_prev - L_now) / L_prev``, the
    relative decrease of the cluster's mean loss since its last window, scaled by ``max |g|`` (``eta``
    default 1). A cluster without samples now or before has ``g = 0`` and keeps its last loss (``estimate``,
    NaN until first seen). Returns ``(weights, estimate)``.
    """
    seen = counts > 0
    now = np.divide(sums, counts, out=np.full(weights.size, np.nan), where=seen)
    both = seen & (np.abs(estimate) > TINY)
    g = np.divide(estimate - now, np.abs(estimate), out=np.zeros(weights.size), where=both)
    top = float(np.abs(g).max(initial=0.0))
    if top > 0:
        g /= top
    z = np.log(np.maximum(weights, TINY)) + (1.0 if eta is None else eta) * g
    return np.exp(z - z.max()), np.where(seen, now, estimate)


def _nan_list(a: np.ndarray) -> list[float | None]:
    return [None if math.isnan(x) else float(x) for x in a.tolist()]


SETTINGS = ("eta", "alpha", "floor", "smoothing", "seed", "explore", "horizon")
"""The controller's settings (the rest of its fields are its state)."""


@dataclasses.dataclass(frozen=True)
class Controller(Settings):
    """The state of the online mixture: ``weights`` (sum 1), the per-cluster ``estimate`` the rule keeps
    (bandit: reward estimates, start 0; gradient: last mean loss, NaN until seen), the mean loss per cluster of
    the last window (``losses``, NaN where none), the number of updates ``step`` and of training steps reported
    ``rounds``, and the settings (:data:`SETTINGS`, each checked on construction: one line naming it)."""

    error_class: ClassVar[type[SettingsError]] = ControllerError

    rule: str = setting(choices=RULES, help="the update rule")
    weights: tuple[float, ...] = setting(help="the weights, one per cluster, summing to 1")
    estimate: tuple[float, ...] = setting(help="the rule's per-cluster estimate")
    losses: tuple[float, ...] = setting(help="the last window's mean loss per cluster (NaN: no sample)")
    step: int = setting(0, check=at_least(0), help="updates so far")
    rounds: float = setting(0.0, check=at_least(0, integer=False), help="training steps reported so far")
    eta: float | None = setting(None, check=optional(at_least(0, integer=False)),
                                help="the rule's step size (None: its default, the bandit's eps, 1 for gradient)")
    alpha: float = setting(0.9, check=between(0, 1, closed=True), help="the bandit's moving-average decay per step")
    floor: float = setting(0.1, check=between(0, 1, closed=True), help="every weight is at least floor / K")
    smoothing: float = setting(0.0, check=between(0, 1, closed=True), help="share of the previous weights kept")
    seed: int = setting(0, check=at_least(0), help="the seed of the plans it writes")
    explore: str | float = setting(DEFAULT_EXPLORE, check=_explore,
                                   help="the bandit's exploration schedule: 'odm' (uniform for K ln K steps, then "
                                        "ODM's decay) or the share of the run's steps it stays uniform, then decays")
    horizon: float | None = setting(None, check=optional(at_least(1, integer=False)),
                                    help="training steps of the whole run (None: unknown, ODM's K ln K applies)")

    def __post_init__(self) -> None:
        super().__post_init__()
        k = len(self.weights)
        if k < 1 or len(self.estimate) != k or len(self.losses) != k:
            raise ControllerError("weights", f"estimate and losses need one value per cluster (>= 1), got {k}, "
                                  f"{len(self.estimate)}, {len(self.losses)}", type(self))
        w = np.asarray(self.weights, np.float64)
        if not (np.isfinite(w).all() and (w >= 0).all() and abs(w.sum() - 1.0) <= SUM_TOLERANCE):
            raise ControllerError("weights", f"must be finite, >= 0 and sum to 1, got {_short(self.weights)} (sum "
                                  f"{w.sum():.6g})", type(self))
        finite_estimate = self.rule == "bandit"
        for name in ("estimate", "losses"):
            a = np.asarray(getattr(self, name), np.float64)
            bad = ~np.isfinite(a) if name == "estimate" and finite_estimate else np.isinf(a)
            if bad.any():
                nan = "" if finite_estimate and name == "estimate" else " or NaN"
                raise ControllerError(name, f"must be finite{nan}, got {_short(getattr(self, name))}", type(self))

    @classmethod
    def start(cls, k: int, rule: str = "bandit", **settings: Any) -> Controller:
        """Uniform weights over ``k`` clusters, no estimates yet; ``settings``: :data:`SETTINGS`."""
        if not is_int(k) or k < 1:
            raise ControllerError("k", f"must be an integer >= 1 (clusters), got {k!r}")
        unknown = sorted(set(settings) - set(SETTINGS))
        if unknown:
            raise ControllerError(unknown[0], f"is not a controller setting; settings: {', '.join(SETTINGS)}")
        first = 0.0 if rule == "bandit" else math.nan
        return cls(rule, (1.0 / k,) * k, (first,) * k, (math.nan,) * k, **settings)

    def exploration(self, rounds: float | None = None) -> float:
        """The bandit's ``eps`` after ``rounds`` training steps (default: those reported so far)."""
        return exploration(len(self.weights), self.rounds if rounds is None else rounds, self.explore, self.horizon)

    def update(self, sums: Any, counts: Any, steps: int = 1) -> Controller:
        """The next state after a window of ``steps`` training steps whose samples (or tokens) of cluster ``c``
        number ``counts[c]`` and have losses summing to ``sums[c]`` (over every rank). Deterministic: the same
        state and window give the same bytes."""
        s, n = np.asarray(sums, np.float64), np.asarray(counts, np.float64)
        k = len(self.weights)
        if s.shape != (k,) or n.shape != (k,):
            raise ControllerError("sums", f"and counts need {k} values (one per cluster), got {s.shape} and {n.shape}")
        if not (np.isfinite(s).all() and np.isfinite(n).all() and (n >= 0).all()):
            raise ControllerError("sums", "must be finite and sample counts finite and >= 0")
        if not is_int(steps) or steps < 1:
            raise ControllerError("steps", f"must be an integer >= 1 (training steps in the window), got {steps!r}")
        w, est = np.asarray(self.weights), np.asarray(self.estimate, np.float64)
        if self.rule == "bandit":
            eps = self.exploration(self.rounds + steps)
            new, est = bandit_step(w, est, s, n, eps, self.eta, self.alpha, int(steps))
        else:
            new, est = gradient_step(w, est, s, n, self.eta)
        weights = guard(new, w, self.floor, self.smoothing)
        losses = np.divide(s, n, out=np.full(k, np.nan), where=n > 0)
        return dataclasses.replace(self, weights=tuple(weights.tolist()), estimate=tuple(est.tolist()),
                                   losses=tuple(losses.tolist()), step=self.step + 1,
                                   rounds=self.rounds + int(steps))

    def unchanged(self, before: Controller) -> bool:
        """Whether this state's weights name the same plan as ``before``'s (equal at :data:`WEIGHT_DECIMALS`)."""
        return [round(w, WEIGHT_DECIMALS) for w in self.weights] == [round(w, WEIGHT_DECIMALS)
                                                                      for w in before.weights]

    def to_json(self) -> dict[str, Any]:
        """The state as JSON (NaN as null)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out.update(format=CONTROLLER_FORMAT, weights=list(self.weights), estimate=_nan_list(np.asarray(self.estimate)),
                   losses=_nan_list(np.asarray(self.losses)))
        return out

    @classmethod
    def from_json(cls, obj: Any, where: str = "the controller state") -> Controller:
        """A state written by :meth:`to_json` (format 1 or 2), field by field: an unknown or missing field, a
        value of the wrong type or out of range is one :class:`ControllerError` line naming it."""
        if not isinstance(obj, Mapping):
            raise ControllerError("", f"{where}: not a JSON object, got {type(obj).__name__}")
        version = obj.get("format")
        if version not in READ_FORMATS:
            raise ControllerError("", f"{where}: format {version!r} is not one this clusterclip reads "
                                  f"({', '.join(map(str, READ_FORMATS))})")
        names = {f.name for f in dataclasses.fields(cls)} - ({"explore", "horizon"} if version == 1 else set())
        required = ("rule", "weights", "estimate", "losses", "step", "rounds")
        unknown = sorted(set(obj) - names - {"format"})
        missing = [n for n in required if n not in obj]
        if unknown or missing:
            what = f"unknown field(s) {', '.join(unknown)}" if unknown else f"missing field(s) {', '.join(missing)}"
            raise ControllerError("", f"{where}: {what}")
        fields = {n: obj[n] for n in names if n in obj}
        for name in ("weights", "estimate", "losses"):
            values = obj[name]
            if not isinstance(values, list) or not all(x is None or _number(x) for x in values):
                raise ControllerError("", f"{where}: field {name!r} must be a list of numbers (null: NaN), got "
                                      f"{_short(values)}")
            fields[name] = tuple(math.nan if x is None else float(x) for x in values)
        if version == 1:
            fields["explore"] = ODM
        try:
            return cls(**fields)
        except ControllerError as exc:
            raise ControllerError("", f"{where}: {exc}") from None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def continuation_config(controller: Controller, root: PlanConfig, draw_weights: Any = None,
                        **changes: Any) -> PlanConfig:
    """The plan settings of a continuation steered by ``controller``: strategy ``weights`` with its weights, or
    ``draw_weights`` when given (the controller's converted to shares of draws, :func:`token_to_draw_weights`),
    rounded to :data:`WEIGHT_DECIMALS`; the root plan's cap, order and window, the controller's seed, and
    ``changes`` (a budget)."""
    chosen = controller.weights if draw_weights is None else np.asarray(draw_weights, np.float64).tolist()
    weights = tuple((c, round(w, WEIGHT_DECIMALS)) for c, w in enumerate(chosen))
    return PlanConfig(strategy="weights", weights=weights, max_repeat=root.effective_max_repeat, order=root.order,
                      window=root.window, seed=controller.seed, **changes)


def token_to_draw_weights(weights: Any, mean_tokens: Any) -> np.ndarray:
    """Shares of draws (documents) that give cluster ``c`` the share ``weights[c]`` of the *tokens*:
    ``w_c / m_c`` normalised, ``m_c`` the mean tokens of its documents. A continuation's budget is plan positions,
    so this keeps a token-budget run's meaning of a weight: ClusterClip balances the tokens of its clusters in
    such a run, and uniform weights continue it. Clusters without documents (``m_c = 0``) keep their weight."""
    w, m = np.asarray(weights, np.float64), np.asarray(mean_tokens, np.float64)
    per = np.divide(w, m, out=w.copy(), where=m > 0)
    return per / per.sum()
