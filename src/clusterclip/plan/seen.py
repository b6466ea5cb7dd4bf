"""Where a training run is in its data: after ``position`` plan positions (``step x global batch``), per
cluster, tier and source, how many of its documents were seen, how many full passes over it were completed, and
the step at which each pass completed (every document of the group seen that many times).

The plan knows exactly: the prefix is read once in blocks (checksums verified), and each document's ``p``-th
occurrence is counted into its groups, so memory is O(N + groups x passes) whatever the plan's length.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from clusterclip.contract.plan_reader import PlanReader
from clusterclip.plan.config import PlanConfigError

MAX_PASSES = 64
"""Passes reported per group (a plan without a cap may repeat a document far more often)."""
BLOCK = 1 << 20


@dataclass(frozen=True)
class Axis:
    """A way to group the documents: ``labels[i]`` is document ``i``'s group (-1: in none), ``names`` the groups'."""

    name: str
    labels: np.ndarray
    names: Sequence[str]


def seen_in(reader: PlanReader, position: int, axes: Sequence[Axis], global_batch: int = 1) -> dict[str, Any]:
    """Per axis and group: documents, seen (at least once), share seen, full passes completed and the step
    (1-based, ``global_batch`` positions each) that completed each pass, after the first ``position`` positions."""
    if not 0 <= position <= reader.length:
        raise PlanConfigError("at_step", f"is beyond the plan: step x global batch = {position:,} positions, the plan "
                              f"holds {reader.length:,}")
    n = axes[0].labels.shape[0] if axes else int(reader.n_docs or 0)
    counts = np.zeros(n, np.int64)
    reached = [np.zeros((len(a.names), MAX_PASSES), np.int64) for a in axes]
    last = [np.full((len(a.names), MAX_PASSES), -1, np.int64) for a in axes]
    for start in range(0, position, BLOCK):
        docs = np.asarray(reader.read(start, min(start + BLOCK, position)), np.int64)
        order = np.argsort(docs, kind="stable")
        sorted_docs = docs[order]
        head = np.r_[True, sorted_docs[1:] != sorted_docs[:-1]]
        first = np.maximum.accumulate(np.where(head, np.arange(docs.size), 0))
        occurrence = np.empty(docs.size, np.int64)
        occurrence[order] = counts[sorted_docs] + np.arange(docs.size) - first  # 0-based: the p-th is p - 1
        np.add.at(counts, docs, 1)
        pos = start + np.arange(docs.size)
        ok = occurrence < MAX_PASSES
        for axis, r, lp in zip(axes, reached, last, strict=True):
            g = axis.labels[docs]
            keep = ok & (g >= 0)
            key = g[keep] * MAX_PASSES + occurrence[keep]
            r += np.bincount(key, minlength=r.size).reshape(r.shape)
            np.maximum.at(lp.reshape(-1), key, pos[keep])
    return {axis.name: _table(axis, counts, r, lp, global_batch) for axis, r, lp in zip(axes, reached, last,
                                                                                         strict=True)}


def _table(axis: Axis, counts: np.ndarray, reached: np.ndarray, last: np.ndarray,
           global_batch: int) -> list[dict[str, Any]]:
    g = axis.labels
    valid = g >= 0
    size = np.bincount(g[valid], minlength=len(axis.names))
    seen = np.bincount(g[valid], weights=counts[valid] > 0, minlength=len(axis.names)).astype(np.int64)
    rows = []
    for i, name in enumerate(axis.names):
        done = np.flatnonzero(reached[i] >= size[i]) if size[i] else np.zeros(0, np.int64)
        passes = int(np.argmin(reached[i] >= size[i])) if size[i] and done.size < MAX_PASSES else int(done.size)
        rows.append({"group": name, "documents": int(size[i]), "seen": int(seen[i]),
                     "share_seen": float(seen[i] / size[i]) if size[i] else 0.0, "passes": passes,
                     "pass_steps": [int(last[i, p] // global_batch + 1) for p in range(passes)]})
    return rows


def format_seen(result: Mapping[str, Any], rows: int = 20) -> str:
    """The table ``status --at-step`` prints: per axis, the groups least seen first (``rows`` of each at most)."""
    lines = [f"after step {result['step']:,} x {result['global_batch']:,}: position {result['position']:,} of "
             f"{result['plan_length']:,}"]
    for axis, table in result["groups"].items():
        ordered = sorted(table, key=lambda r: (r["share_seen"], r["passes"]))
        lines.append(f"{axis}: {len(table):,} groups" + (f" ({rows} least seen shown; --json for all)"
                                                         if len(table) > rows else ""))
        for r in ordered[:rows]:
            steps = ", ".join(f"{s:,}" for s in r["pass_steps"][:6]) + (", ..." if len(r["pass_steps"]) > 6 else "")
            lines.append(f"  {r['group']}: {r['seen']:,} of {r['documents']:,} documents seen ({r['share_seen']:.0%}), "
                         f"{r['passes']} full passes" + (f" (completed at steps {steps})" if steps else ""))
    return "\n".join(lines)
