"""The order of a plan: every draw placed at a virtual time, all draws merged by time.

Group ``c``'s ``k``-th draw happens at virtual time ``(k + u_c) * scale_c`` (``u_c`` a seeded jitter in
[0, 1)). The scale decides the order:

* ``equal-rate`` (the paper's): ``scale_c = 1 / w_c``, so every group with draws left is drawn at the
  rate of its weight; a group that has used up its quota drops out and the others share the draws, and
  the mixture drifts from balanced towards natural. In token mode ``scale_c = mean_len_c / w_c``, so the
  rate holds in tokens;
* ``spread``: ``scale_c = 1 / d_c`` (``d_c`` the group's draws), each group spread evenly over the
  whole run, so the mixture is the same at every point of training.

The merge is streamed in chunks of about ``chunk_size`` draws, each a time window. When every group's
scale is equal the order is simply rounds (draw ``t`` of every group, in jitter order), written
without sorting: the fast path of uniform, ClusterClip and random (one group).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from clusterclip.plan.config import PlanConfig
from clusterclip.plan.passes import Passes, seg_arange
from clusterclip.plan.quotas import Groups, Quotas


@dataclass(frozen=True)
class Chunk:
    """Draws ``pos .. pos + count - 1``, already written to the output.

    Their groups are ``groups`` (one per draw, in order) or, for a chunk of rounds, ``active`` (the
    groups drawn once per round, in order) repeated ``count // active.size`` times. ``last`` lists the
    groups whose final draw is in the chunk and ``last_pos`` the plan positions of those draws.
    """

    pos: int
    count: int
    groups: np.ndarray | None
    active: np.ndarray | None
    last: np.ndarray
    last_pos: np.ndarray


def virtual_scale(config: PlanConfig, groups: Groups, quotas: Quotas, draws: np.ndarray) -> np.ndarray:
    """Virtual time between two draws of each group (``inf`` for groups without draws)."""
    scale = np.full(groups.k, np.inf)
    has = draws > 0
    if config.order == "spread":
        scale[has] = 1.0 / draws[has]
    elif config.budget_unit == "tokens":
        scale[has] = groups.unit_sizes[has] / groups.sizes[has] / quotas.weights[has]
    else:
        scale[has] = 1.0 / quotas.weights[has]
    return scale


def emit(scale: np.ndarray, u: np.ndarray, rank: np.ndarray, draws: np.ndarray, passes: Passes,
         out: np.ndarray, chunk_size: int, rounds: bool = True) -> Iterator[Chunk]:
    """Write the merged order of all draws into ``out`` chunk by chunk, yielding what each chunk holds.

    ``rounds=False`` forces the general merge even where the rounds fast path applies (for tests).
    """
    finite = scale[np.isfinite(scale)]
    if rounds and (finite.size == 0 or np.all(finite == finite[0])):
        return emit_rounds(rank, draws, passes, out, chunk_size)
    return emit_timed(scale, u, draws, passes, out, chunk_size)


def emit_rounds(rank: np.ndarray, draws: np.ndarray, passes: Passes, out: np.ndarray,
                chunk_size: int) -> Iterator[Chunk]:
    """Equal scales: round ``t`` holds draw ``t`` of every group with more than ``t`` draws, in jitter order."""
    active = rank[draws[rank] > 0]
    pos = prev = 0
    for v in np.unique(draws[active]).tolist():
        active = active[draws[active] >= v]
        m = active.size
        per = max(1, chunk_size // m)
        ends = np.flatnonzero(draws[active] == v)
        for r0 in range(prev, v, per):
            r = min(r0 + per, v) - r0
            a = np.full(m, r0, dtype=np.int64)
            passes.gather_rounds(passes.starts(active, a, a + r), out[pos:pos + r * m].reshape(r, m))
            done = r0 + r == v
            yield Chunk(pos, r * m, None, active, active[ends] if done else _NONE,
                        pos + (r - 1) * m + ends if done else _NONE)
            pos += r * m
        prev = v


_NONE = np.zeros(0, np.int64)


def counts_before(t: float, u: np.ndarray, scale: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Number of draws of each group with virtual time ``(k + u) * scale < t`` (exact in floats)."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        c = np.ceil(t / scale - u)
    c = np.clip(np.nan_to_num(c, nan=0.0, posinf=0.0, neginf=0.0), 0, d).astype(np.int64)
    for _ in range(2):
        down = (c > 0) & ((c - 1 + u) * scale >= t)
        c -= down
        up = (c < d) & ((c + u) * scale < t)
        c += up
    return c


def argsort_by_time(times: np.ndarray) -> np.ndarray:
    """The stable argsort of ``times`` (ties in input order), via the faster unstable sort when no two
    times are equal, which is almost always (then both orders are the same)."""
    order = np.argsort(times)
    ordered = times[order]
    if np.any(ordered[1:] == ordered[:-1]):
        return np.argsort(times, kind="stable")
    return order


def emit_timed(scale: np.ndarray, u: np.ndarray, draws: np.ndarray, passes: Passes, out: np.ndarray,
               chunk_size: int) -> Iterator[Chunk]:
    """General scales: each chunk is a virtual-time window ``[t_next, t1)`` of about ``chunk_size``
    draws, gathered from the passes and sorted by time."""
    d = draws
    a = np.zeros(d.size, dtype=np.int64)
    pos, length = 0, int(d.sum())
    while pos < length:
        live = np.flatnonzero(a < d)
        t_next = float(((a[live] + u[live]) * scale[live]).min())
        rate = float((1.0 / scale[live]).sum())
        t1 = max(t_next + chunk_size / rate, np.nextafter(t_next, np.inf))
        need = counts_before(t1, u[live], scale[live], d[live]) - a[live]
        sel = need > 0
        cl, a_c, need = live[sel], a[live][sel], need[sel]
        start = passes.starts(cl, a_c, a_c + need)
        step = seg_arange(need)
        kk = np.repeat(a_c, need) + step
        cl_rep = np.repeat(cl, need)
        order = argsort_by_time((kk + u[cl_rep]) * scale[cl_rep])
        count = int(need.sum())
        out[pos:pos + count] = passes.take(np.repeat(start, need) + step)[order]
        last = np.flatnonzero((kk == d[cl_rep] - 1)[order])
        cl_out = cl_rep[order]
        yield Chunk(pos, count, cl_out, None, cl_out[last], pos + last)
        a[cl] += need
        pos += count
