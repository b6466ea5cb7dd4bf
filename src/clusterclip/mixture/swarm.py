"""A swarm of proxy runs: one mixture (weights over domains) and one objective value per run.

Two CSV formats (docs/mixture-search.md):

* **RegMix** (:func:`read_regmix`): a mixture file (``index`` column, then one weight column per domain)
  and a loss file (``index`` column, then one loss column per evaluation domain), joined by ``index``.
  A mixture without a loss row is a run that did not finish: it is dropped and named in
  :attr:`Swarm.dropped` (``strict=True`` makes it an error). A loss row whose index is not in the
  mixture file is always an error.
* **Single file** (:func:`read_swarm` / :func:`write_swarm`): optional ``id`` column, weight columns
  ``w_<domain>``, and one objective column.

Weights must be finite, non-negative and sum to 1 within ``tol`` (published swarms round to three
decimals: RegMix's rows sum to 0.996..1.003); they are then normalised to sum to exactly 1.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from clusterclip.errors import ClusterClipError

SUM_TOL = 0.01
"""Largest accepted ``|sum(weights) - 1|`` of one run before normalisation."""


class MixtureError(ClusterClipError, ValueError):
    """Unusable mixture-search input: a swarm file (names file, line and problem) or an argument."""


@dataclass(frozen=True)
class Swarm:
    """Proxy runs: ``weights[i]`` (on the simplex) gave ``objective[i]`` (lower is better)."""

    domains: tuple[str, ...]
    weights: np.ndarray
    objective: np.ndarray
    ids: tuple[str, ...]
    objective_name: str = "objective"
    dropped: tuple[str, ...] = field(default=())

    def __len__(self) -> int:
        return len(self.ids)

    def subset(self, rows: Sequence[int] | np.ndarray) -> Swarm:
        """The runs at positions ``rows`` (in that order)."""
        rows = np.asarray(rows, dtype=np.int64)
        return Swarm(self.domains, self.weights[rows], self.objective[rows],
                     tuple(self.ids[i] for i in rows), self.objective_name, self.dropped)

    def extend(self, weights: np.ndarray, objective: np.ndarray, ids: Sequence[str] | None = None) -> Swarm:
        """This swarm plus new runs (validated like a file's rows); new ids default to ``new-<k>``."""
        ids = tuple(ids) if ids is not None else tuple(f"new-{len(self) + k}" for k in range(len(weights)))
        more = from_arrays(weights, objective, self.domains, ids, self.objective_name)
        clash = set(more.ids) & set(self.ids)
        if clash:
            raise MixtureError(f"run id {sorted(clash)[0]!r} is already in the swarm")
        return Swarm(self.domains, np.vstack([self.weights, more.weights]),
                     np.concatenate([self.objective, more.objective]), self.ids + more.ids,
                     self.objective_name, self.dropped)


def from_arrays(weights: np.ndarray, objective: np.ndarray, domains: Sequence[str] | None = None,
                ids: Sequence[str] | None = None, objective_name: str = "objective",
                source: str = "<arrays>") -> Swarm:
    """A :class:`Swarm` from arrays, with the same checks and normalisation as the file readers."""
    w = np.asarray(weights, dtype=np.float64)
    y = np.asarray(objective, dtype=np.float64)
    if w.ndim != 2 or y.ndim != 1 or len(w) != len(y):
        raise MixtureError(f"{source}: weights must be (runs, domains) and objective (runs,); got "
                           f"{w.shape} and {y.shape}")
    domains = tuple(domains) if domains is not None else tuple(f"d{j}" for j in range(w.shape[1]))
    ids = tuple(ids) if ids is not None else tuple(str(i) for i in range(len(w)))
    if len(domains) != w.shape[1] or len(ids) != len(w):
        raise MixtureError(f"{source}: {len(domains)} domain names and {len(ids)} ids for weights {w.shape}")
    if len(w) == 0 or w.shape[1] == 0:
        raise MixtureError(f"{source}: no runs or no domains")
    if len(set(ids)) != len(ids):
        raise MixtureError(f"{source}: duplicate run id {_first_duplicate(ids)!r}")
    if len(set(domains)) != len(domains):
        raise MixtureError(f"{source}: duplicate domain {_first_duplicate(domains)!r}")
    _check_weights(w, ids, source)
    bad = ~np.isfinite(y)
    if bad.any():
        i = int(np.argmax(bad))
        raise MixtureError(f"{source}: run {ids[i]}: objective {objective_name!r} is {y[i]} (NaN or infinite)")
    w = w / w.sum(axis=1, keepdims=True)
    return Swarm(domains, w, y, ids, objective_name)


def _check_weights(w: np.ndarray, ids: Sequence[str], source: str, tol: float = SUM_TOL) -> None:
    problems = [(~np.isfinite(w)).any(axis=1), (w < 0).any(axis=1)]
    what = ["a NaN or infinite weight", "a negative weight"]
    for rows, text in zip(problems, what, strict=True):
        if rows.any():
            i = int(np.argmax(rows))
            raise MixtureError(f"{source}: run {ids[i]}: {text}")
    sums = w.sum(axis=1)
    off = np.abs(sums - 1.0) > tol
    if off.any():
        i = int(np.argmax(off))
        raise MixtureError(f"{source}: run {ids[i]}: weights sum to {sums[i]:.6g}, not 1 (tolerance {tol})")


def _first_duplicate(items: Sequence[str]) -> str:
    seen: set[str] = set()
    for x in items:
        if x in seen:
            return x
        seen.add(x)
    return ""


def _read_table(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Header and ``(line number, fields)`` rows of a CSV file; blank lines skipped."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:  # -sig: a leading BOM is not a column name
            reader = csv.reader(f)
            header = next(reader, None)
            rows = [(reader.line_num, r) for r in reader if any(c.strip() for c in r)]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise MixtureError(f"{path}: cannot read CSV: {exc}") from exc
    if not header:
        raise MixtureError(f"{path}: empty file (no header)")
    header = [h.strip() for h in header]
    if len(set(header)) != len(header):
        raise MixtureError(f"{path}:1: duplicate column {_first_duplicate(header)!r}")
    for line, r in rows:
        if len(r) != len(header):
            raise MixtureError(f"{path}:{line}: {len(r)} fields, header has {len(header)}")
    if not rows:
        raise MixtureError(f"{path}: no rows")
    return header, rows


def _numbers(path: Path, header: list[str], rows: list[tuple[int, list[str]]], cols: list[int]) -> np.ndarray:
    """The columns ``cols`` as floats; an empty or non-numeric cell or a NaN is an error naming its line."""
    out = np.empty((len(rows), len(cols)), dtype=np.float64)
    for i, (line, r) in enumerate(rows):
        for j, c in enumerate(cols):
            try:
                v = float(r[c])
            except ValueError:
                raise MixtureError(f"{path}:{line}: column {header[c]!r}: {r[c]!r} is not a number") from None
            if math.isnan(v):
                raise MixtureError(f"{path}:{line}: column {header[c]!r} is NaN")
            out[i, j] = v
    return out


def _ids(path: Path, header: list[str], rows: list[tuple[int, list[str]]], col: int) -> list[str]:
    ids = [r[col].strip() for _, r in rows]
    seen: dict[str, int] = {}
    for (line, _), i in zip(rows, ids, strict=True):
        if not i:
            raise MixtureError(f"{path}:{line}: empty {header[col]!r}")
        if i in seen:
            raise MixtureError(f"{path}:{line}: {header[col]!r} {i!r} repeats line {seen[i]}")
        seen[i] = line
    return ids


def _norm(name: str) -> str:
    return name.lower().replace("-", "_").replace(" ", "_")


def _target_column(path: Path, header: list[str], target: str) -> int:
    """The loss column for ``target``: an exact name, else the one column whose name contains it
    (case-insensitive, ``-`` and space read as ``_``), e.g. ``pile-cc`` finds
    ``metric/the_pile_pile_cc_val_loss``."""
    if target in header:
        return header.index(target)
    hits = [i for i, h in enumerate(header[1:], 1) if _norm(target) in _norm(h)]
    if len(hits) != 1:
        found = "no column" if not hits else "columns " + ", ".join(repr(header[i]) for i in hits)
        raise MixtureError(f"{path}: target {target!r} matches {found}; name one column exactly")
    return hits[0]


def read_regmix(mixture_csv: str | Path, loss_csv: str | Path, target: str = "pile-cc", *,
                strict: bool = False, tol: float = SUM_TOL) -> Swarm:
    """Join a RegMix mixture file and loss file by their ``index`` column (never by position).

    Domains are the mixture file's columns after ``index`` (names kept as written); the objective is
    the loss column named or matched by ``target``. Runs keep the mixture file's order.
    """
    mpath, lpath = Path(mixture_csv), Path(loss_csv)
    mhead, mrows = _read_table(mpath)
    lhead, lrows = _read_table(lpath)
    for path, head in ((mpath, mhead), (lpath, lhead)):
        if "index" not in head:
            raise MixtureError(f"{path}:1: no 'index' column (columns: {', '.join(head[:4])}, ...)")
    mi, li = mhead.index("index"), lhead.index("index")
    mids, lids = _ids(mpath, mhead, mrows, mi), _ids(lpath, lhead, lrows, li)
    extra = [i for i in lids if i not in set(mids)]
    if extra:
        raise MixtureError(f"{lpath}: index {extra[0]!r} has a loss but no mixture in {mpath} "
                           f"({len(extra)} such rows)")
    have = set(lids)
    missing = tuple(i for i in mids if i not in have)
    if missing and strict:
        raise MixtureError(f"{mpath}: index {missing[0]!r} has no loss row in {lpath} ({len(missing)} such runs)")
    keep = [k for k, i in enumerate(mids) if i in have]
    wcols = [c for c in range(len(mhead)) if c != mi]
    w = _numbers(mpath, mhead, [mrows[k] for k in keep], wcols)
    tcol = _target_column(lpath, lhead, target)
    pos = {i: k for k, i in enumerate(lids)}
    order = [pos[mids[k]] for k in keep]
    y = _numbers(lpath, lhead, [lrows[k] for k in order], [tcol])[:, 0]
    ids = [mids[k] for k in keep]
    _check_weights(w, ids, str(mpath), tol)
    s = from_arrays(w, y, [mhead[c] for c in wcols], ids, lhead[tcol], str(mpath))
    return Swarm(s.domains, s.weights, s.objective, s.ids, s.objective_name, missing)


def read_swarm(path: str | Path, objective: str | None = None, *, tol: float = SUM_TOL) -> Swarm:
    """Read the single-file format: optional ``id``, weight columns ``w_<domain>``, one objective column.

    Without ``objective`` the file must have exactly one column besides ``id`` and the weights; with it,
    that column is the objective and any other columns are ignored.
    """
    path = Path(path)
    head, rows = _read_table(path)
    wcols = [c for c, h in enumerate(head) if h.startswith("w_")]
    if not wcols:
        raise MixtureError(f"{path}:1: no weight columns (named w_<domain>)")
    if any(head[c] == "w_" for c in wcols):
        raise MixtureError(f"{path}:1: weight column 'w_' has no domain name")
    rest = [c for c, h in enumerate(head) if c not in wcols and h != "id"]
    if objective is not None:
        if objective not in head or objective == "id" or objective.startswith("w_"):
            raise MixtureError(f"{path}:1: no objective column {objective!r}")
        ycol = head.index(objective)
    elif len(rest) != 1:
        found = ", ".join(repr(head[c]) for c in rest) or "none"
        raise MixtureError(f"{path}:1: need exactly one objective column besides id and w_*; found {found}")
    else:
        ycol = rest[0]
    ids = _ids(path, head, rows, head.index("id")) if "id" in head else [str(line) for line, _ in rows]
    w = _numbers(path, head, rows, wcols)
    y = _numbers(path, head, rows, [ycol])[:, 0]
    _check_weights(w, ids, str(path), tol)
    return from_arrays(w, y, [head[c][2:] for c in wcols], ids, head[ycol], str(path))


def write_swarm(path: str | Path, swarm: Swarm) -> None:
    """Write ``swarm`` in the single-file format (floats as ``repr``, so nothing is rounded)."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        out = csv.writer(f, lineterminator="\n")
        out.writerow(["id", *(f"w_{d}" for d in swarm.domains), swarm.objective_name])
        for i, w, y in zip(swarm.ids, swarm.weights, swarm.objective, strict=True):
            out.writerow([i, *(repr(float(v)) for v in w), repr(float(y))])
