"""The pure planner: per-cluster quotas, within-cluster passes, ordering and statistics.

``build_plan(labels, config)`` turns cluster labels into one ordered int64 array of document indices
for a whole training run (repeats expanded), following ClusterClip Sampling (DESIGN.md §1):

* **quotas** by water-filling ``q_c = min(lambda * w_c, R * n_c)`` with ``sum(q_c) = budget``, rounded
  by largest remainder (ties broken by a seeded cluster order);
* **documents** inside a cluster drawn in passes, each a fresh seeded permutation, so within a cluster
  repeat counts differ by at most one and no document exceeds the cap ``R``;
* **order** by the equal-rate construction: cluster ``c``'s ``k``-th draw at virtual time
  ``(k + u_c) / w_c`` (``u_c`` a seeded jitter in [0, 1)), all draws merged by time, so exhausted
  clusters drop out and the mixture drifts from balanced towards natural. ``order="spread"`` uses
  ``(k + u_c) / d_c`` (``d_c`` the cluster's number of draws) instead: the same draws, each cluster's
  spread evenly over the whole run, so the mixture is the same at every point of training.

Everything is a function of the inputs and ``config.seed`` (no global RNG): equal inputs give equal
bytes, independently of ``chunk_size``. The plan is produced in chunks; besides the output, memory is
O(N + K * 1024 + chunk_size), so plans far larger than RAM can be streamed into a memory-mapped
``.npy``. Statistics (draws, unique documents, repeats, exhaustion steps, repetition histogram) are
derived from the quotas in closed form; the mixture over training is accumulated per chunk.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from clusterclip.errors import ClusterClipError, InfeasiblePlanError

if TYPE_CHECKING:
    from clusterclip.rundir import RunDir

STRATEGIES = ("clusterclip", "uniform", "random", "temperature", "weights")
BUDGET_UNITS = ("docs", "tokens")
ORDERS = ("equal-rate", "spread")
DEFAULT_MAX_REPEAT = 4
DEFAULT_CHUNK = 1 << 20
BLOCK = 1024
N_WINDOWS = 100
PLAN_ARRAYS = ("plan.npy", "cluster_draws.npy", "cluster_unique.npy", "cluster_max_repeat.npy",
               "cluster_exhausted_at.npy", "mixture.npy", "repeat_hist.npy")

_SALT_JITTER = 0x6A17
_SALT_BLOCK = 0xB10C
_SALT_EPOCH = 0xE90C
_SALT_PCG = 0x5851F42D4C957F2D
_PCG_INC = 0xDA3E39CB94B95BDB5851F42D4C957F2D  # odd: one PCG64 stream; blocks start at hashed states


class PlanConfigError(ClusterClipError, ValueError):
    """An invalid planning option or input array."""


@dataclass(frozen=True)
class PlanConfig:
    """Options of one plan; validated on construction. ``name()`` is its folder under ``plans/``."""

    strategy: str = "clusterclip"
    budget: int | None = None
    budget_unit: str = "docs"
    max_repeat: int | None = None
    tau: float = 0.5
    weights: tuple[tuple[int, float], ...] | None = None
    seed: int = 0
    window: int | None = None
    order: str = "equal-rate"

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise PlanConfigError(f"unknown strategy {self.strategy!r}; choose one of {', '.join(STRATEGIES)}")
        if self.budget_unit not in BUDGET_UNITS:
            raise PlanConfigError(f"unknown budget unit {self.budget_unit!r}; choose 'docs' or 'tokens'")
        if self.budget is not None and (not _is_int(self.budget) or self.budget < 0):
            raise PlanConfigError(f"budget must be an integer >= 0 (or None for one epoch), got {self.budget!r}")
        if self.max_repeat is not None and (not _is_int(self.max_repeat) or self.max_repeat < 1):
            raise PlanConfigError(
                f"max_repeat must be an integer >= 1 (or None for the default), got {self.max_repeat!r}")
        if not isinstance(self.tau, (int, float)) or not math.isfinite(self.tau):
            raise PlanConfigError(f"tau must be a finite number (1: natural, 0: uniform), got {self.tau!r}")
        if not _is_int(self.seed) or self.seed < 0:
            raise PlanConfigError(f"seed must be an integer >= 0, got {self.seed!r}")
        if self.window is not None and (not _is_int(self.window) or self.window < 1):
            raise PlanConfigError(f"window must be an integer >= 1 draws (or None), got {self.window!r}")
        if self.order not in ORDERS:
            raise PlanConfigError(f"unknown order {self.order!r}; choose one of {', '.join(ORDERS)}")
        if self.order != "equal-rate" and self.strategy == "random":
            raise PlanConfigError(f"order {self.order!r} applies to the cluster strategies, not 'random' "
                                  "(which is epochs of permutations)")
        if self.strategy == "weights":
            if self.weights is None:
                raise PlanConfigError("strategy 'weights' needs per-cluster weights (see load_weights)")
            object.__setattr__(self, "weights", _normalise_weights(self.weights))
        elif self.weights is not None:
            raise PlanConfigError(
                f"per-cluster weights are only used by strategy 'weights', not {self.strategy!r}")

    @property
    def effective_max_repeat(self) -> int | None:
        """The cap in force: ``max_repeat``, or 4 for clusterclip and no cap otherwise."""
        if self.max_repeat is not None:
            return int(self.max_repeat)
        return DEFAULT_MAX_REPEAT if self.strategy == "clusterclip" else None

    def to_json(self) -> dict[str, Any]:
        """Normalised options: equal plans have equal JSON (defaults resolved, unused options None)."""
        return {
            "strategy": self.strategy,
            "budget": None if self.budget is None else int(self.budget),
            "budget_unit": self.budget_unit,
            "max_repeat": self.effective_max_repeat,
            "tau": float(self.tau) if self.strategy == "temperature" else None,
            "weights": [[c, w] for c, w in self.weights] if self.weights is not None else None,
            "seed": int(self.seed),
            "window": None if self.window is None else int(self.window),
            "order": self.order,
        }

    def name(self) -> str:
        """Stable, filesystem-safe folder name, unique per option set."""
        parts = [self.strategy]
        if self.strategy == "temperature":
            parts.append(f"t{float(self.tau):g}")
        if self.weights is not None:
            digest = hashlib.sha256(json.dumps(self.to_json()["weights"]).encode()).hexdigest()[:10]
            parts.append(f"w{digest}")
        cap = self.effective_max_repeat
        parts.append(f"R{cap}" if cap is not None else "Rinf")
        parts.append(self.budget_unit)
        parts.append("Bepoch" if self.budget is None else f"B{int(self.budget)}")
        parts.append(f"s{int(self.seed)}")
        if self.window is not None:
            parts.append(f"win{int(self.window)}")
        if self.order != "equal-rate":
            parts.append(self.order)
        return "-".join(parts)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> PlanConfig:
        weights = obj.get("weights")
        return cls(strategy=obj.get("strategy", "clusterclip"), budget=obj.get("budget"),
                   budget_unit=obj.get("budget_unit", "docs"), max_repeat=obj.get("max_repeat"),
                   tau=0.5 if obj.get("tau") is None else obj["tau"],
                   weights=None if weights is None else tuple((int(c), float(w)) for c, w in weights),
                   seed=obj.get("seed", 0), window=obj.get("window"), order=obj.get("order", "equal-rate"))


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _normalise_weights(weights: Any) -> tuple[tuple[int, float], ...]:
    items = weights.items() if isinstance(weights, dict) else weights
    out: dict[int, float] = {}
    for item in items:
        try:
            c, w = item
            c_int, w_f = int(c), float(w)
        except (TypeError, ValueError) as exc:
            raise PlanConfigError(f"weights must be (cluster, weight) pairs, got {item!r}") from exc
        if c_int != float(c) or c_int < 0:
            raise PlanConfigError(f"weights: cluster ids are integers >= 0, got {c!r}")
        if not math.isfinite(w_f) or w_f < 0:
            raise PlanConfigError(f"weights: cluster {c_int} has weight {w!r}; weights must be finite and >= 0")
        if c_int in out:
            raise PlanConfigError(f"weights: cluster {c_int} is given twice")
        out[c_int] = w_f
    if not out:
        raise PlanConfigError("weights: no clusters given")
    return tuple(sorted(out.items()))


def load_weights(path: str | os.PathLike[str]) -> tuple[tuple[int, float], ...]:
    """Per-cluster weights from a JSON object ``{"cluster": weight}`` or a CSV ``cluster,weight`` file.

    Clusters not named keep weight 1 (as in ``uniform``); weight 0 drops a cluster. A CSV header row
    (non-numeric first line) is skipped.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanConfigError(f"{path}: cannot read weights ({exc.strerror})") from exc
    if path.suffix.lower() == ".json" or text.lstrip().startswith("{"):
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
    else:
        pairs = []
        for lineno, row in enumerate(csv.reader(text.splitlines()), start=1):
            if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
                continue
            if len(row) != 2:
                raise PlanConfigError(f"{path}:{lineno}: expected 'cluster,weight', got {','.join(row)!r}")
            try:
                pairs.append((int(row[0]), float(row[1])))
            except ValueError as exc:
                if lineno == 1 and not pairs:
                    continue
                raise PlanConfigError(f"{path}:{lineno}: expected 'cluster,weight' numbers, got "
                                      f"{','.join(row)!r}") from exc
    try:
        return _normalise_weights(pairs)
    except PlanConfigError as exc:
        raise PlanConfigError(f"{path}: {exc}") from None


