"""The strata settings as text: ``--strata``, ``--tier-weights``, ``--max-repeats-by-tier``, ``--rehydrate-curve``.

Pure parsing and normalising (no NumPy), so :mod:`clusterclip.plan.config` validates them on construction and
records one canonical spelling (equal settings, equal plan names and hashes). The grammar:

* ``--strata cluster,quality:5,lang``: the cluster crossed with each named per-document field (kept by the
  corpus stage with ``--keep-fields``): ``FIELD:T`` is ``T`` quantile tiers of a numeric field, ``FIELD`` the
  values of a categorical one. ``cluster`` may be left out; it is always the outer level.
* ``--tier-weights`` / ``--max-repeats-by-tier``: ``[AXIS=]ITEM,ITEM...``, axes separated by ``;``. An ITEM is
  a value (positional: tiers 0, 1, 2 ... of a quantile axis) or ``LABEL:VALUE`` (a tier number, a categorical
  value, or ``missing``: the documents without the field). Without ``AXIS=`` the list is the first field axis'.
* ``--rehydrate-curve 1:1,2:2,3:3,5:5,100:8,1000:1``: a duplicate group of ``m`` copies may be drawn ``v``
  times where ``s:v`` is the last entry with ``s <= m`` (FineWeb-2's rehydration curve is the default).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

MISSING = "missing"
"""The tier of the documents that lack a field (null, absent, NaN)."""
FINEWEB2_CURVE = ((1, 1), (2, 2), (3, 3), (5, 5), (100, 8), (1000, 1))
"""FineWeb-2's rehydration: copies of a document (its duplicate group's size) -> times it may be drawn."""
_SEPARATORS = ",;=:"


class SpecError(ValueError):
    """A strata setting that does not parse; the message says what is wrong, ``param`` which setting (the config
    names its option)."""

    param = "strata"


@dataclass(frozen=True)
class Axis:
    """One field axis of the strata: ``tiers`` quantile tiers of a numeric field, or (None) a categorical one."""

    field: str
    tiers: int | None = None

    def text(self) -> str:
        return self.field if self.tiers is None else f"{self.field}:{self.tiers}"


def parse_strata(spec: str) -> tuple[Axis, ...]:
    """The field axes of ``--strata`` (``cluster`` dropped: it is always the outer level)."""
    axes: list[Axis] = []
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            raise SpecError(f"has an empty item in {spec!r}; expected cluster,FIELD[:TIERS],...")
        if item == "cluster":
            continue
        name, _, tiers = item.partition(":")
        name = name.strip()
        if not name or any(c in name for c in _SEPARATORS):
            raise SpecError(f"names no field in {item!r}; expected FIELD or FIELD:TIERS")
        if tiers:
            if not tiers.strip().isdigit() or not 2 <= int(tiers) <= 1000:
                raise SpecError(f"gives {item!r}: the tiers of a numeric field are an integer in 2..1000")
            axes.append(Axis(name, int(tiers)))
        else:
            axes.append(Axis(name))
    names = [a.field for a in axes]
    if len(set(names)) != len(names):
        raise SpecError(f"names a field twice in {spec!r}")
    if not axes:
        raise SpecError(f"names no field in {spec!r}; expected cluster,FIELD[:TIERS] (a field kept with --keep-fields)")
    return tuple(axes)


def strata_text(axes: tuple[Axis, ...]) -> str:
    """The canonical ``--strata``: ``cluster`` first, then each axis."""
    return ",".join(["cluster", *(a.text() for a in axes)])


TierValues = dict[str, dict[str, float]]
"""Per axis (field name), the value of each named tier label (``"0"``, ``"web"``, ``"missing"``)."""


def parse_tier_values(spec: str, axes: tuple[Axis, ...], integer: bool) -> TierValues:
    """``--tier-weights`` (floats >= 0) or ``--max-repeats-by-tier`` (``integer``: whole numbers >= 0) by axis."""
    out: TierValues = {}
    for part in spec.split(";"):
        part = part.strip()
        if not part:
            continue
        head, eq, body = part.partition("=")
        axis = _axis(head.strip(), axes) if eq else _first(axes)
        if not eq:
            body = part
        if axis.field in out:
            raise SpecError(f"gives axis {axis.field!r} twice")
        out[axis.field] = _items(body, axis, integer)
    if not out:
        raise SpecError("is empty")
    return out


def _axis(name: str, axes: tuple[Axis, ...]) -> Axis:
    for a in axes:
        if a.field == name:
            return a
    known = ", ".join(a.field for a in axes) or "none"
    raise SpecError(f"names axis {name!r}, which is not in the strata (axes: {known})")


def _first(axes: tuple[Axis, ...]) -> Axis:
    if not axes:
        raise SpecError("needs strata: give --strata cluster,FIELD[:TIERS] too")
    return axes[0]


def _items(body: str, axis: Axis, integer: bool) -> dict[str, float]:
    values: dict[str, float] = {}
    position = 0
    for raw in body.split(","):
        item = raw.strip()
        label, colon, value = item.rpartition(":")
        if not colon:
            if axis.tiers is None:
                raise SpecError(f"gives {item!r} for categorical field {axis.field!r}: name each value (VALUE:NUMBER)")
            label, value = str(position), item
            position += 1
        label = label.strip()
        if not label or any(c in label for c in _SEPARATORS):
            raise SpecError(f"has no tier label in {item!r}")
        if axis.tiers is not None and label != MISSING and not (label.isdigit() and int(label) < axis.tiers):
            raise SpecError(f"names tier {label!r} of {axis.field}:{axis.tiers}; tiers are 0..{axis.tiers - 1} and "
                            f"{MISSING!r}")
        if label in values:
            raise SpecError(f"gives tier {label!r} of {axis.field!r} twice")
        values[label] = _number(value.strip(), item, integer)
    if axis.tiers is not None and 0 < position != axis.tiers:
        raise SpecError(f"lists {position} values for {axis.field}:{axis.tiers}; give one per tier ({axis.tiers})")
    return values


def _number(text: str, item: str, integer: bool) -> float:
    try:
        x = float(text)
    except ValueError:
        raise SpecError(f"has {item!r}, whose value is not a number") from None
    if not math.isfinite(x) or x < 0 or (integer and x != int(x)):
        kind = "a whole number >= 0" if integer else "a finite number >= 0"
        raise SpecError(f"has {item!r}: each value must be {kind}")
    return float(int(x)) if integer else x


def tier_values_text(values: TierValues, axes: tuple[Axis, ...]) -> str:
    """The canonical spelling: axes in strata order, labels in tier order (numbers first, then names)."""
    parts = []
    for axis in axes:
        if axis.field not in values:
            continue
        items = sorted(values[axis.field].items(), key=lambda kv: (not kv[0].isdigit(), int(kv[0]) if kv[0].isdigit()
                                                                    else 0, kv[0]))
        parts.append(f"{axis.field}=" + ",".join(f"{label}:{_fmt(v)}" for label, v in items))
    return ";".join(parts)


def _fmt(x: float) -> str:
    return str(int(x)) if x == int(x) else repr(x)


def parse_curve(spec: str) -> tuple[tuple[int, int], ...]:
    """``--rehydrate-curve``: ``size:times`` pairs, sizes strictly increasing from 1, times whole numbers >= 0."""
    pairs: list[tuple[int, int]] = []
    for raw in spec.split(","):
        size, colon, times = raw.strip().partition(":")
        if not colon or not size.strip().isdigit() or not times.strip().isdigit():
            raise SpecError(f"has {raw.strip()!r}; expected SIZE:TIMES pairs such as 1:1,2:2,5:5,100:8")
        pairs.append((int(size), int(times)))
    sizes = [s for s, _ in pairs]
    if sizes[0] != 1 or any(b <= a for a, b in itertools.pairwise(sizes)):
        raise SpecError(f"must start at size 1 and list sizes in increasing order, got {spec!r}")
    return tuple(pairs)


def curve_text(curve: tuple[tuple[int, int], ...]) -> str:
    return ",".join(f"{s}:{t}" for s, t in curve)


def canonical(strata: str | None, tier_weights: str | None, tier_caps: str | None, curve: str | None,
              rehydrate: bool) -> dict[str, str | None]:
    """The canonical spelling of every strata setting (``curve``: FineWeb-2's when ``rehydrate`` names none);
    raises :class:`SpecError` with ``param`` set to the setting at fault."""
    out: dict[str, str | None] = {}
    axes: tuple[Axis, ...] = ()
    if strata is not None:
        axes = _named("strata", parse_strata, strata)
        out["strata"] = strata_text(axes)
    for param, spec, integer in (("tier_weights", tier_weights, False), ("tier_caps", tier_caps, True)):
        if spec is not None:
            out[param] = tier_values_text(_named(param, parse_tier_values, spec, axes, integer), axes)
    if curve is not None or rehydrate:
        if not rehydrate:
            raise _error("rehydrate_curve", "applies with --duplicates rehydrate")
        out["rehydrate_curve"] = curve_text(_named("rehydrate_curve", parse_curve, curve) if curve is not None
                                            else FINEWEB2_CURVE)
    return out


def _named(param: str, parse: Any, *args: Any) -> Any:
    try:
        return parse(*args)
    except SpecError as exc:
        raise _error(param, str(exc)) from None


def _error(param: str, message: str) -> SpecError:
    err = SpecError(message)
    err.param = param
    return err
