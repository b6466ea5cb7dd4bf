"""Paired bootstrap intervals and verdicts: is a strategy's held-out loss lower than random's?

A strategy and ``random`` trained on the same (split, seed) pair share the held-out documents and the
model initialisation, so their difference is the unit of evidence. The interval resamples those pairs:
an *expanded* percentile bootstrap of their mean (Hesterberg 2015), whose tails are moved out so that it is
as wide as the Student-t interval would be for the same number of pairs. The plain percentile bootstrap is
too narrow with few pairs (it ignores that the spread itself is estimated: about 93 % coverage for 30
normal pairs, much less for 3-9); the expanded one keeps the bootstrap's shape and covers at about the
nominal rate. A verdict needs at least :data:`MIN_PAIRS` pairs *and* an interval that excludes zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

LEVEL = 0.95
RESAMPLES = 10_000
BOOTSTRAP_SEED = 0
MIN_PAIRS = 6
"""Fewer pairs than this give no verdict (``inconclusive``, with a ``note`` saying so). Six is the fewest
pairs with which any paired test that assumes nothing about the differences can reach the 5 % level: even
when every pair agrees in sign, the two-sided sign test gives p = 2 / 2**n, 0.0625 for five pairs and 0.031
for six. Below it an interval that excludes zero says more about the few pairs drawn than about the plan
(two pairs bound a bootstrap interval by their own two values)."""
CHUNK = 1 << 20
"""Resampled indices drawn per block, so memory stays bounded for many pairs."""


def bootstrap_means(values: np.ndarray, resamples: int = RESAMPLES, seed: int = BOOTSTRAP_SEED) -> np.ndarray:
    """Means of ``resamples`` resamples (with replacement, same size) of ``values``; seeded, vectorised."""
    v = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    rows = max(1, CHUNK // max(v.size, 1))
    out = np.empty(resamples, dtype=np.float64)
    for lo in range(0, resamples, rows):
        n = min(rows, resamples - lo)
        out[lo:lo + n] = v[rng.integers(0, v.size, size=(n, v.size))].mean(axis=1)
    return out


def expanded_tail(level: float, n: int) -> float:
    """The two-sided tail probability whose percentile bootstrap interval of a mean of ``n`` values is as wide
    as the Student-t ``level`` interval: ``2 Phi(-sqrt(n / (n - 1)) t_{n-1})`` (Hesterberg's expanded
    percentile interval). It tends to ``1 - level`` as ``n`` grows; for ``n`` below 2 it is 0 (the extremes)."""
    if n < 2:
        return 0.0
    from scipy.stats import t  # the t quantile; scipy is a core dependency

    q = float(t.ppf((1 + level) / 2, n - 1))
    return 2.0 * NormalDist().cdf(-math.sqrt(n / (n - 1)) * q)


def verdict(low: float, high: float, n: int, min_pairs: int = MIN_PAIRS) -> str:
    """``better`` when the whole interval of (strategy - random) is below zero (lower loss), ``worse``
    when it is above, else ``inconclusive`` (always with fewer than ``min_pairs`` pairs)."""
    if n < min_pairs:
        return "inconclusive"
    if high < 0:
        return "better"
    if low > 0:
        return "worse"
    return "inconclusive"


def too_few(n: int, min_pairs: int = MIN_PAIRS) -> str | None:
    """``too few pairs: n < MIN_PAIRS`` when ``n`` pairs cannot give a verdict, else None."""
    return f"too few pairs: {n} < {min_pairs}" if n < min_pairs else None


def paired_interval(diffs: Sequence[float], level: float = LEVEL, resamples: int = RESAMPLES,
                    seed: int = BOOTSTRAP_SEED, min_pairs: int = MIN_PAIRS) -> dict[str, Any]:
    """Mean of paired differences with its expanded-bootstrap ``level`` interval and verdict; ``note`` says when
    there are too few pairs for a verdict (``min_pairs``), whatever the interval."""
    d = np.asarray(diffs, dtype=np.float64)
    if d.size == 0:
        raise ValueError("no paired differences")
    means = bootstrap_means(d, resamples, seed)
    tail = expanded_tail(level, int(d.size))
    low, high = (float(x) for x in np.quantile(means, [tail / 2, 1 - tail / 2]))
    out = {"mean": round(float(d.mean()), 5), "low": round(low, 5), "high": round(high, 5), "n": int(d.size),
           "level": level, "wins": int((d < 0).sum()), "verdict": verdict(low, high, int(d.size), min_pairs),
           "min_pairs": min_pairs}
    note = too_few(int(d.size), min_pairs)
    if note:
        out["note"] = note
    return out


def format_interval(e: dict[str, Any] | None) -> str:
    """``+0.012 [-0.010, +0.034] inconclusive (2/8)``, ``-0.267 [-0.434, -0.100] inconclusive, too few pairs:
    2 < 6 (2/2)`` or ``–``."""
    if not e:
        return "–"
    note = f", {e['note']}" if e.get("note") else ""
    return f"{e['mean']:+.3f} [{e['low']:+.3f}, {e['high']:+.3f}] {e['verdict']}{note} ({e['wins']}/{e['n']})"
