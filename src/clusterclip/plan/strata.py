"""Strata: each cluster crossed with tiers of per-document fields, every stratum with a draw rate and a cap.

A *tier* is a combination of one label per axis: a quantile tier of a numeric field (``quality:5`` gives
tiers ``0``..``4``), a value of a categorical field, ``missing`` for documents without the field, and two
axes the planner adds itself: the quality bins of ``--within`` (eight quantile bins of the field *inside*
each cluster, rate ``1 - a + 2a (b + 0.5) / 8`` for bin ``b`` and ``a = --quality-mix``: mean 1) and the
rehydration classes of ``--duplicates rehydrate`` (a group of ``m`` copies gets rate and cap ``curve(m)``).

A tier's *rate* is the product of its labels' ``--tier-weights`` (default 1): the per-document draw rate
relative to the cluster's other documents, so tier 4 at weight 4 is drawn four times as often, document for
document, as tier 1 at weight 1; rate 0 never draws it. Its *cap* is the least of its labels'
``--max-repeats-by-tier`` and ``--max-repeat``. A stratum is one (cluster, tier) pair holding documents;
strata are numbered in (cluster, tier) order. Quantile edges are over the whole corpus, ties going to the
upper tier (a field with few distinct values gives fewer, uneven tiers: the edges are recorded).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from clusterclip.plan.config import PlanConfig, PlanConfigError
from clusterclip.plan.quantiles import quantile_tiers
from clusterclip.plan.strata_spec import MISSING, Axis, parse_curve, parse_strata, parse_tier_values

WITHIN_BINS = 8
"""Quantile bins of the ``--within`` field inside each cluster."""


@dataclass(frozen=True)
class FieldValues:
    """One per-document field: float64 ``values`` (NaN: missing) for a numeric field, or int ``values`` (codes,
    -1: missing) into ``categories`` for a categorical one."""

    values: np.ndarray
    categories: tuple[str, ...] | None = None

    @property
    def numeric(self) -> bool:
        return self.categories is None


def field_values(x: Any) -> FieldValues:
    """``x`` as :class:`FieldValues`: a run's kept field as it is; an array of numbers numeric (NaN missing), of
    anything else categorical (None missing)."""
    if isinstance(x, FieldValues):
        return x
    if hasattr(x, "values") and hasattr(x, "categories"):  # a run's kept field (the corpus contract's DocField)
        cats = x.categories
        values = np.asarray(x.values)
        return FieldValues(values.astype(np.float64, copy=False) if cats is None else values.astype(np.int64),
                           None if cats is None else tuple(cats))
    arr = np.asarray(x)
    if arr.dtype.kind in "biuf":
        return FieldValues(arr.astype(np.float64, copy=False))
    present = np.array([v is not None and v == v for v in arr.tolist()], bool)
    text = np.array([str(v) for v in arr[present].tolist()], dtype=object)
    cats, codes = np.unique(text.astype(str), return_inverse=True) if text.size else (np.zeros(0, str), [])
    out = np.full(arr.shape[0], -1, np.int32)
    out[present] = codes
    return FieldValues(out, tuple(cats.tolist()))


@dataclass(frozen=True)
class Strata:
    """The strata of a plan's units (documents, or duplicate groups).

    ``unit``: stratum of each unit; per stratum its ``cluster``, ``tier`` (into ``tier_labels``), ``rate`` and
    ``cap`` (inf: none); ``unit_tier``: tier of each unit; ``tier_rate``/``tier_cap`` per tier; ``edges``: the
    quantile edges of each numeric axis."""

    unit: np.ndarray
    cluster: np.ndarray
    tier: np.ndarray
    tier_labels: tuple[str, ...]
    tier_rate: np.ndarray
    tier_cap: np.ndarray
    unit_tier: np.ndarray
    edges: dict[str, list[float]] = field(default_factory=dict)

    @property
    def k(self) -> int:
        return int(self.cluster.size)

    @property
    def rate(self) -> np.ndarray:
        return self.tier_rate[self.tier]

    @property
    def cap(self) -> np.ndarray:
        return self.tier_cap[self.tier]


@dataclass
class _AxisTiers:
    """One axis: the label index of each unit, and per label its text, rate and cap."""

    index: np.ndarray
    labels: list[str]
    rate: np.ndarray
    cap: np.ndarray


def build_strata(clusters: np.ndarray, config: PlanConfig, fields: Mapping[str, Any] | None,
                 rehydrate_sizes: np.ndarray | None = None) -> Strata:
    """The strata of units in ``clusters`` (cluster per unit; all 0 for a strategy without clusters) under the
    strata settings of ``config``, from the per-unit ``fields``; ``rehydrate_sizes``: each unit's duplicate group
    size (``--duplicates rehydrate``)."""
    cap = config.effective_max_repeat
    default_cap = np.inf if cap is None else float(cap)
    axes = parse_strata(config.strata) if config.strata is not None else ()
    weights = parse_tier_values(config.tier_weights, axes, False) if config.tier_weights else {}
    caps = parse_tier_values(config.tier_caps, axes, True) if config.tier_caps else {}
    fields = fields or {}
    per_axis, edges = [], {}
    for axis in axes:
        values = _field(fields, axis.field, "strata")
        tiers, edge = _axis_tiers(axis, values, weights.get(axis.field, {}), caps.get(axis.field, {}), default_cap)
        per_axis.append(tiers)
        if edge is not None:
            edges[axis.field] = edge
    if config.within is not None:
        values = _field(fields, config.within, "within")
        if not values.numeric:
            raise PlanConfigError("within", f"needs a numeric field; {config.within!r} is categorical", type(config))
        per_axis.append(_within_tiers(clusters, values.values, float(config.quality_mix), default_cap))
    if rehydrate_sizes is not None:
        per_axis.append(_rehydrate_tiers(rehydrate_sizes, config, cap))
    return _combine(np.asarray(clusters, np.int64), per_axis, edges, default_cap)


def _field(fields: Mapping[str, Any], name: str, param: str) -> FieldValues:
    if name not in fields:
        kept = ", ".join(sorted(fields)) or "none"
        raise PlanConfigError(param, f"names field {name!r}, which the corpus did not keep (fields kept: {kept}); "
                              f"keep it with `--keep-fields {name}` when reading the corpus")
    return field_values(fields[name])


def _axis_tiers(axis: Axis, values: FieldValues, weights: dict[str, float], caps: dict[str, float],
                default_cap: float) -> tuple[_AxisTiers, list[float] | None]:
    """The tiers of one field axis, checking that the named labels exist."""
    edges: list[float] | None = None
    if axis.tiers is not None:
        if not values.numeric:
            raise PlanConfigError("strata", f"gives {axis.text()!r}, but {axis.field!r} is categorical: tiers split a "
                                  f"numeric field; use cluster,{axis.field}")
        v = values.values
        missing = np.isnan(v)
        qs, index = quantile_tiers(v, axis.tiers, ~missing)
        if missing.any():
            index[missing] = axis.tiers
        labels = [str(t) for t in range(axis.tiers)]
        edges = [float(x) for x in qs]
    else:
        if values.numeric:
            raise PlanConfigError("strata", f"names numeric field {axis.field!r} without tiers: give "
                                  f"{axis.field}:TIERS (quantile tiers), or keep it as categorical with "
                                  f"--keep-fields {axis.field}:cat")
        codes = values.values.astype(np.int64)
        labels = list(values.categories or ())
        if MISSING in labels:
            raise PlanConfigError("strata", f"field {axis.field!r} has a value {MISSING!r}, which names the "
                                  "documents without the field; rename that value")
        index = np.where(codes >= 0, codes, len(labels))
    labels.append(MISSING)
    for given, what in ((weights, "tier_weights"), (caps, "tier_caps")):
        unknown = sorted(set(given) - set(labels))
        if unknown:
            known = ", ".join(labels[:12]) + (", ..." if len(labels) > 12 else "")
            raise PlanConfigError(what, f"names {', '.join(map(repr, unknown[:5]))} of field {axis.field!r}, which "
                                  f"has no such tier (tiers: {known})")
    rate = np.array([weights.get(x, 1.0) for x in labels], np.float64)
    cap = np.array([min(caps.get(x, default_cap), default_cap) for x in labels], np.float64)
    return _AxisTiers(index.astype(np.int64, copy=False), labels, rate, cap), edges


def _within_tiers(clusters: np.ndarray, quality: np.ndarray, mix: float, default_cap: float) -> _AxisTiers:
    """``--within``: eight quantile bins of the field inside each cluster (missing: rate 1)."""
    n = quality.shape[0]
    ok = ~np.isnan(quality)
    order = np.lexsort((np.arange(n), np.where(ok, quality, np.inf), ~ok, clusters))
    c_sorted = clusters[order]
    starts = np.flatnonzero(np.r_[True, c_sorted[1:] != c_sorted[:-1]])
    seg = np.repeat(starts, np.diff(np.r_[starts, n]))
    present = np.bincount(clusters[ok], minlength=int(clusters.max(initial=0)) + 1)
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n) - seg
    b = np.minimum(rank * WITHIN_BINS // np.maximum(present[clusters], 1), WITHIN_BINS - 1)
    index = np.where(ok, b, WITHIN_BINS)
    rate = np.r_[1 - mix + 2 * mix * (np.arange(WITHIN_BINS) + 0.5) / WITHIN_BINS, 1.0]
    labels = [f"q{b}" for b in range(WITHIN_BINS)] + [MISSING]
    return _AxisTiers(index, labels, rate, np.full(WITHIN_BINS + 1, default_cap))


def _rehydrate_tiers(sizes: np.ndarray, config: PlanConfig, cap: int | None) -> _AxisTiers:
    """``--duplicates rehydrate``: a group of ``m`` copies has rate and cap ``curve(m)`` (capped by an explicit
    ``--max-repeat``)."""
    curve = parse_curve(config.rehydrate_curve or "1:1")
    bounds = np.array([s for s, _ in curve], np.int64)
    times = np.array([t for _, t in curve], np.float64)
    index = np.searchsorted(bounds, np.asarray(sizes, np.int64), side="right") - 1
    labels = [f"copies>={s}" for s, _ in curve]
    limit = np.inf if cap is None else float(cap)
    return _AxisTiers(index.astype(np.int64), labels, times.copy(), np.minimum(times, limit))


def _combine(clusters: np.ndarray, axes: list[_AxisTiers], edges: dict[str, list[float]],
             default_cap: float) -> Strata:
    """Units' tiers (one label per axis) and strata (cluster x tier), numbered compactly."""
    code = axes[0].index if axes else np.zeros(clusters.shape[0], np.int64)
    for axis in axes[1:]:
        code = code * len(axis.labels) + axis.index
    present, unit_tier = _compact(code)
    rate = np.ones(present.size)
    cap = np.full(present.size, default_cap)
    parts: list[list[str]] = [[] for _ in range(present.size)]
    rest = present.copy()
    for axis in reversed(axes):
        idx = rest % len(axis.labels)
        rest //= len(axis.labels)
        rate *= axis.rate[idx]
        cap = np.minimum(cap, axis.cap[idx])
        for i, j in enumerate(idx.tolist()):
            parts[i].insert(0, axis.labels[j])
    labels = tuple("/".join(p) for p in parts) if axes else ("all",)
    t = max(present.size, 1)
    keys, unit = _compact(clusters * t + unit_tier)
    return Strata(unit.astype(np.int64, copy=False), keys // t, keys % t, labels, rate, cap,
                  unit_tier.astype(np.int64, copy=False), edges)


def _compact(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` for non-negative integers, by counting when their range is small
    (strata ids: clusters x tiers), which is linear where sorting N values is not."""
    top = int(values.max(initial=-1)) + 1
    if top > 4 * values.size + 1024:
        return np.unique(values, return_inverse=True)
    present = np.flatnonzero(np.bincount(values, minlength=top))
    if present.size == top:  # every value occurs: already compact
        return present, values
    index = np.zeros(top, np.int64)
    index[present] = np.arange(present.size)
    return present.astype(np.int64), index[values]
