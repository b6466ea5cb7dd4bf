"""Predictors of a run's objective (e.g. a validation loss) from its mixture weights.

One interface, :class:`Predictor`: ``fit(X, y) -> self`` and ``predict(X) -> ndarray``, with ``X`` of
shape (runs, domains) (rows on the simplex) and ``y`` of shape (runs,). Lower ``y`` is better.
:data:`PREDICTORS` maps a name to its class; :func:`make_predictor` builds one by name.

* ``loglinear``: the data mixing law of Ye et al. 2024, ``L(r) = c + k * exp(sum_j t_j r_j)`` with
  ``k > 0``, fitted by nonlinear least squares (:func:`scipy.optimize.least_squares`, trust region)
  on the standardised target. The start is deterministic: for three offsets ``c0`` below ``min(y)``
  the closed-form log-linear reparametrisation ``log(y - c0) = log k + t . r`` is solved by ridge
  least squares; each start is refined and the lowest final cost wins. A small ridge penalty on ``t``
  makes ``(log k, t)`` identifiable (weights sum to 1, so adding a constant to every ``t_j`` and
  subtracting it from ``log k`` changes nothing).
* ``linear``: ridge regression on the weights with an intercept (RegMix's linear baseline).
* ``lightgbm``: gradient-boosted trees (RegMix's and CLIMB's choice); ``lightgbm`` is imported when
  the predictor is built, so the rest of the package does not need it. Deterministic: fixed seed,
  ``deterministic=True``, ``force_row_wise=True``, ``num_threads=1``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from clusterclip.mixture.swarm import MixtureError

_MAX_EXP = 50.0


@runtime_checkable
class Predictor(Protocol):
    """Maps mixtures to a predicted objective; fitted on a swarm's runs."""

    name: str

    def fit(self, X: np.ndarray, y: np.ndarray) -> Predictor: ...

    def predict(self, X: np.ndarray) -> np.ndarray: ...


def _as_xy(X: np.ndarray, y: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] == 0 or not np.isfinite(X).all():
        raise MixtureError(f"mixtures must be a finite (runs, domains) array; got shape {X.shape}")
    if y is None:
        return X, None
    y = np.asarray(y, dtype=np.float64)
    if y.shape != (len(X),) or not np.isfinite(y).all():
        raise MixtureError(f"objective must be finite with shape ({len(X)},); got {y.shape}")
    if len(X) < 2:
        raise MixtureError("need at least 2 runs to fit a predictor")
    return X, y


class _Fitted:
    """Shared checks: predict before fit and a domain count that changed are errors."""

    name = ""
    _d: int | None = None

    def _check_predict(self, X: np.ndarray) -> np.ndarray:
        if self._d is None:
            raise RuntimeError(f"{self.name} predictor used before fit()")
        X, _ = _as_xy(X)
        if X.shape[1] != self._d:
            raise MixtureError(f"{self.name}: fitted on {self._d} domains, asked about {X.shape[1]}")
        return X


def _ridge(X: np.ndarray, y: np.ndarray, alpha: float) -> tuple[float, np.ndarray]:
    """Intercept and coefficients of ridge regression (intercept not penalised)."""
    xm, ym = X.mean(axis=0), y.mean()
    Xc = X - xm
    gram = Xc.T @ Xc
    lam = alpha * max(np.trace(gram) / X.shape[1], 1e-12)
    beta = np.linalg.solve(gram + lam * np.eye(X.shape[1]), Xc.T @ (y - ym))
    return float(ym - xm @ beta), beta


class LinearRidge(_Fitted):
    """``y = a + w . r``, ridge penalty ``alpha`` relative to the mean feature variance."""

    name = "linear"

    def __init__(self, alpha: float = 1e-3) -> None:
        self.alpha = alpha
        self.intercept_ = 0.0
        self.coef_ = np.zeros(0)

    def fit(self, X: np.ndarray, y: np.ndarray) -> LinearRidge:
        X, y = _as_xy(X, y)
        self.intercept_, self.coef_ = _ridge(X, y, self.alpha)
        self._d = X.shape[1]
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        X = self._check_predict(X)
        return self.intercept_ + X @ self.coef_


