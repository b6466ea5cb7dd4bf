"""Candidate mixtures around a prior, ranked by a fitted predictor; the next round of proxy runs.

All functions are pure and seeded (``numpy.random.default_rng(seed)``): the same arguments give the same
bytes. A ``feasible`` hook takes a batch of mixtures, shape (m, domains), and returns a boolean mask of
shape (m,); :func:`rowwise` adapts a check of one mixture. The default, :func:`accept_all`, accepts all.
The caller passes the planner's exact repetition-cap check there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from clusterclip.mixture.predictors import Predictor
from clusterclip.mixture.swarm import MixtureError, Swarm
from clusterclip.mixture.trust import TrustRegion

Feasible = Callable[[np.ndarray], np.ndarray]

DEFAULT_TAUS: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
"""Temperatures of :func:`temperature_candidates`: tau=1 is the prior itself, tau=0 uniform."""

CONCENTRATION: tuple[float, float] = (0.1, 5.0)
"""Range (log-uniform) of the Dirichlet scale: RegMix draws with the prior times 0.1..5."""

LOCAL_CONCENTRATION: tuple[float, float] = (20.0, 200.0)
"""Dirichlet scale of :func:`next_round`'s draws around the best runs so far (close to them)."""

_FLOOR = 1e-3


def accept_all(mixtures: np.ndarray) -> np.ndarray:
    """The default feasibility hook: every mixture is feasible."""
    return np.ones(len(mixtures), dtype=bool)


def rowwise(check: Callable[[np.ndarray], bool]) -> Feasible:
    """A batch ``feasible`` hook from a check of one mixture (a 1-D weight vector)."""

    def batch(mixtures: np.ndarray) -> np.ndarray:
        return np.fromiter((bool(check(m)) for m in mixtures), dtype=bool, count=len(mixtures))

    return batch


def _prior(prior: Sequence[float] | np.ndarray) -> np.ndarray:
    p = np.asarray(prior, dtype=np.float64)
    if p.ndim != 1 or len(p) == 0 or not np.isfinite(p).all() or (p < 0).any() or p.sum() <= 0:
        raise MixtureError(f"prior must be a non-empty vector of non-negative weights; got {p!r}")
    return p / p.sum()


def temperature_candidates(prior: Sequence[float] | np.ndarray,
                           taus: Sequence[float] = DEFAULT_TAUS) -> np.ndarray:
    """Temperature mixtures ``prior ** tau`` (normalised), one row per tau; zero weights stay zero
    (also at tau=0, which is then uniform over the domains the prior uses)."""
    p = _prior(prior)
    t = np.asarray(taus, dtype=np.float64)[:, None]
    w = np.where(p > 0, np.power(np.where(p > 0, p, 1.0), t), 0.0)
    return w / w.sum(axis=1, keepdims=True)


def dirichlet_candidates(prior: Sequence[float] | np.ndarray, n: int, *, seed: int = 0,
                         concentration: tuple[float, float] = CONCENTRATION) -> np.ndarray:
    """``n`` Dirichlet draws with parameter ``scale * prior``, ``scale`` (the total concentration)
    log-uniform in ``concentration`` per draw: small scales give sparse mixtures far from the prior,
    large ones mixtures close to it.

    A prior weight below 0.1 % of the largest is raised to it, so every domain can be drawn. Rows are
    normalised gamma draws; a row whose gammas all underflow to zero becomes the prior.
    """
    if n < 0:
        raise MixtureError(f"number of candidates must be >= 0; got {n}")
    lo, hi = concentration
    if not 0 < lo <= hi:
        raise MixtureError(f"concentration range must satisfy 0 < low <= high; got {concentration}")
    p = _prior(prior)
    base = np.maximum(p, _FLOOR * p.max())
    base = base / base.sum()
    rng = np.random.default_rng(seed)
    scale = np.exp(rng.uniform(np.log(lo), np.log(hi), size=n))
    g = rng.standard_gamma(scale[:, None] * base[None, :])
    sums = g.sum(axis=1, keepdims=True)
    return np.where(sums > 0, g / np.where(sums > 0, sums, 1.0), base)


