"""Where a fitted predictor may be believed: a trust region around the measured mixtures, and flags for
proposals that extrapolate.

A predictor fitted on a swarm knows the objective near the swarm's mixtures and nowhere else: a linear
law fitted on RegMix's 512 runs, in which no run put more than 2.6 % on Enron emails, extrapolates its
Enron coefficient to a 98.8 % Enron mixture and predicts a loss of 3.59 where no run got below 5.08. So:

* **Trust region.** A candidate may lie at most ``radius`` (total variation, ``0.5 * |a - b|_1``: the
  share of the tokens that would have to move) from some measured mixture. One farther away is pulled
  back along the segment to its nearest measured mixture until it is ``radius`` away (a convex
  combination of two feasible mixtures, so a cap that both meet still holds). The default radius is the
  swarm's own scale: the median distance from a run to its nearest other run, within
  :data:`RADIUS_BOUNDS`.
* **Flags.** A proposal is flagged when it lies outside the convex hull of the measured mixtures (with
  its distance to the hull and the domains most beyond the weights any run gave them) or when its
  predicted objective is below every measured one: both are extrapolations, not evidence.
* **Refusal.** A swarm whose weights never vary cannot teach a predictor anything about them:
  :func:`check_varies` refuses it with one line.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clusterclip.mixture.swarm import MixtureError, Swarm

RADIUS_BOUNDS: tuple[float, float] = (0.05, 0.5)
"""The adaptive radius is clipped to this range (total variation)."""
HULL_TOL = 1e-6
"""A mixture this close to the hull (total variation) is inside it."""
VARIES_TOL = 1e-9


def tv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Total variation distances between the rows of ``a`` (m, d) and ``b`` (n, d): shape (m, n)."""
    return 0.5 * np.abs(a[:, None, :] - b[None, :, :]).sum(axis=2)


def check_varies(swarm: Swarm) -> None:
    """Refuse a swarm whose runs all have the same mixture: a predictor would learn nothing about the weights."""
    if len(swarm) == 0 or float(np.ptp(swarm.weights, axis=0).max()) <= VARIES_TOL:
        raise MixtureError(f"the swarm's {len(swarm)} runs all have the same mixture: weights that never vary tell a "
                           "predictor nothing about them, so no mixture can be proposed from it")


def adaptive_radius(weights: np.ndarray, bounds: tuple[float, float] = RADIUS_BOUNDS) -> float:
    """The median total-variation distance from a run to its nearest other run, clipped to ``bounds``."""
    w = np.asarray(weights, dtype=np.float64)
    if len(w) < 2:
        return bounds[1]
    d = _nearest_other(w)
    return float(np.clip(np.median(d), *bounds))


def _nearest_other(w: np.ndarray, block: int = 256) -> np.ndarray:
    out = np.empty(len(w))
    for lo in range(0, len(w), block):
        d = tv(w[lo:lo + block], w)
        d[np.arange(len(d)), np.arange(lo, lo + len(d))] = np.inf
        out[lo:lo + block] = d.min(axis=1)
    return out


@dataclass(frozen=True)
class TrustRegion:
    """Mixtures within ``radius`` (total variation) of a measured mixture (``runs``), whose lowest measured
    objective is ``best``."""

    runs: np.ndarray
    radius: float
    best: float

    @classmethod
    def around(cls, swarm: Swarm, radius: float | None = None) -> TrustRegion:
        """The region around ``swarm``'s runs (``radius`` None: :func:`adaptive_radius`); refuses a swarm whose
        weights never vary."""
        check_varies(swarm)
        r = adaptive_radius(swarm.weights) if radius is None else float(radius)
        if not r > 0:
            raise MixtureError(f"trust radius must be > 0; got {radius}")
        return cls(np.asarray(swarm.weights, dtype=np.float64), r, float(np.min(swarm.objective)))

    def nearest(self, x: np.ndarray, block: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """Distance (total variation) from every row of ``x`` to its nearest measured mixture, and which."""
        x = np.atleast_2d(np.asarray(x, dtype=np.float64))
        dist, idx = np.empty(len(x)), np.empty(len(x), dtype=np.int64)
        for lo in range(0, len(x), block):
            d = tv(x[lo:lo + block], self.runs)
            idx[lo:lo + block] = d.argmin(axis=1)
            dist[lo:lo + block] = d[np.arange(len(d)), idx[lo:lo + block]]
        return dist, idx

    def pull(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows of ``x`` beyond the radius moved along the segment to their nearest measured mixture until they
        are ``radius`` from it; returns the moved rows and every row's distance before the move."""
        x = np.atleast_2d(np.asarray(x, dtype=np.float64))
        dist, idx = self.nearest(x)
        t = np.where(dist > self.radius, self.radius / np.where(dist > 0, dist, 1.0), 1.0)
        moved = self.runs[idx] + t[:, None] * (x - self.runs[idx])
        return moved / moved.sum(axis=1, keepdims=True), dist

    def flags(self, x: np.ndarray, predicted: np.ndarray, domains: tuple[str, ...]) -> list[list[str]]:
        """Why each row of ``x`` (predicted ``predicted``) is an extrapolation: outside the hull of the measured
        mixtures, or predicted below every measured objective. An empty list: neither."""
        x = np.atleast_2d(np.asarray(x, dtype=np.float64))
        hi, lo = self.runs.max(axis=0), self.runs.min(axis=0)
        out: list[list[str]] = []
        for row, pred in zip(x, np.asarray(predicted, dtype=np.float64), strict=True):
            found = []
            gap = hull_distance(row, self.runs)
            if gap > HULL_TOL:
                found.append(f"outside the hull of the {len(self.runs)} measured mixtures (total variation "
                             f"{gap:.3f} from it){_beyond(row, lo, hi, domains)}")
            if pred < self.best:
                found.append(f"predicted {pred:.4g}, below every measured objective (lowest {self.best:.4g})")
            out.append(found)
        return out


def _beyond(row: np.ndarray, lo: np.ndarray, hi: np.ndarray, domains: tuple[str, ...], top: int = 2) -> str:
    """The domains whose weight lies farthest outside the range the runs gave them."""
    excess = np.maximum(row - hi, lo - row)
    order = [int(j) for j in np.argsort(-excess, kind="stable")[:top] if excess[j] > HULL_TOL]
    if not order:
        return ""
    parts = [f"{domains[j]} {row[j]:.3f} (measured {lo[j]:.3f}-{hi[j]:.3f})" for j in order]
    return "; beyond the measured range: " + ", ".join(parts)


def hull_distance(x: np.ndarray, runs: np.ndarray) -> float:
    """Total-variation distance from ``x`` to the convex hull of ``runs`` (a linear programme: the closest
    mixture of the runs); 0 inside the hull."""
    from scipy.optimize import linprog  # scipy is a core dependency

    n, d = runs.shape
    # variables: lam (n, the hull point's coefficients), s (d, |x - runs.T lam| bounds); minimise sum(s) / 2
    cost = np.concatenate([np.zeros(n), np.full(d, 0.5)])
    a_ub = np.block([[-runs.T, -np.eye(d)], [runs.T, -np.eye(d)]])
    b_ub = np.concatenate([-x, x])
    a_eq = np.concatenate([np.ones(n), np.zeros(d)])[None, :]
    res = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=[1.0], bounds=(0, None), method="highs")
    if res.status != 0:  # never for a mixture and a non-empty swarm; be explicit rather than silent
        raise MixtureError(f"hull distance: linear programme failed ({res.message})")
    return max(float(res.fun), 0.0)