@dataclass
class Plan:
    """A built plan: the order plus statistics (all JSON-able or int64/float64 arrays).

    ``per_cluster`` arrays (length K): draws, unique, max_repeat, mean_repeat, exhausted_at (plan
    position of the draw that used up the cluster's capacity ``R * n_c``, -1 if never), quota (draws,
    or tokens in token mode) and, when token counts were given, tokens. ``mixture[w, c]`` counts the
    draws of cluster c in window w (``stats["window"]`` draws each); ``repeat_hist[r]`` counts the
    documents drawn r times.
    """

    order: np.ndarray
    stats: dict[str, Any]
    per_cluster: dict[str, np.ndarray]
    mixture: np.ndarray
    repeat_hist: np.ndarray
    config: PlanConfig = field(default_factory=PlanConfig)


# ---------------------------------------------------------------------------------------------------
# quotas


def water_fill(weights: np.ndarray, caps: np.ndarray, budget: float) -> tuple[np.ndarray, float]:
    """Real quotas ``q_c = min(lambda * w_c, cap_c)`` with ``sum(q) = budget``; returns (q, lambda).

    ``caps`` may be ``inf``. Raises ``InfeasiblePlanError`` (without the hint; callers add it) when
    ``budget`` exceeds the total capacity of the clusters with positive weight.
    """
    w = np.asarray(weights, dtype=np.float64)
    cap = np.asarray(caps, dtype=np.float64)
    q = np.zeros_like(w)
    act = np.flatnonzero(w > 0)
    if budget <= 0 or act.size == 0:
        return q, 0.0
    wa, ca = w[act], cap[act]
    ratio = ca / wa
    order = np.argsort(ratio, kind="stable")
    rs, ws, cs = ratio[order], wa[order], ca[order]
    cum_cap = np.concatenate(([0.0], np.cumsum(cs)[:-1]))
    suffix_w = np.cumsum(ws[::-1])[::-1]
    with np.errstate(invalid="ignore", over="ignore"):
        level = cum_cap + rs * suffix_w
    hit = np.flatnonzero(level >= budget)
    if hit.size == 0:
        raise InfeasiblePlanError(f"budget {budget} exceeds the capacity {float(cs.sum())}")
    j = int(hit[0])
    lam = (budget - cum_cap[j]) / suffix_w[j]
    q[act] = np.minimum(lam * wa, ca)
    return q, float(lam)