def propose(prior: Sequence[float] | np.ndarray, n: int, *, seed: int = 0,
            taus: Sequence[float] = DEFAULT_TAUS, concentration: tuple[float, float] = CONCENTRATION,
            feasible: Feasible = accept_all, max_draws: int | None = None) -> np.ndarray:
    """Up to ``n`` feasible candidates: the temperature mixtures first, then Dirichlet draws.

    Draws in batches until ``n`` pass ``feasible`` or ``max_draws`` (default ``20 * n``) were tried. When
    the hook rejected too many (a tight cap leaves little room around the prior), the rejected draws, in
    order, are pulled towards a feasible ``prior`` until they pass (:func:`shrink_to_feasible`), so that
    the directions are kept; fewer than ``n`` rows come back only when the prior itself is infeasible.
    Deterministic in ``seed``.
    """
    if n < 0:
        raise MixtureError(f"number of candidates must be >= 0; got {n}")
    limit = max_draws if max_draws is not None else 20 * max(n, 1)
    cands = temperature_candidates(prior, taus) if taus else np.empty((0, len(_prior(prior))))
    kept = [_filter(cands[:n], feasible)]
    count, tried, batch = len(kept[0]), min(len(cands), n), 0
    rejected: list[np.ndarray] = []
    while count < n and tried < limit:
        size = min(max(n - count, 64) * 2, limit - tried)
        draws = dirichlet_candidates(prior, size, seed=_sub_seed(seed, batch), concentration=concentration)
        mask = _mask(draws, feasible)
        ok = draws[mask][: n - count]
        kept.append(ok)
        rejected.append(draws[~mask])
        count, tried, batch = count + len(ok), tried + size, batch + 1
    if count < n and rejected:
        p = _prior(prior)
        if _mask(p[None, :], feasible)[0]:
            pulled = shrink_to_feasible(np.vstack(rejected)[: 4 * (n - count)], p, feasible)
            kept.append(_distinct(pulled, np.vstack(kept))[: n - count])
    return np.vstack(kept)


def shrink_to_feasible(mixtures: np.ndarray, prior: np.ndarray, feasible: Feasible, steps: int = 16) -> np.ndarray:
    """Each row moved along the segment to a feasible ``prior`` to the farthest point ``feasible`` accepts
    (bisection, ``steps`` halvings; the feasible set of a cap is convex, so the segment leaves it once)."""
    lo, hi = np.zeros(len(mixtures)), np.ones(len(mixtures))
    for _ in range(steps):
        mid = (lo + hi) / 2
        ok = _mask(prior + mid[:, None] * (mixtures - prior), feasible)
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    out = prior + lo[:, None] * (mixtures - prior)
    return out / out.sum(axis=1, keepdims=True)


def _distinct(rows: np.ndarray, taken: np.ndarray, decimals: int = 6) -> np.ndarray:
    """``rows`` without those equal (rounded) to a row of ``taken`` or an earlier one."""
    seen = {tuple(r) for r in np.round(taken, decimals)}
    keep = []
    for i, r in enumerate(np.round(rows, decimals)):
        if tuple(r) not in seen:
            seen.add(tuple(r))
            keep.append(i)
    return rows[keep]


def _sub_seed(seed: int, batch: int) -> int:
    """Independent, reproducible seed of the ``batch``-th Dirichlet batch of ``seed``."""
    return int(np.random.SeedSequence([seed, batch]).generate_state(1)[0])


def _filter(mixtures: np.ndarray, feasible: Feasible) -> np.ndarray:
    if len(mixtures) == 0:
        return mixtures
    return mixtures[_mask(mixtures, feasible)]


