"""Quantile tiers of a numeric field: ``np.quantile``'s edges (its default ``linear`` method, bit for bit) and each
value's tier, in a few comparison passes instead of a partition of a copy.

A strided sample brackets each order statistic the edges need between two sample values; one comparison pass per
bracket end counts the values below it and marks the few inside. The order statistics are then selected among the
marked values only, checked against the counts (a sample that misses falls back to ``np.quantile``), and
interpolated as NumPy interpolates them (``numpy/lib/_function_base_impl.py``: ``(n - 1) * q``, then ``_lerp``,
which takes ``b - (b - a) * (1 - t)`` where ``t >= 0.5``). A value's tier, the number of inner edges at or below
it, comes from its bracket; only the values inside a bracket are compared with the edge itself.
"""

from __future__ import annotations

import numpy as np

SAMPLE = 1 << 15
"""Values in the strided sample (more: tighter brackets, a longer sample sort)."""
SMALL = 1 << 18
"""Below this many values a plain ``np.quantile`` is as fast."""
FAST_TIERS = 6
"""Above this many tiers the brackets cost more passes than the partition they save."""
SIGMAS = 6.0
"""Half-width of a bracket in binomial standard deviations of the sample rank, plus a few ranks."""


def quantile_tiers(v: np.ndarray, tiers: int, ok: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(qs, index)``: ``qs = np.quantile(present, linspace(0, 1, tiers + 1))`` over the non-NaN values and
    ``index = searchsorted(qs[1:-1], v, side="right")`` (NaN: 0), as :func:`reference_tiers` computes them
    (``ok``: ``~np.isnan(v)``, when the caller has it)."""
    ok = ~np.isnan(v) if ok is None else ok
    n = int(np.count_nonzero(ok))
    if n < SMALL or not 2 <= tiers <= FAST_TIERS:
        return reference_tiers(v, tiers, ok)
    lo, hi = np.fmin.reduce(v), np.fmax.reduce(v)
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return reference_tiers(v, tiers, ok)
    q = np.linspace(0, 1, tiers + 1)
    vi = (n - 1) * q[1:-1]
    prev = np.floor(vi).astype(np.intp)
    nxt = np.minimum(prev + 1, n - 1)
    ranks = np.unique(np.r_[prev, nxt])
    sample = np.sort(v[:: max(1, v.size // SAMPLE)])
    sample = sample[~np.isnan(sample)]
    found = _select(v, ranks, sample, n) if sample.size >= 1024 else None
    if found is None:
        return reference_tiers(v, tiers, ok)
    stats, bracket = found
    a, b = stats[np.searchsorted(ranks, prev)], stats[np.searchsorted(ranks, nxt)]
    inner = _lerp(a, b, vi - prev)
    lows, highs = bracket[0], bracket[1]
    home = np.searchsorted(highs, inner, side="left")
    if (home >= lows.size).any() or (inner < lows[np.minimum(home, lows.size - 1)]).any():
        return reference_tiers(v, tiers, ok)  # an edge outside its bracket (values near the float range's ends)
    qs = np.r_[_lerp(np.array([lo]), np.array([lo]), np.zeros(1)), inner,
               _lerp(np.array([hi]), np.array([hi]), np.array([float(n)]))]
    return qs, _tiers(inner, home, bracket)


def reference_tiers(v: np.ndarray, tiers: int, ok: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The same by ``np.quantile`` and a comparison per edge (small inputs, and the fallback)."""
    ok = ~np.isnan(v) if ok is None else ok
    present = v if ok.all() else v[ok]
    qs = np.quantile(present, np.linspace(0, 1, tiers + 1)) if present.size else np.zeros(tiers + 1)
    return qs, tier_of(v, qs[1:-1])


def tier_of(v: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """``np.searchsorted(inner, v, side="right")`` (NaN: 0), by one comparison per edge when there are few (a binary
    search per value is several times slower there)."""
    if inner.size > 16:
        return np.searchsorted(inner, np.where(np.isnan(v), -np.inf, v), side="right")
    index = np.zeros(v.shape[0], np.int8)
    for edge in inner.tolist():
        index += v >= edge
    return index.astype(np.int64)


def _lerp(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
    """NumPy's quantile interpolation, operation for operation."""
    diff = b - a
    out = a + diff * t
    np.subtract(b, diff * (1 - t), out=out, where=t >= 0.5)
    return out


def _select(v: np.ndarray, ranks: np.ndarray, sample: np.ndarray, n: int,
            ) -> tuple[np.ndarray, tuple[np.ndarray, ...]] | None:
    """The order statistics ``ranks`` of the non-NaN values of ``v``, and the brackets: their ends, each value's
    bracket code (``2i + 1`` inside bracket ``i``, even between brackets), and the values inside one (where, what,
    which bracket). None when a bracket misses its rank."""
    m = sample.size
    p = ranks / max(n - 1, 1)
    width = SIGMAS * np.sqrt(m * p * (1 - p)) + 8
    j = p * (m - 1)
    lo_end = sample[np.clip(np.floor(j - width).astype(np.intp), 0, m - 1)]
    hi_end = sample[np.clip(np.ceil(j + width).astype(np.intp), 0, m - 1)]
    if (lo_end == hi_end).any():
        return None  # a value repeated across a whole bracket: most of the field would be inside it
    lows, highs, members = [float(lo_end[0])], [float(hi_end[0])], [[0]]
    for i in range(1, ranks.size):  # merge brackets that touch, and those of consecutive ranks (an edge's two)
        if float(lo_end[i]) <= highs[-1] or ranks[i] == ranks[i - 1] + 1:
            highs[-1] = max(highs[-1], float(hi_end[i]))
            members[-1].append(i)
        else:
            lows.append(float(lo_end[i]))
            highs.append(float(hi_end[i]))
            members.append([i])
    code = np.zeros(v.shape[0], np.int8)
    below = np.empty(len(lows), np.int64)
    inside = np.empty(len(lows), np.int64)
    ge = np.empty(v.shape[0], bool)
    for i, (low, high) in enumerate(zip(lows, highs, strict=True)):
        np.greater_equal(v, low, out=ge)
        at_or_above = int(np.count_nonzero(ge))
        code += ge
        np.greater(v, high, out=ge)
        above = int(np.count_nonzero(ge))
        code += ge
        below[i], inside[i] = n - at_or_above, at_or_above - above
    stats = np.empty(ranks.size)
    marked = np.flatnonzero(code & 1)
    values = v[marked]
    groups = code[marked] >> 1
    for i, idx in enumerate(members):
        local = ranks[idx] - below[i]
        if local.min() < 0 or local.max() >= inside[i]:
            return None
        part = values[groups == i]
        stats[idx] = np.partition(part, local)[local]
    return stats, (np.array(lows), np.array(highs), code, marked, values, groups)


def _tiers(inner: np.ndarray, home: np.ndarray, bracket: tuple[np.ndarray, ...]) -> np.ndarray:
    """The number of ``inner`` edges at or below each value (NaN: 0): by the value's bracket code (``home``: the
    bracket each edge lies in), and for the values inside an edge's bracket by comparing with the edge."""
    lows, _, code, marked, x, at = bracket
    table = np.zeros(2 * lows.size + 1, np.int8)
    for i in home.tolist():
        table[2 * i + 2:] += 1  # every code above the edge's bracket is past the edge
    index = table[code]
    for i, e in zip(home.tolist(), inner.tolist(), strict=True):
        index[marked] += (at == i) & (x >= e)
    return index.astype(np.int64)
