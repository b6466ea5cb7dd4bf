"""Per-cluster weights: a JSON object or CSV file of ``cluster, weight`` (``--weights``), normalised.

Clusters not named keep weight 1 (as in ``uniform``); weight 0 drops a cluster.
"""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Any

from clusterclip.plan.config import PlanConfigError, normalise_weights


def load_weights(path: str | os.PathLike[str]) -> tuple[tuple[int, float], ...]:
    """Per-cluster weights from a JSON object ``{"cluster": weight}`` or a CSV ``cluster,weight`` file.

    Clusters not named keep weight 1 (as in ``uniform``); weight 0 drops a cluster. The file is UTF-8 (a
    byte-order mark is ignored). A CSV header is a first row with no number in it (``cluster,weight``);
    any other row must be a cluster id (an integer; ``3.0`` is cluster 3) and a weight.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PlanConfigError(f"{path}: cannot read weights ({exc.strerror})") from exc
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise PlanConfigError(f"{path}: weights file is UTF-16 (it starts with a UTF-16 byte-order mark); save it as "
                              "UTF-8 text")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise PlanConfigError(f"{path}: weights file is not UTF-8 text (byte {exc.start}: "
                              f"{raw[exc.start:exc.start + 1]!r}); save it as UTF-8") from exc
    json_file = path.suffix.lower() == ".json" or text.lstrip().startswith("{")
    pairs = _json_weights(text, path) if json_file else _csv_weights(text, path)
    try:
        return normalise_weights(pairs)
    except PlanConfigError as exc:
        raise PlanConfigError(f"{path}: {exc}") from None


def _json_weights(text: str, path: Path) -> list[tuple[int, float]]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanConfigError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from exc
    if not isinstance(obj, dict):
        raise PlanConfigError(f'{path}: expected a JSON object {{"cluster": weight, ...}}')
    pairs = []
    for k, v in obj.items():
        try:
            pairs.append((int(k), float(v)))
        except (TypeError, ValueError) as exc:
            raise PlanConfigError(f"{path}: entry {k!r}: {v!r} is not cluster id -> number") from exc
    return pairs


def _csv_weights(text: str, path: Path) -> list[tuple[Any, float]]:
    pairs: list[tuple[Any, float]] = []
    first = True
    for lineno, row in enumerate(csv.reader(text.splitlines()), start=1):
        if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
            continue
        cells = [c.strip() for c in row]
        numeric = [_number(c) is not None for c in cells]
        if first and not any(numeric):
            first = False
            continue  # a header: no number in it
        first = False
        if len(row) != 2:
            raise PlanConfigError(f"{path}:{lineno}: expected 'cluster,weight', got {','.join(row)!r}")
        if not all(numeric):
            bad = cells[numeric.index(False)]
            raise PlanConfigError(f"{path}:{lineno}: {bad!r} is not a number; expected 'cluster,weight' numbers, got "
                                  f"{','.join(row)!r}")
        c, w = _number(cells[0]), _number(cells[1])
        assert c is not None and w is not None
        if not (math.isfinite(c) and c == int(c) and c >= 0):
            raise PlanConfigError(f"{path}:{lineno}: cluster id {cells[0]!r} is not an integer >= 0 (row "
                                  f"{','.join(row)!r})")
        pairs.append((int(cells[0]) if cells[0].lstrip("+-").isdigit() else int(c), w))
    return pairs


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None