def _mask(mixtures: np.ndarray, feasible: Feasible) -> np.ndarray:
    """``feasible(mixtures)``, checked to be a boolean mask with a value per row."""
    mask = np.asarray(feasible(mixtures))
    if mask.dtype != bool or mask.shape != (len(mixtures),):
        raise MixtureError(f"feasible hook must return a boolean mask of shape ({len(mixtures)},); "
                           f"got {mask.dtype} {mask.shape}")
    return mask


def rank_candidates(predictor: Predictor, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(order, predicted)``: candidate positions from best (lowest predicted objective) to worst, a
    stable sort (ties keep candidate order), and the prediction of every candidate."""
    pred = np.asarray(predictor.predict(candidates), dtype=np.float64)
    return np.argsort(pred, kind="stable"), pred


@dataclass(frozen=True)
class Proposal:
    """The next round: ``weights[i]`` with predicted objective ``predicted[i]``; ``explore[i]`` tells
    whether it was picked to explore (True) or to exploit (False). With a trust region (``radius``),
    ``distance[i]`` is the candidate's total-variation distance to the nearest measured mixture *before* it was
    pulled back (pulled when above ``radius``) and ``flags[i]`` why it still extrapolates
    (:meth:`~clusterclip.mixture.trust.TrustRegion.flags`; empty: it does not)."""

    weights: np.ndarray
    predicted: np.ndarray
    explore: np.ndarray
    distance: np.ndarray = field(default_factory=lambda: np.zeros(0))
    radius: float | None = None
    flags: tuple[tuple[str, ...], ...] = ()

    def pulled(self) -> np.ndarray:
        """Which rows the trust region pulled back towards a measured mixture."""
        if self.radius is None or len(self.distance) == 0:
            return np.zeros(len(self.weights), dtype=bool)
        return self.distance > self.radius


def _sq_dist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances, shape (len(a), len(b))."""
    d = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * (a @ b.T)
    return np.maximum(d, 0.0)


def _candidates(swarm: Swarm, prior: np.ndarray, n_candidates: int, seed: int, top: int,
                feasible: Feasible) -> np.ndarray:
    """Half around ``prior`` (temperatures + Dirichlet), half close to the ``top`` best runs so far."""
    wide = propose(prior, n_candidates - n_candidates // 2, seed=seed, feasible=feasible)
    best = np.argsort(swarm.objective, kind="stable")[:top]
    each = max(1, (n_candidates // 2) // max(len(best), 1))
    near = [dirichlet_candidates(swarm.weights[i], each, seed=_sub_seed(seed, 10_000 + k),
                                 concentration=LOCAL_CONCENTRATION) for k, i in enumerate(best)]
    return np.vstack([wide, *(_filter(c, feasible) for c in near)])


@dataclass(frozen=True)
class RoundConfig:
    """Settings of :func:`next_round` (see its rule)."""

    seed: int = 0
    n_candidates: int = 10_000
    explore: float = 0.25
    min_distance: float = 0.02
    top: int = 8
    trust: bool = True
    """Keep candidates within ``trust_radius`` of a measured mixture (:mod:`clusterclip.mixture.trust`)."""
    trust_radius: float | None = None
    """Total-variation radius of the trust region; None: the swarm's median nearest-neighbour distance."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.explore <= 1.0 or self.n_candidates < 2 or self.min_distance < 0 or self.top < 1 or \
                (self.trust_radius is not None and not self.trust_radius > 0):
            raise MixtureError(f"need 0 <= explore <= 1, n_candidates >= 2, min_distance >= 0, top >= 1, "
                               f"trust_radius > 0; got {self}")


def next_round(swarm: Swarm, predictor: Predictor, n: int, config: RoundConfig | None = None, *,
               prior: Sequence[float] | np.ndarray | None = None, feasible: Feasible = accept_all) -> Proposal:
    """Fit ``predictor`` on the swarm and return the ``n`` mixtures to run next.

    Candidates (``config.n_candidates``): half from :func:`propose` around ``prior`` (default: the
    swarm's mean mixture), half Dirichlet draws close to the ``config.top`` best runs so far
    (:data:`LOCAL_CONCENTRATION`); all must pass ``feasible``. The rule:

    * **exploit** ``n - round(explore * n)`` slots: candidates in order of predicted objective (best
      first), skipping any within Euclidean distance ``min_distance`` of a run in the swarm or of a
      mixture already picked;
    * **explore** the other slots: among the better half of the candidates by prediction, repeatedly
      the one farthest from every run and pick so far (farthest-point sampling), while that distance
      is at least ``min_distance``.

    With ``config.trust`` (the default) every candidate is first pulled back into the trust region around
    the swarm's mixtures (:class:`~clusterclip.mixture.trust.TrustRegion`), and each pick is flagged when it
    still extrapolates. A swarm whose weights never vary is refused. Fewer than ``n`` rows come back only
    when there are not enough feasible, distinct candidates.
    """
    cfg = config or RoundConfig()
    if n < 1:
        raise MixtureError(f"need n >= 1 mixtures; got {n}")
    region = TrustRegion.around(swarm, cfg.trust_radius)
    predictor.fit(swarm.weights, swarm.objective)
    p = _prior(swarm.weights.mean(axis=0) if prior is None else prior)
    if len(p) != len(swarm.domains):
        raise MixtureError(f"prior has {len(p)} weights, the swarm {len(swarm.domains)} domains")
    cands = _candidates(swarm, p, cfg.n_candidates, cfg.seed, cfg.top, feasible)
    before = region.nearest(cands)[0] if len(cands) else np.zeros(0)
    if cfg.trust and len(cands):
        cands, before = _pulled(region, cands, feasible)
    if len(cands) == 0:
        return Proposal(cands, np.zeros(0), np.zeros(0, dtype=bool))
    order, pred = rank_candidates(predictor, cands)
    picks, exploited = _pick(cands, order, swarm.weights, n, n - round(cfg.explore * n), cfg.min_distance)
    idx = np.asarray(picks, dtype=np.int64)
    flags = region.flags(cands[idx], pred[idx], swarm.domains)
    return Proposal(cands[idx], pred[idx], np.arange(len(idx)) >= exploited, before[idx],
                    region.radius if cfg.trust else None, tuple(tuple(f) for f in flags))


def _pulled(region: TrustRegion, cands: np.ndarray, feasible: Feasible) -> tuple[np.ndarray, np.ndarray]:
    """Candidates pulled into the trust region (those beyond it checked again by ``feasible``: a convex
    combination of two feasible mixtures is feasible for a cap, but a hook need not be convex), with their
    distances before the pull."""
    moved, before = region.pull(cands)
    far = before > region.radius
    keep = np.ones(len(moved), dtype=bool)
    if far.any():
        keep[far] = _mask(moved[far], feasible)
    return moved[keep], before[keep]


def _pick(cands: np.ndarray, order: np.ndarray, runs: np.ndarray, n: int, n_exploit: int,
          min_distance: float) -> tuple[list[int], int]:
    """Candidate positions picked by :func:`next_round`'s rule, and how many of them exploit."""
    floor = min_distance**2
    mind = _sq_dist(cands, runs).min(axis=1)
    picks: list[int] = []
    for i in order:
        if len(picks) == n_exploit:
            break
        if mind[i] >= floor:
            picks.append(int(i))
            mind = np.minimum(mind, _sq_dist(cands, cands[i : i + 1])[:, 0])
    exploited = len(picks)
    pool = order[: (len(order) + 1) // 2]
    while len(picks) < n:
        j = int(pool[np.argmax(mind[pool])])
        if mind[j] <= 0.0 or mind[j] < floor:
            break
        picks.append(j)
        mind = np.minimum(mind, _sq_dist(cands, cands[j : j + 1])[:, 0])
    return picks, exploited