def round_quotas(q: np.ndarray, caps: np.ndarray, budget: int, priority: np.ndarray) -> np.ndarray:
    """Largest-remainder rounding of real quotas to integers summing to ``budget``, never above caps.

    Ties between equal remainders go to the clusters first in ``priority`` (a seeded cluster order).
    """
    cap_i = np.where(np.isfinite(caps), np.minimum(caps, np.iinfo(np.int64).max // 2), np.iinfo(np.int64).max // 2)
    base = np.minimum(np.floor(q), cap_i).astype(np.int64)
    frac = q - base
    extra = int(budget) - int(base.sum())
    rank = np.empty_like(priority)
    rank[priority] = np.arange(priority.size)
    if extra > 0:
        ok = np.flatnonzero((base < cap_i) & (q > 0))
        pick = ok[np.lexsort((rank[ok], -frac[ok]))][:extra]
        base[pick] += 1
        extra -= pick.size
        while extra > 0:  # float error left more than one unit to place: spread over the room left
            ok = np.flatnonzero((base < cap_i) & (q > 0))
            pick = ok[np.lexsort((rank[ok], -frac[ok]))][:extra]
            if pick.size == 0:
                raise InfeasiblePlanError(f"budget {budget} exceeds the capacity")
            base[pick] += 1
            extra -= pick.size
    while extra < 0:
        ok = np.flatnonzero(base > 0)
        pick = ok[np.lexsort((rank[ok], frac[ok]))][:-extra]
        base[pick] -= 1
        extra += pick.size
    return base


# ---------------------------------------------------------------------------------------------------
# within-cluster passes


def _seg_arange(lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(l)`` for every ``l`` in ``lengths``."""
    total = int(lengths.sum())
    starts = np.cumsum(lengths) - lengths
    return np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)


_M64 = (1 << 64) - 1


def _mix64(x: int) -> int:
    """splitmix64's finaliser: a bijection of 64-bit integers with good avalanche."""
    x &= _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


class _Passes:
    """Each cluster's infinite draw sequence: pass after pass, each a fresh seeded permutation.

    Passes are generated in blocks of ``P_c = max(1, min(passes, BLOCK // n_c))`` passes, block ``b``
    of cluster ``c`` from a PCG64 stream whose 128-bit state and increment are a hash of
    (seed, c, b), so any block can be produced on its own and the sequence does not depend on how the
    caller chunks its requests (setting a state costs ~1 us; building a seeded ``Generator`` per block
    cost ~35 us and dominated small clusters). Every cluster holds its current block in one int64 slot
    of ``buf``; a request that leaves the block is assembled in a scratch region at the end of
    ``buf``, so every request is one contiguous slice of ``buf`` and the caller gathers the whole
    chunk with one ``np.take`` straight into the int64 output. Memory: 8 bytes per slot entry
    (about N + K * BLOCK) plus the scratch (one chunk) plus the cluster-sorted members (4 bytes/doc).
    """

    def __init__(self, labels: np.ndarray, k: int, passes_needed: np.ndarray, seed: int, scratch: int) -> None:
        n = labels.shape[0]
        self.sizes = np.bincount(labels, minlength=k).astype(np.int64)
        self.offsets = np.concatenate(([0], np.cumsum(self.sizes)[:-1])).astype(np.int64)
        key = labels.astype(np.uint16) if k <= 1 << 16 else labels  # 16-bit keys get a radix sort
        self.members = np.argsort(key, kind="stable").astype(np.int32 if n < 2**31 else np.int64)
        self.seed = seed
        ckey = np.arange(k, dtype=np.uint64) ^ np.uint64(_mix64(_mix64(seed ^ _SALT_BLOCK) + 1))
        for shift, mult in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB), (31, 0)):  # _mix64, vectorised
            ckey ^= ckey >> np.uint64(shift)
            if mult:
                ckey *= np.uint64(mult)
        self._ckey = ckey.tolist()
        per_block = np.maximum(1, BLOCK // np.maximum(self.sizes, 1))
        need = np.maximum(passes_needed, 1)
        self.block_passes = np.where(self.sizes > 0, np.minimum(per_block, need), 0)
        self.block_len = self.block_passes * self.sizes
        self.seg = np.concatenate(([0], np.cumsum(self.block_len)[:-1])).astype(np.int64)
        self.scratch0 = int(self.block_len.sum())
        self.buf = np.empty(self.scratch0 + max(int(scratch), 0), dtype=np.int64)
        self.block = np.full(k, -1, dtype=np.int64)
        self.threads = min(4, os.cpu_count() or 1)
        self._pool: Any = None
        self._rngs = [np.random.Generator(np.random.PCG64(0)) for _ in range(self.threads)]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def _map(self, fn: Any, parts: list[Any]) -> None:
        """Run ``fn(i, part)`` for every part, on the thread pool when there is more than one."""
        if len(parts) <= 1:
            for i, part in enumerate(parts):
                fn(i, part)
            return
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(self.threads - 1)
        futures = [self._pool.submit(fn, i, part) for i, part in enumerate(parts[1:], start=1)]
        fn(0, parts[0])
        for f in futures:
            f.result()

    def make_block(self, rng: np.random.Generator, c: int, b: int, out: np.ndarray) -> None:
        """Write block ``b`` of cluster ``c`` (``P_c`` permutations of its documents) into ``out``."""
        n, p = int(self.sizes[c]), int(self.block_passes[c])
        h = _mix64(self._ckey[c] ^ b)
        rng.bit_generator.state = {"bit_generator": "PCG64", "state": {"state": (h << 64) | _mix64(h ^ _SALT_PCG),
                                   "inc": _PCG_INC}, "has_uint32": 0, "uinteger": 0}
        rows = out.reshape(p, n)
        rows[...] = self.members[self.offsets[c]:self.offsets[c] + n]
        if p == 1:
            rng.shuffle(out)
        else:
            rng.permuted(rows, axis=1, out=rows)

    def pass_row(self, c: int, p: int) -> np.ndarray:
        """The permutation of pass ``p`` of cluster ``c`` (generated on its own, not cached)."""
        bp = int(self.block_passes[c])
        out = np.empty(int(self.block_len[c]), np.int64)
        self.make_block(self._rngs[0], c, p // bp, out)
        return out.reshape(bp, -1)[p % bp]

    def starts(self, cl: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Offsets in ``buf`` where draws ``a..b-1`` of each cluster in ``cl`` lie contiguously.

        Loads the blocks needed; a request that spans blocks is copied into the scratch region, which
        is reused by the next call (so gather each chunk before asking for the next).
        """
        lb = self.block_len[cl]
        first, last = a // lb, (b - 1) // lb
        start = self.seg[cl] + a - first * lb
        cur = self.block[cl]
        span = last > first
        todo = np.flatnonzero(span | (cur != first))
        if todo.size == 0:
            return start
        sp = np.flatnonzero(span)
        if sp.size:
            lens = b[sp] - a[sp]
            offs = self.scratch0 + np.cumsum(lens) - lens
            end = int(offs[-1] + lens[-1])
            if end > self.buf.size:  # the caller sizes the scratch for a chunk; grow if ever short
                grown = np.empty(end, dtype=np.int64)
                grown[:self.scratch0] = self.buf[:self.scratch0]
                self.buf = grown
            start[sp] = offs
        jobs = list(zip(cl[todo].tolist(), a[todo].tolist(), b[todo].tolist(), start[todo].tolist(),
                        span[todo].tolist(), strict=True))
        work = (np.minimum(last[todo] - first[todo] + 1, 2) * lb[todo]).cumsum()
        parts = 1
        if self.threads > 1 and int(work[-1]) >= 1 << 16 and len(jobs) > 1:
            parts = self.threads
        cuts = np.searchsorted(work, np.arange(1, parts) * (int(work[-1]) / parts)).tolist()
        groups = [jobs[i:j] for i, j in zip([0, *cuts], [*cuts, len(jobs)], strict=True)]
        self._map(self._run_jobs, [g for g in groups if g])
        return start

    def _run_jobs(self, i: int, jobs: list[tuple[int, int, int, int, bool]]) -> None:
        rng = self._rngs[i]
        buf = self.buf
        for c, a, b, dst, span in jobs:
            lb, s = int(self.block_len[c]), int(self.seg[c])
            slot = buf[s:s + lb]
            first = a // lb
            if not span:
                self.make_block(rng, c, first, slot)
                self.block[c] = first
                continue
            cur = int(self.block[c])
            for blk in range(first, (b - 1) // lb + 1):
                if blk != cur:
                    self.make_block(rng, c, blk, slot)
                lo, hi = max(a, blk * lb), min(b, (blk + 1) * lb)
                buf[dst:dst + hi - lo] = slot[lo - blk * lb:hi - blk * lb]
                dst += hi - lo
            self.block[c] = (b - 1) // lb

    def gather_rounds(self, start: np.ndarray, out: np.ndarray) -> None:
        """``out[r, j] = buf[start[j] + r]``: rounds of draws straight into the (int64) output rows.

        Indexes a sliding-window view of ``buf`` (no index array); split over the threads by rows when
        large (the fancy-index copy releases the GIL).
        """
        rows = out.shape[0]
        win = np.lib.stride_tricks.as_strided(self.buf, shape=(rows, self.buf.size - rows + 1),
                                              strides=(8, 8), writeable=False)
        parts = self.threads if self.threads > 1 and out.size >= 1 << 18 and rows > 1 else 1
        cuts = np.linspace(0, rows, parts + 1).astype(int).tolist()

        def piece(_: int, r: tuple[int, int]) -> None:
            out[r[0]:r[1]] = win[r[0]:r[1], start]

        self._map(piece, [(i, j) for i, j in pairwise(cuts) if j > i])


# ---------------------------------------------------------------------------------------------------
# planning


@dataclass
class _Setup:
    n: int
    k: int
    sizes: np.ndarray
    unit_sizes: np.ndarray
    weights: np.ndarray
    cap: int | None
    budget: int
    quota: np.ndarray
    draws: np.ndarray
    level: float
    u: np.ndarray
    rank: np.ndarray


def _validate_arrays(labels: Any, tokens: Any, n_clusters: int | None) -> tuple[np.ndarray, np.ndarray | None, int]:
    lab = np.asarray(labels)
    if lab.ndim != 1:
        raise PlanConfigError(f"labels must be a 1-D array of cluster ids, got shape {lab.shape}")
    if lab.size == 0:
        raise PlanConfigError("labels is empty: the plan needs at least one document")
    if not np.issubdtype(lab.dtype, np.integer):
        raise PlanConfigError(f"labels must be integers, got dtype {lab.dtype}")
    lo, hi = int(lab.min()), int(lab.max())
    if lo < 0:
        raise PlanConfigError(f"labels must be cluster ids >= 0; found {lo}")
    k = hi + 1
    if n_clusters is not None:
        if hi >= n_clusters:
            raise PlanConfigError(f"labels hold cluster {hi} but n_clusters is {n_clusters} (ids 0..{n_clusters - 1})")
        k = int(n_clusters)
    lab = lab.astype(np.int64 if k >= 2**31 else np.int32, copy=False)
    tok = None
    if tokens is not None:
        tok = np.asarray(tokens)
        if tok.shape != lab.shape:
            raise PlanConfigError(f"tokens has shape {tok.shape}; expected one count per document {lab.shape}")
        if not np.issubdtype(tok.dtype, np.integer):
            raise PlanConfigError(f"tokens must be integers, got dtype {tok.dtype}")
        if tok.size and int(tok.min()) < 0:
            raise PlanConfigError(f"tokens must be >= 0; found {int(tok.min())}")
        tok = tok.astype(np.int64, copy=False)
    return lab, tok, k


def _cluster_weights(config: PlanConfig, unit_sizes: np.ndarray, k: int) -> np.ndarray:
    present = unit_sizes > 0
    s = config.strategy
    if s in ("clusterclip", "uniform"):
        w = present.astype(np.float64)
    elif s == "temperature":
        w = np.zeros(k)
        w[present] = unit_sizes[present].astype(np.float64) ** float(config.tau)
    else:
        w = np.ones(k)
        pairs = config.weights or ()
        ids = np.array([c for c, _ in pairs], dtype=np.int64)
        if ids.size and int(ids.max()) >= k:
            bad = [c for c, _ in pairs if c >= k]
            raise PlanConfigError(f"weights name unknown cluster(s) {bad[:5]}; valid cluster ids are 0..{k - 1}")
        w[ids] = [v for _, v in pairs]
        w[~present] = 0.0
    if not np.isfinite(w).all():
        raise PlanConfigError(f"temperature tau={config.tau} overflows the cluster weights; use a smaller |tau|")
    if not (w > 0).any():
        raise PlanConfigError("every cluster with documents has weight 0: nothing to sample; give at least one "
                              "non-empty cluster a positive weight")
    return w


def _setup(labels: np.ndarray, config: PlanConfig, tokens: np.ndarray | None, k: int) -> _Setup:
    n = labels.shape[0]
    sizes = np.bincount(labels, minlength=k).astype(np.int64)
    if config.budget_unit == "tokens":
        if tokens is None:
            raise PlanConfigError("budget_unit='tokens' needs per-document token counts (tokens=...)")
        unit_sizes = np.bincount(labels, weights=tokens, minlength=k).astype(np.int64)
        if int(tokens.sum()) == 0:
            raise PlanConfigError("every document has 0 tokens: a token budget cannot be met")
    else:
        unit_sizes = sizes
    total = int(unit_sizes.sum())
    budget = total if config.budget is None else int(config.budget)
    cap = config.effective_max_repeat
    jitter_rng = np.random.default_rng([config.seed, _SALT_JITTER])
    u = jitter_rng.random(k)
    rank = np.argsort(u, kind="stable")
    unit = "tokens" if config.budget_unit == "tokens" else "documents"
    if config.strategy == "random":
        weights = unit_sizes.astype(np.float64)
        if cap is not None and budget > cap * total:
            _raise_infeasible(budget, cap, total, unit, "all documents")
        return _Setup(n, k, sizes, unit_sizes, weights, cap, budget, np.zeros(k, np.int64),
                      np.zeros(k, np.int64), 0.0, u, rank)
    weights = _cluster_weights(config, unit_sizes, k)
    caps = np.full(k, np.inf) if cap is None else (cap * unit_sizes).astype(np.float64)
    active_units = int(unit_sizes[weights > 0].sum())
    if cap is not None and budget > cap * active_units:
        _raise_infeasible(budget, cap, active_units, unit,
                          "the clusters with positive weight" if config.strategy == "weights" else "all clusters")
    q_real, level = water_fill(weights, caps, budget)
    quota = round_quotas(q_real, caps, budget, rank)
    draws = quota.copy()
    return _Setup(n, k, sizes, unit_sizes, weights, cap, budget, quota, draws, level, u, rank)


def _raise_infeasible(budget: int, cap: int, units: int, unit: str, what: str) -> None:
    need = -(-budget // units) if units else None
    fix = f"raise max_repeat to {need} or lower the budget to {cap * units}" if need else "lower the budget"
    raise InfeasiblePlanError(
        f"budget of {budget} {unit} is infeasible with max_repeat={cap}: {what} hold {units} {unit}, so the "
        f"largest feasible budget is {cap * units}; the smallest max_repeat that fits is {need}; {fix}")


def _token_draws(st: _Setup, passes: _Passes, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Token mode: draws per cluster (whole passes, then the shortest prefix of the next reaching
    the token quota) and the tokens they carry."""
    k = st.k
    draws = np.zeros(k, np.int64)
    drawn_tokens = np.zeros(k, np.int64)
    for c in np.flatnonzero(st.quota > 0):
        tc, nc, q = int(st.unit_sizes[c]), int(st.sizes[c]), int(st.quota[c])
        full, rem = divmod(q, tc)
        d, t = full * nc, full * tc
        if rem:
            cum = np.cumsum(tokens[passes.pass_row(int(c), full)])
            j = int(np.searchsorted(cum, rem, side="left")) + 1
            d += j
            t += int(cum[j - 1])
        draws[c], drawn_tokens[c] = d, t
    return draws, drawn_tokens


class _Writer:
    """Destination of the plan chunks: an in-memory array or a memory-mapped ``.npy`` temp file."""

    def __init__(self, length: int, tmp: Path | None) -> None:
        if tmp is None:
            self.array = np.empty(length, dtype=np.int64)
        else:
            self.array = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.int64, shape=(length,))

    def put(self, pos: int, values: np.ndarray) -> None:
        self.array[pos:pos + values.shape[0]] = values

    def view(self, pos: int, count: int) -> np.ndarray:
        return self.array[pos:pos + count]


class _Stats:
    """Accumulates the mixture (draws per window per cluster) and exhaustion steps chunk by chunk."""

    def __init__(self, length: int, k: int, window: int) -> None:
        self.window = window
        self.k = k
        self.mixture = np.zeros((-(-length // window), k), dtype=np.int64)
        self.exhausted_at = np.full(k, -1, dtype=np.int64)

    def add_sequence(self, pos: int, clusters: np.ndarray) -> None:
        if clusters.size == 0:
            return
        w0 = pos // self.window
        w1 = (pos + clusters.size - 1) // self.window
        win = np.arange(pos, pos + clusters.size, dtype=np.int64) // self.window - w0
        counts = np.bincount(win * self.k + clusters, minlength=(w1 - w0 + 1) * self.k)
        self.mixture[w0:w1 + 1] += counts.reshape(w1 - w0 + 1, self.k)

    def add_rounds(self, pos: int, active: np.ndarray, rounds: int) -> None:
        """Rounds of ``active`` (one draw each, in this order) starting at plan position ``pos``."""
        m = active.size
        end = pos + rounds * m
        j = np.arange(m, dtype=np.int64)
        for w in range(pos // self.window, (end - 1) // self.window + 1):
            lo, hi = max(w * self.window, pos), min((w + 1) * self.window, end)
            first = np.clip(-((pos + j - lo) // m), 0, rounds)
            last = np.clip(-((pos + j - hi) // m), 0, rounds)
            self.mixture[w, active] += last - first


def build_plan(labels: np.ndarray, config: PlanConfig, tokens: np.ndarray | None = None,
               out: str | os.PathLike[str] | None = None, chunk_size: int = DEFAULT_CHUNK,
               n_clusters: int | None = None) -> Plan:
    """Build the ordered plan for ``labels`` (int [N], cluster ids) under ``config``.

    ``tokens`` (int [N]) is required for ``budget_unit="tokens"`` and, when given, adds token
    statistics. With ``out`` the order is streamed into that ``.npy`` (temp file, then atomic rename)
    and returned as a read-only memmap; memory then stays O(N + chunk_size). ``n_clusters`` declares
    K when trailing clusters are empty. Raises ``PlanConfigError`` for invalid inputs and
    ``InfeasiblePlanError`` when the budget exceeds the cap.
    """
    t_start = time.perf_counter()
    if not _is_int(chunk_size) or chunk_size < 1:
        raise PlanConfigError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
    lab, tok, k = _validate_arrays(labels, tokens, n_clusters)
    st = _setup(lab, config, tok, k)
    token_mode = config.budget_unit == "tokens"

    passes = None
    drawn_tokens = None
    scratch = chunk_size + 2 * k + 16  # the most draws one chunk can take (see _emit_rounds, _emit_timed)
    if config.strategy != "random":
        if token_mode and tok is not None:
            full, rem = np.divmod(st.quota, np.maximum(st.unit_sizes, 1))
            need_passes = full + (rem > 0)
            passes = _Passes(lab, k, need_passes, config.seed, scratch)
            st.draws, drawn_tokens = _token_draws(st, passes, tok)
        else:
            need_passes = -(-st.draws // np.maximum(st.sizes, 1))
            passes = _Passes(lab, k, need_passes, config.seed, scratch)
            if tok is not None:
                drawn_tokens = _docs_tokens_from(st, passes, lab, tok)
        length = int(st.draws.sum())
    else:
        length, epoch_cut = _random_length(st, config, tok)

    window = config.window if config.window is not None else max(1, length // N_WINDOWS)
    stats_acc = _Stats(length, k, window)

    def run(writer: _Writer) -> None:
        if config.strategy == "random":
            nonlocal drawn_tokens
            drawn_tokens = _emit_random(st, config, lab, tok, length, epoch_cut, writer, stats_acc, chunk_size)
            return
        if passes is None:
            return
        if config.order == "equal-rate" and not token_mode and _equal_weights(st):
            _emit_rounds(st, passes, writer, stats_acc, chunk_size)
        else:
            scale = np.full(k, np.inf)
            has = st.draws > 0
            if config.order == "spread":
                scale[has] = 1.0 / st.draws[has]
            elif token_mode:
                mean_len = st.unit_sizes[has] / st.sizes[has]
                scale[has] = mean_len / st.weights[has]
            else:
                scale[has] = 1.0 / st.weights[has]
            _emit_timed(st, passes, scale, writer, stats_acc, chunk_size)

    try:
        if out is None:
            writer = _Writer(length, None)
            run(writer)
            order: np.ndarray = writer.array
        else:
            from clusterclip.rundir import atomic_path

            out = Path(out)
            with atomic_path(out) as tmp:
                writer = _Writer(length, tmp)
                run(writer)
                writer.array.flush()
                del writer
            order = np.load(out, mmap_mode="r", allow_pickle=False)
    finally:
        if passes is not None:
            passes.close()

    per_cluster, hist = _closed_form_stats(st, config, lab, drawn_tokens, stats_acc, length)
    stats = _summary(st, config, per_cluster, hist, length, window, stats_acc, time.perf_counter() - t_start)
    return Plan(order=order, stats=stats, per_cluster=per_cluster, mixture=stats_acc.mixture,
                repeat_hist=hist, config=config)


def _docs_tokens_from(st: _Setup, passes: _Passes, lab: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Tokens carried by each cluster's draws (docs mode): whole passes plus the partial last pass."""
    token_sizes = np.bincount(lab, weights=tokens, minlength=st.k).astype(np.int64)
    full, rem = np.divmod(st.draws, np.maximum(st.sizes, 1))
    out = full * token_sizes
    for c in np.flatnonzero(rem > 0):
        out[c] += int(tokens[passes.pass_row(int(c), int(full[c]))[: rem[c]]].sum())
    return out


def _equal_weights(st: _Setup) -> bool:
    w = st.weights[st.draws > 0]
    return bool(w.size == 0 or np.all(w == w[0]))


def _emit_rounds(st: _Setup, passes: _Passes, writer: _Writer, acc: _Stats, chunk_size: int) -> None:
    """Equal weights: round t holds draw t of every cluster with more than t draws, in jitter order."""
    active = st.rank[st.draws[st.rank] > 0]
    pos = 0
    prev = 0
    for v in np.unique(st.draws[active]):
        active = active[st.draws[active] >= v]
        m = active.size
        per = max(1, chunk_size // m)
        d_act = st.draws[active]
        for r0 in range(int(prev), int(v), per):
            r1 = min(r0 + per, int(v))
            rounds = r1 - r0
            a = np.full(m, r0, dtype=np.int64)
            start = passes.starts(active, a, a + rounds)
            passes.gather_rounds(start, writer.view(pos, rounds * m).reshape(rounds, m))
            acc.add_rounds(pos, active, rounds)
            ends = np.flatnonzero(d_act == r1)
            if ends.size:
                acc.exhausted_at[active[ends]] = pos + (rounds - 1) * m + ends
            pos += rounds * m
        prev = v


def _counts_before(t: float, u: np.ndarray, scale: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Number of draws of each cluster with virtual time ``(k + u) * scale < t`` (exact in floats)."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        c = np.ceil(t / scale - u)
    c = np.clip(np.nan_to_num(c, nan=0.0, posinf=0.0, neginf=0.0), 0, d).astype(np.int64)
    for _ in range(2):
        down = (c > 0) & ((c - 1 + u) * scale >= t)
        c -= down
        up = (c < d) & ((c + u) * scale < t)
        c += up
    return c


def _argsort_by_time(times: np.ndarray) -> np.ndarray:
    """The stable argsort of ``times`` (ties in input order), via the faster unstable sort when no two
    times are equal, which is almost always (then both orders are the same)."""
    order = np.argsort(times)
    ordered = times[order]
    if np.any(ordered[1:] == ordered[:-1]):
        return np.argsort(times, kind="stable")
    return order


def _emit_timed(st: _Setup, passes: _Passes, scale: np.ndarray, writer: _Writer, acc: _Stats,
                chunk_size: int) -> None:
    """General weights: draws merged by virtual time ``(k + u_c) * scale_c``, one time window per chunk."""
    d = st.draws
    a = np.zeros(st.k, dtype=np.int64)
    u = st.u
    pos = 0
    length = int(d.sum())
    while pos < length:
        live = np.flatnonzero(a < d)
        t_next = float(((a[live] + u[live]) * scale[live]).min())
        rate = float((1.0 / scale[live]).sum())
        t1 = max(t_next + chunk_size / rate, np.nextafter(t_next, np.inf))
        b_live = _counts_before(t1, u[live], scale[live], d[live])
        need = b_live - a[live]
        sel = need > 0
        cl, a_c, need = live[sel], a[live][sel], need[sel]
        start = passes.starts(cl, a_c, a_c + need)
        step = _seg_arange(need)
        local = passes.buf[np.repeat(start, need) + step]
        kk = np.repeat(a_c, need) + step
        cl_rep = np.repeat(cl, need)
        times = (kk + u[cl_rep]) * scale[cl_rep]
        order = _argsort_by_time(times)
        writer.put(pos, local[order])
        cl_out = cl_rep[order]
        acc.add_sequence(pos, cl_out)
        last = (kk == d[cl_rep] - 1)[order]
        where = np.flatnonzero(last)
        acc.exhausted_at[cl_out[where]] = pos + where
        a[cl] += need
        pos += int(need.sum())


def _random_length(st: _Setup, config: PlanConfig, tok: np.ndarray | None) -> tuple[int, tuple[int, int]]:
    """Random strategy: plan length and where it ends (epoch, position inside that epoch)."""
    n = st.n
    if config.budget_unit == "docs":
        return st.budget, divmod(st.budget, n)
    if tok is None:
        raise PlanConfigError("budget_unit='tokens' needs per-document token counts (tokens=...)")
    total = int(tok.sum())
    full, rem = divmod(st.budget, total)
    if rem == 0:
        return full * n, (full, 0)
    cum = np.cumsum(tok[_epoch_perm(config.seed, full, n)])
    j = int(np.searchsorted(cum, rem, side="left")) + 1
    return full * n + j, (full, j)


def _epoch_perm(seed: int, epoch: int, n: int) -> np.ndarray:
    return np.random.default_rng([seed, _SALT_EPOCH, epoch]).permutation(n)


def _emit_random(st: _Setup, config: PlanConfig, lab: np.ndarray, tok: np.ndarray | None, length: int,
                 epoch_cut: tuple[int, int], writer: _Writer, acc: _Stats, chunk_size: int) -> np.ndarray | None:
    """Random strategy: epochs of fresh permutations of all documents, truncated at the budget."""
    n, k = st.n, st.k
    pos = 0
    drawn_tokens = np.zeros(k, np.int64) if tok is not None else None
    draws = np.zeros(k, np.int64)
    cap = st.cap
    while pos < length:
        epoch, within = divmod(pos, n)
        perm = _epoch_perm(config.seed, epoch, n)
        end = min(n, length - epoch * n)
        for s in range(within, end, chunk_size):
            e = min(s + chunk_size, end)
            piece = perm[s:e]
            writer.put(pos, piece)
            cl = lab[piece].astype(np.int64)
            acc.add_sequence(pos, cl)
            draws += np.bincount(cl, minlength=k)
            if drawn_tokens is not None:
                drawn_tokens += np.bincount(cl, weights=tok[piece], minlength=k).astype(np.int64)
            if cap is not None and epoch == cap - 1:
                done = np.flatnonzero(draws == cap * st.sizes)
                fresh = done[acc.exhausted_at[done] < 0]
                if fresh.size:
                    seen, first = np.unique(cl[::-1], return_index=True)
                    lastpos = np.full(k, -1, np.int64)
                    lastpos[seen] = pos + (cl.size - 1 - first)
                    acc.exhausted_at[fresh] = lastpos[fresh]
            pos += e - s
    st.draws = draws
    return drawn_tokens


def _closed_form_stats(st: _Setup, config: PlanConfig, lab: np.ndarray, drawn_tokens: np.ndarray | None,
                       acc: _Stats, length: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    sizes = st.sizes
    d = st.draws
    if config.strategy == "random":
        full, rem = divmod(length, st.n)
        extra = d - full * sizes
        unique = np.where(full > 0, sizes, extra)
        maxrep = np.where(extra > 0, full + 1, full) * (sizes > 0)
        hist = np.zeros(full + 2, np.int64)
        hist[full] += st.n - rem
        hist[full + 1] += rem
        quota = d.copy()
    else:
        full, rem = np.divmod(d, np.maximum(sizes, 1))
        unique = np.minimum(d, sizes)
        maxrep = full + (rem > 0)
        top = int(maxrep.max()) if maxrep.size else 0
        hist = np.bincount(full, weights=sizes - rem, minlength=top + 1)[: top + 1].astype(np.int64)
        hist[: top + 1] += np.bincount(full + 1, weights=rem, minlength=top + 2)[: top + 1].astype(np.int64)
        quota = st.quota.copy()
    nz = np.flatnonzero(hist)
    hist = hist[: nz[-1] + 1] if nz.size else np.zeros(1, np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(unique > 0, d / np.maximum(unique, 1), 0.0)
    per = {
        "draws": d.astype(np.int64), "unique": unique.astype(np.int64), "max_repeat": maxrep.astype(np.int64),
        "mean_repeat": mean.astype(np.float64), "exhausted_at": acc.exhausted_at.copy(),
        "quota": quota.astype(np.int64), "size": sizes.astype(np.int64),
    }
    if st.cap is not None:
        capped = (d >= st.cap * sizes) & (sizes > 0)
        per["exhausted_at"][~capped] = -1
    else:
        per["exhausted_at"][:] = -1
    if drawn_tokens is not None:
        per["tokens"] = drawn_tokens.astype(np.int64)
    return per, hist


def _summary(st: _Setup, config: PlanConfig, per: dict[str, np.ndarray], hist: np.ndarray, length: int,
             window: int, acc: _Stats, seconds: float) -> dict[str, Any]:
    unique = int(per["unique"].sum())
    ex = per["exhausted_at"]
    exhausted = ex[ex >= 0]
    return {
        "strategy": config.strategy,
        "name": config.name(),
        "budget_unit": config.budget_unit,
        "budget": st.budget,
        "max_repeat": st.cap,
        "tau": float(config.tau) if config.strategy == "temperature" else None,
        "order": config.order,
        "seed": int(config.seed),
        "length": length,
        "draws": length,
        "tokens": int(per["tokens"].sum()) if "tokens" in per else None,
        "n_docs": st.n,
        "n_clusters": st.k,
        "clusters_drawn": int((per["draws"] > 0).sum()),
        "unique_docs": unique,
        "coverage": unique / st.n if st.n else 0.0,
        "max_repeat_observed": int(hist.size - 1),
        "mean_repeat": length / unique if unique else 0.0,
        "clusters_exhausted": int(exhausted.size),
        "first_exhausted_at": int(exhausted.min()) if exhausted.size else -1,
        "water_level": st.level,
        "window": window,
        "n_windows": int(acc.mixture.shape[0]),
        "seconds": round(seconds, 3),
    }


# ---------------------------------------------------------------------------------------------------
# run-directory stage


def _stage(name: str) -> str:
    return f"plans/{name}/plan"


def plan_stage(run: RunDir, config: PlanConfig, force: bool = False) -> dict[str, Any]:
    """Build ``plans/<config.name()>/`` from the run's labels (and tokens), unless it is fresh.

    Uses token counts whenever the corpus stage has written them (required for a token budget). The
    caller holds the run-directory lock. Returns the stage record (statistics under ``"stats"``).
    """
    from clusterclip.rundir import config_hash, load_npy, save_npy

    run.require("cluster")
    if run.record("embed") is not None:
        run.require_current("cluster", "embed")
    tokens_path = run.path("tokens.npy")
    use_tokens = config.budget_unit == "tokens" or (run.record("corpus") is not None and tokens_path.exists())
    inputs = {"cluster": run.output_hash("cluster")}
    if use_tokens:
        run.require("corpus")
        inputs["corpus"] = run.output_hash("corpus")
    inputs_hash = config_hash(inputs)
    name = config.name()
    stage = _stage(name)
    cfg = config.to_json()
    if not force and run.is_fresh(stage, cfg, inputs_hash):
        return run.require(stage, verify=False)
    run.invalidate(stage)
    t0 = time.perf_counter()
    labels = load_npy(run.path("labels.npy"), mmap=True)
    sizes_path = run.path("sizes.npy")
    k = int(load_npy(sizes_path).shape[0]) if sizes_path.exists() else None
    tokens = load_npy(tokens_path, mmap=True) if use_tokens else None
    folder = run.path("plans", name)
    plan = build_plan(np.asarray(labels), config, tokens=None if tokens is None else np.asarray(tokens),
                      out=folder / "plan.npy", n_clusters=k)
    arrays = {
        "cluster_draws.npy": plan.per_cluster["draws"],
        "cluster_unique.npy": plan.per_cluster["unique"],
        "cluster_max_repeat.npy": plan.per_cluster["max_repeat"],
        "cluster_exhausted_at.npy": plan.per_cluster["exhausted_at"],
        "mixture.npy": plan.mixture,
        "repeat_hist.npy": plan.repeat_hist,
    }
    if "tokens" in plan.per_cluster:
        arrays["cluster_tokens.npy"] = plan.per_cluster["tokens"]
    for fname, arr in arrays.items():
        save_npy(folder / fname, arr)
    rel = [f"plans/{name}/{f}" for f in ("plan.npy", *arrays)]
    return run.write_record(stage, cfg, inputs_hash, rel, time.perf_counter() - t0, name=name, stats=plan.stats)


def list_plans(run: RunDir) -> list[str]:
    """Names of the finished plans in the run directory (those with a ``plan.json`` record)."""
    root = run.path("plans")
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "plan.json").is_file())


def iter_chunks(order: np.ndarray, chunk: int = DEFAULT_CHUNK) -> Iterator[np.ndarray]:
    """Consecutive slices of a (possibly memory-mapped) plan, as in-memory arrays."""
    for s in range(0, order.shape[0], chunk):
        yield np.asarray(order[s:s + chunk])