class LogLinearLaw(_Fitted):
    """Data mixing law ``L(r) = c + k * exp(t . r)`` (Ye et al. 2024), nonlinear least squares.

    ``ridge`` weighs the penalty ``ridge * n * |t|^2`` against the squared residuals of the
    standardised target; ``offsets`` are the starting ``min(z) - c0`` in standard deviations.
    """

    name = "loglinear"

    def __init__(self, ridge: float = 1e-6, offsets: tuple[float, ...] = (0.1, 1.0, 10.0),
                 max_nfev: int = 2000) -> None:
        self.ridge = ridge
        self.offsets = offsets
        self.max_nfev = max_nfev
        self.c_ = 0.0
        self.log_k_ = 0.0
        self.t_ = np.zeros(0)

    def _start(self, X: np.ndarray, z: np.ndarray, offset: float) -> np.ndarray:
        c0 = float(z.min()) - offset
        b0, t0 = _ridge(X, np.log(z - c0), 1e-3)
        return np.concatenate([[c0, b0], t0])

    def _solve(self, X: np.ndarray, z: np.ndarray, x0: np.ndarray) -> Any:
        from scipy.optimize import least_squares  # scipy is needed by this predictor only

        n, d = X.shape
        pen = np.sqrt(self.ridge * n)

        def resid(p: np.ndarray) -> np.ndarray:
            e = np.exp(np.clip(p[1] + X @ p[2:], -_MAX_EXP, _MAX_EXP))
            return np.concatenate([p[0] + e - z, pen * p[2:]])

        def jac(p: np.ndarray) -> np.ndarray:
            e = np.exp(np.clip(p[1] + X @ p[2:], -_MAX_EXP, _MAX_EXP))
            top = np.column_stack([np.ones(n), e, e[:, None] * X])
            bottom = np.column_stack([np.zeros((d, 2)), pen * np.eye(d)])
            return np.vstack([top, bottom])

        return least_squares(resid, x0, jac=jac, method="trf", max_nfev=self.max_nfev)

    def fit(self, X: np.ndarray, y: np.ndarray) -> LogLinearLaw:
        X, y = _as_xy(X, y)
        mu, sd = float(y.mean()), float(y.std())
        sd = sd if sd > 0 else 1.0
        z = (y - mu) / sd
        best = min((self._solve(X, z, self._start(X, z, o)) for o in self.offsets), key=lambda r: r.cost)
        c, b, t = best.x[0], best.x[1], best.x[2:]
        self.c_, self.log_k_, self.t_ = mu + sd * c, b + np.log(sd), t
        self._d = X.shape[1]
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        X = self._check_predict(X)
        return self.c_ + np.exp(np.clip(self.log_k_ + X @ self.t_, -_MAX_EXP, _MAX_EXP))


class LightGBMTrees(_Fitted):
    """Gradient-boosted regression trees (lightgbm), deterministic and single-threaded.

    Defaults follow RegMix's notebook where it is explicit (learning rate 0.01, LightGBM's default
    leaves and leaf size) with a fixed ``rounds`` instead of its early stopping on the training loss.
    """

    name = "lightgbm"

    def __init__(self, rounds: int = 1000, learning_rate: float = 0.01, num_leaves: int = 31,
                 min_data_in_leaf: int = 20, seed: int = 0, **params: Any) -> None:
        try:
            import lightgbm  # noqa: F401  (checked here so a missing package fails at construction)
        except ImportError as exc:
            raise MixtureError("the lightgbm predictor needs the lightgbm package: "
                               "pip install 'clusterclip[search]'") from exc
        self.rounds = rounds
        self.params: dict[str, Any] = {
            "objective": "regression", "learning_rate": learning_rate, "num_leaves": num_leaves,
            "min_data_in_leaf": min_data_in_leaf, "seed": seed, "deterministic": True,
            "force_row_wise": True, "num_threads": 1, "verbosity": -1, "feature_pre_filter": False,
            **params,
        }
        self.booster_: Any = None

    def fit(self, X: np.ndarray, y: np.ndarray) -> LightGBMTrees:
        import lightgbm

        X, y = _as_xy(X, y)
        data = lightgbm.Dataset(X, label=y, params={"verbosity": -1, "feature_pre_filter": False})
        self.booster_ = lightgbm.train(self.params, data, num_boost_round=self.rounds)
        self._d = X.shape[1]
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        X = self._check_predict(X)
        return np.asarray(self.booster_.predict(X, num_threads=1), dtype=np.float64)


PREDICTORS: dict[str, type[LinearRidge] | type[LogLinearLaw] | type[LightGBMTrees]] = {
    "loglinear": LogLinearLaw,
    "linear": LinearRidge,
    "lightgbm": LightGBMTrees,
}


def make_predictor(name: str, **kwargs: Any) -> Predictor:
    """A new, unfitted predictor by its registry name (keyword arguments go to its constructor)."""
    try:
        cls = PREDICTORS[name]
    except KeyError:
        raise MixtureError(f"unknown predictor {name!r}; choose from {', '.join(PREDICTORS)}") from None
    return cls(**kwargs)
