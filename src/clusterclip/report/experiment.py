"""Read an experiment's ``results.json`` into table rows (JSON values) and curves, whatever its shape.

The report does not own that file's format (the experiment does, and users write their own), so the
common shapes are accepted and anything else is ignored rather than failing the page.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Series = dict[str, tuple[np.ndarray, np.ndarray]]

X_KEYS = ("step", "steps", "x", "tokens", "tokens_seen", "position", "epoch")


def is_scalar(v: object) -> bool:
    """A JSON value that fits in one table cell (not a list or an object)."""
    return isinstance(v, (int, float, str, bool)) or v is None


def _numeric_list(v: object, gaps: bool = False) -> bool:
    """A non-empty list of numbers; with ``gaps`` None entries (missing points) are allowed too."""
    if not isinstance(v, list) or not v:
        return False
    ok = [isinstance(x, (int, float)) and not isinstance(x, bool) for x in v]
    return all(ok) or (gaps and any(ok) and all(o or x is None for o, x in zip(ok, v, strict=True)))


def _floats(v: list[Any]) -> np.ndarray:
    return np.array([np.nan if x is None else x for x in v], dtype=float)


def experiment_curves(results: dict[str, Any]) -> dict[str, tuple[str, Series]]:
    """Curves of an experiment's ``results.json`` as {metric: (x label, {series: (x, y)})}.

    Accepts ``curves`` as {name: [y...]}, {name: [[x, y], ...]}, {name: {x_key: [...], metric: [...]}}
    or a list of such dicts carrying a ``name``/``strategy``; ``null`` y values are gaps; anything else
    is ignored.
    """
    curves = results.get("curves") if isinstance(results, dict) else None
    if isinstance(curves, list):
        curves = {str(c.get("name") or c.get("strategy") or i): c for i, c in enumerate(curves) if isinstance(c, dict)}
    out: dict[str, tuple[str, Series]] = {}
    if not isinstance(curves, dict):
        return out
    for name, v in curves.items():
        for metric, xlabel, x, y in _series_of(v):
            out.setdefault(metric, (xlabel, {}))[1][str(name)] = (x, y)
    return out


def _series_of(v: object) -> list[tuple[str, str, np.ndarray, np.ndarray]]:
    """(metric, x label, x, y) of one named entry of ``curves``."""
    if _numeric_list(v, gaps=True):
        return [("loss", "step", np.arange(len(v)), _floats(v))]
    if isinstance(v, list) and v and all(isinstance(p, list) and len(p) == 2 and _numeric_list(p) for p in v):
        xy = np.asarray(v, dtype=float)
        return [("loss", "step", xy[:, 0], xy[:, 1])]
    if not isinstance(v, dict):
        return []
    xkey = next((k for k in X_KEYS if _numeric_list(v.get(k))), None)
    found = []
    for metric, ys in v.items():
        if metric == xkey or not _numeric_list(ys, gaps=True):
            continue
        if xkey and len(v[xkey]) == len(ys):
            found.append((str(metric), xkey, np.asarray(v[xkey], dtype=float), _floats(ys)))
        else:
            found.append((str(metric), "index", np.arange(len(ys)), _floats(ys)))
    return found


def summary_rows(summary: object) -> tuple[list[str], list[list[object]]]:
    """Rows of an experiment summary given as a list of dicts, a dict of dicts or a dict of scalars."""
    if isinstance(summary, dict) and summary and all(isinstance(v, dict) for v in summary.values()):
        summary = [{"name": k, **v} for k, v in summary.items()]
    if isinstance(summary, list) and summary and all(isinstance(r, dict) for r in summary):
        cols: list[str] = []
        for r in summary:
            cols += [k for k, v in r.items() if is_scalar(v) and k not in cols]
        return cols, [[r.get(c) for c in cols] for r in summary]
    if isinstance(summary, dict):
        return ["metric", "value"], [[k, v] for k, v in summary.items() if is_scalar(v)]
    return [], []
