"""Paired bootstrap intervals and verdicts: is a strategy's held-out loss lower than random's?

A strategy and ``random`` trained on the same (split, seed) pair share the held-out documents and the
model initialisation, so their difference is the unit of evidence. The interval resamples those pairs
(a percentile bootstrap of their mean); a verdict is only drawn when the interval excludes zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

LEVEL = 0.95
RESAMPLES = 10_000
BOOTSTRAP_SEED = 0
MIN_PAIRS = 2
"""Fewer pairs than this give no verdict: one pair has no spread to judge its noise by."""
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


def verdict(low: float, high: float, n: int) -> str:
    """``better`` when the whole interval of (strategy - random) is below zero (lower loss), ``worse``
    when it is above, else ``inconclusive`` (also with fewer than ``MIN_PAIRS`` pairs)."""
    if n < MIN_PAIRS:
        return "inconclusive"
    if high < 0:
        return "better"
    if low > 0:
        return "worse"
    return "inconclusive"


def paired_interval(diffs: Sequence[float], level: float = LEVEL, resamples: int = RESAMPLES,
                    seed: int = BOOTSTRAP_SEED) -> dict[str, Any]:
    """Mean of paired differences with its percentile-bootstrap ``level`` interval and verdict."""
    d = np.asarray(diffs, dtype=np.float64)
    if d.size == 0:
        raise ValueError("no paired differences")
    means = bootstrap_means(d, resamples, seed)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    low, high = float(low), float(high)
    return {"mean": round(float(d.mean()), 5), "low": round(low, 5), "high": round(high, 5), "n": int(d.size),
            "level": level, "wins": int((d < 0).sum()), "verdict": verdict(low, high, int(d.size))}


def format_interval(e: dict[str, Any] | None) -> str:
    """``+0.012 [-0.010, +0.034] inconclusive (2/3)`` or ``–``."""
    if not e:
        return "–"
    return f"{e['mean']:+.3f} [{e['low']:+.3f}, {e['high']:+.3f}] {e['verdict']} ({e['wins']}/{e['n']})"
