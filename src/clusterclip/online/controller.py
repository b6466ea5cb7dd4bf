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
from typing import Any

import numpy as np

from clusterclip.errors import ClusterClipError
from clusterclip.plan.config import PlanConfig

RULES = ("bandit", "gradient")
"""The update rules: ODM's EXP3 bandit on loss (the default) and exponentiated gradient on loss decrease."""
CONTROLLER_FORMAT = 1
WEIGHT_DECIMALS = 10
"""Weights are rounded to this many decimals before they name a plan, so a chain's bytes do not hang on the
last bits of ``exp``."""
TINY = 1e-12
"""Losses and weights below this are treated as 0 (no relative decrease of a zero loss, no log of a zero weight)."""


class ControllerError(ClusterClipError, ValueError):
    """An invalid controller setting, state or report."""


def guard(new: np.ndarray, prev: np.ndarray, floor: float, smoothing: float) -> np.ndarray:
    """``new`` mixed with the previous weights (share ``smoothing``), normalised, then mixed with uniform so
    every cluster keeps at least ``floor / K``: ``floor / K + (1 - floor) * w``. Sums to 1."""
    w = (1.0 - smoothing) * new / new.sum() + smoothing * prev / prev.sum()
    return floor / w.size + (1.0 - floor) * w / w.sum()


def exploration(k: int, rounds: float) -> float:
    """ODM's exploration rate after ``rounds`` rounds (at least 1): ``min(1/K, sqrt(ln K / (K rounds)))``."""
    return min(1.0 / k, math.sqrt(math.log(k) / (k * rounds))) if k > 1 else 1.0


def bandit_step(weights: np.ndarray, estimate: np.ndarray, sums: np.ndarray, counts: np.ndarray, rounds: float,
                eta: float | None, alpha: float, steps: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """One EXP3 update of ODM (Albalak et al. 2023, Algorithm 1) over a window of ``steps`` training steps.

    The reward of cluster ``c`` is the mean over its samples of ODM's importance-weighted loss ``loss / p_c``
    (``p_c`` its weight while they were drawn). The estimate is ODM's per-step moving average ``R_c <- alpha R_c
    + (1 - alpha) r_c`` applied over the window's steps, ``R_c <- alpha^steps R_c + (1 - alpha^steps) r_c``
    (clusters without samples keep theirs), and the weights ``(1 - K eps) softmax(eta R) + eps`` with ODM's
    exploration ``eps`` after ``rounds`` rounds (:func:`exploration`; a round is one training step, as in ODM)
    and ``eta = eps`` unless given. Returns ``(weights, estimate)``.
    """
    k = weights.size
    seen = counts > 0
    reward = np.divide(sums, counts * np.maximum(weights, TINY), out=np.zeros(k), where=seen)
    keep = alpha ** max(int(steps), 1)
    estimate = np.where(seen, keep * estimate + (1.0 - keep) * reward, estimate)
    eps = exploration(k, max(rounds, 1.0))
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


@dataclasses.dataclass(frozen=True)
class Controller:
    """The state of the online mixture: ``weights`` (sum 1), the per-cluster ``estimate`` the rule keeps
    (bandit: reward estimates, start 0; gradient: last mean loss, NaN until seen), the mean loss per cluster of
    the last window (``losses``, NaN where none), the number of updates ``step`` and of training steps reported
    ``rounds``, and the settings (``eta``, ``alpha``, ``floor``: each weight is at least ``floor / K``,
    ``smoothing``: share of the previous weights kept, ``seed``: the seed of the plans it writes)."""

    rule: str
    weights: tuple[float, ...]
    estimate: tuple[float, ...]
    losses: tuple[float, ...]
    step: int = 0
    rounds: float = 0.0
    eta: float | None = None
    alpha: float = 0.9
    floor: float = 0.1
    smoothing: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        k = len(self.weights)
        if self.rule not in RULES:
            raise ControllerError(f"rule must be one of {', '.join(RULES)}, got {self.rule!r}")
        if k < 1 or len(self.estimate) != k or len(self.losses) != k:
            raise ControllerError(f"weights, estimate and losses need one value per cluster (>= 1), got "
                                  f"{k}, {len(self.estimate)}, {len(self.losses)}")
        for name, lo, hi in (("alpha", 0.0, 1.0), ("floor", 0.0, 1.0), ("smoothing", 0.0, 1.0)):
            value = getattr(self, name)
            if not lo <= value <= hi:
                raise ControllerError(f"{name} must be in [{lo:g}, {hi:g}], got {value!r}")
        if self.eta is not None and not (math.isfinite(self.eta) and self.eta >= 0):
            raise ControllerError(f"eta must be finite and >= 0 (or None: the rule's default), got {self.eta!r}")

    @classmethod
    def start(cls, k: int, rule: str = "bandit", **settings: Any) -> Controller:
        """Uniform weights over ``k`` clusters, no estimates yet."""
        if k < 1:
            raise ControllerError(f"needs at least one cluster, got {k}")
        first = 0.0 if rule == "bandit" else math.nan
        return cls(rule, (1.0 / k,) * k, (first,) * k, (math.nan,) * k, **settings)

    def update(self, sums: Any, counts: Any, steps: int = 1) -> Controller:
        """The next state after a window of ``steps`` training steps whose samples (or tokens) of cluster ``c``
        number ``counts[c]`` and have losses summing to ``sums[c]`` (over every rank). Deterministic: the same
        state and window give the same bytes."""
        s, n = np.asarray(sums, np.float64), np.asarray(counts, np.float64)
        k = len(self.weights)
        if s.shape != (k,) or n.shape != (k,):
            raise ControllerError(f"sums and counts need {k} values (one per cluster), got {s.shape} and {n.shape}")
        if not (np.isfinite(s).all() and np.isfinite(n).all() and (n >= 0).all()):
            raise ControllerError("loss sums must be finite and sample counts finite and >= 0")
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
            raise ControllerError(f"steps must be an integer >= 1 (training steps in the window), got {steps!r}")
        w, est = np.asarray(self.weights), np.asarray(self.estimate, np.float64)
        if self.rule == "bandit":
            new, est = bandit_step(w, est, s, n, self.rounds + steps, self.eta, self.alpha, int(steps))
        else:
            new, est = gradient_step(w, est, s, n, self.eta)
        weights = guard(new, w, self.floor, self.smoothing)
        losses = np.divide(s, n, out=np.full(k, np.nan), where=n > 0)
        return dataclasses.replace(self, weights=tuple(weights.tolist()), estimate=tuple(est.tolist()),
                                   losses=tuple(losses.tolist()), step=self.step + 1,
                                   rounds=self.rounds + int(steps))

    def to_json(self) -> dict[str, Any]:
        """The state as JSON (NaN as null)."""
        out = dataclasses.asdict(self)
        out.update(format=CONTROLLER_FORMAT, weights=list(self.weights), estimate=_nan_list(np.asarray(self.estimate)),
                   losses=_nan_list(np.asarray(self.losses)))
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Controller:
        """A state written by :meth:`to_json`."""
        if not isinstance(obj, dict) or obj.get("format") != CONTROLLER_FORMAT:
            raise ControllerError(f"not a controller state of format {CONTROLLER_FORMAT}: {str(obj)[:80]}")
        fields = {f.name: obj[f.name] for f in dataclasses.fields(cls) if f.name in obj}
        for name in ("weights", "estimate", "losses"):
            fields[name] = tuple(math.nan if x is None else float(x) for x in obj[name])
        return cls(**fields)


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
