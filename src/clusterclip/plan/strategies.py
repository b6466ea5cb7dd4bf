"""The sampling strategies (``--strategy``), one class each, and their registry :data:`STRATEGIES`.

A strategy is a class over :class:`Strategy` that carries its name, its ``--strategy`` help, its default
cap, which options it takes (``tau``, per-cluster weights), whether it samples clusters (``random`` samples
one pseudo-cluster of every document) and each sampling group's target weight; adding one is its class (here
or in a module beside this one) plus one line in :data:`STRATEGIES`. The planner does the rest: quotas by
water-filling under the cap, passes, order and statistics (``docs/sampling.md``).

This module is light (NumPy only): :mod:`clusterclip.plan.config` reads the registry to validate a plan's
settings.
"""

from __future__ import annotations

from typing import ClassVar, Protocol

import numpy as np


class Options(Protocol):
    """What a strategy reads of a plan's settings (a :class:`~clusterclip.plan.config.PlanConfig`)."""

    @property
    def tau(self) -> float: ...

    @property
    def weights(self) -> tuple[tuple[int, float], ...] | None: ...


class Strategy:
    """A sampling strategy. Subclasses set ``name``, ``SUMMARY`` (its part of ``--strategy``'s help) and what
    applies (``DEFAULT_MAX_REPEAT``, ``USES_TAU``, ``USES_WEIGHTS``, ``CLUSTERED``, ``DRAWS_FROM``), and
    define :meth:`weights` (and :meth:`log_weights` when weights may leave the float range).

    Strategies are never instantiated: everything is a class attribute or a class method. ``sizes`` are the
    sampling groups' sizes in budget units (documents, or tokens), as int64; a group of size 0 has weight 0.
    """

    name: ClassVar[str]
    SUMMARY: ClassVar[str] = ""
    DEFAULT_MAX_REPEAT: ClassVar[int | None] = None
    """The cap on how often one document may appear when ``max_repeat`` is not given (None: no cap)."""
    USES_TAU: ClassVar[bool] = False
    """Takes ``tau`` (recorded, and part of the plan's name); otherwise ``tau`` is ignored."""
    USES_WEIGHTS: ClassVar[bool] = False
    """Takes per-cluster weights (which must then be given); otherwise giving them is an error."""
    CLUSTERED: ClassVar[bool] = True
    """Samples the clusters; False: one pseudo-cluster of every document (then ``order`` must be the default)."""
    DRAWS_FROM: ClassVar[str] = "all clusters"
    """What holds the documents a capped budget draws from, as the error for an infeasible budget names it."""

    @classmethod
    def weights(cls, sizes: np.ndarray, options: Options) -> np.ndarray:
        """Each group's target weight (float64, 0: not drawn); the planner uses them as given when they lie
        within ``e^+-300`` of 1."""
        raise NotImplementedError

    @classmethod
    def log_weights(cls, sizes: np.ndarray, options: Options) -> np.ndarray:
        """The natural log of each group's weight (``-inf``: weight 0), exact where the weights themselves
        would over- or underflow (the planner water-fills from them then); by default the log of
        :meth:`weights`."""
        with np.errstate(divide="ignore"):
            return np.log(cls.weights(sizes, options))


class Uniform(Strategy):
    """Balanced: every non-empty cluster the same weight."""

    name = "uniform"
    SUMMARY = "balanced"

    @classmethod
    def weights(cls, sizes: np.ndarray, options: Options) -> np.ndarray:
        return (sizes > 0).astype(np.float64)

    @classmethod
    def log_weights(cls, sizes: np.ndarray, options: Options) -> np.ndarray:
        logw = np.full(sizes.shape[0], -np.inf)
        logw[sizes > 0] = 0.0
        return logw


class ClusterClip(Uniform):
    """ClusterClip Sampling: balanced, with each document drawn at most ``max_repeat`` (default 4) times."""

    name = "clusterclip"
    SUMMARY = "balanced + repetition cap"
    DEFAULT_MAX_REPEAT = 4


class Random(Strategy):
    """Epochs of permutations: one pseudo-cluster of every document, weighted by its size."""

    name = "random"
    SUMMARY = "epochs of permutations"
    CLUSTERED = False
    DRAWS_FROM = "all documents"

    @classmethod
    def weights(cls, sizes: np.ndarray, options: Options) -> np.ndarray:
        return sizes.astype(np.float64)

    @classmethod
    def log_weights(cls, sizes: np.ndarray, options: Options) -> np.ndarray:
        present = sizes > 0
        logw = np.full(sizes.shape[0], -np.inf)
        logw[present] = np.log(sizes[present].astype(np.float64))
        return logw


class Temperature(Strategy):
    """Cluster weights ``n_c ** tau`` (1: natural, 0: uniform)."""

    name = "temperature"
    SUMMARY = "cluster weights n_c**tau"
    USES_TAU = True

    @classmethod
    def weights(cls, sizes: np.ndarray, options: Options) -> np.ndarray:
        present = sizes > 0
        w = np.zeros(sizes.shape[0])
        w[present] = sizes[present].astype(np.float64) ** float(options.tau)
        return w

    @classmethod
    def log_weights(cls, sizes: np.ndarray, options: Options) -> np.ndarray:
        present = sizes > 0
        logw = np.full(sizes.shape[0], -np.inf)
        with np.errstate(divide="ignore"):
            logw[present] = float(options.tau) * np.log(sizes[present].astype(np.float64))
        return logw


class Weights(Strategy):
    """The user's per-cluster weights (clusters not named keep weight 1; 0 drops a cluster)."""

    name = "weights"
    SUMMARY = "per-cluster weights"
    USES_WEIGHTS = True
    DRAWS_FROM = "the clusters with positive weight"

    @classmethod
    def weights(cls, sizes: np.ndarray, options: Options) -> np.ndarray:
        w = user_weights(options, sizes.shape[0])
        w[sizes <= 0] = 0.0
        return w

    @classmethod
    def log_weights(cls, sizes: np.ndarray, options: Options) -> np.ndarray:
        with np.errstate(divide="ignore"):
            logw = np.log(user_weights(options, sizes.shape[0]))
        logw[sizes <= 0] = -np.inf
        return logw


def user_weights(options: Options, k: int) -> np.ndarray:
    """The weight of each of ``k`` clusters: as ``options.weights`` names it, else 1 (the cluster ids are
    checked against ``k`` before: :func:`clusterclip.plan.weights.group_weights`)."""
    w = np.ones(k)
    pairs = options.weights or ()
    w[np.array([c for c, _ in pairs], dtype=np.int64)] = [v for _, v in pairs]
    return w


STRATEGIES: dict[str, type[Strategy]] = {cls.name: cls for cls in (
    ClusterClip,
    Uniform,
    Random,
    Temperature,
    Weights,
)}
"""Every sampling strategy by name, in the order ``--help`` lists them."""
