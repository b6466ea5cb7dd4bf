"""The data the planner's steps pass along: the validated corpus, the sampling groups and their quotas."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Corpus:
    """The planner's inputs, validated: cluster ``labels`` [N], optional ``tokens`` [N], ``k`` clusters
    and their ``sizes`` (documents per cluster, counted once here)."""

    labels: np.ndarray
    tokens: np.ndarray | None
    k: int
    sizes: np.ndarray

    @property
    def n(self) -> int:
        return int(self.labels.shape[0])


@dataclass(frozen=True)
class Groups:
    """What the planner samples from: the clusters, or for ``random`` one group holding every document.

    ``sizes`` and ``unit_sizes`` (documents, or tokens in token mode) are per group.
    """

    labels: np.ndarray
    k: int
    sizes: np.ndarray
    unit_sizes: np.ndarray
    pseudo: bool


@dataclass(frozen=True)
class Quotas:
    """Per-group weights and integer quotas (in budget units), the cap, the water level and the jitter.

    ``u`` is each group's seeded jitter in [0, 1) (it places the group's draws in virtual time) and
    ``rank`` the groups ordered by it (ties in rounding and rounds go to groups first in ``rank``).
    """

    weights: np.ndarray
    quota: np.ndarray
    cap: int | None
    budget: int
    level: float
    u: np.ndarray
    rank: np.ndarray
