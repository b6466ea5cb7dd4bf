"""Cost of plan identities and of continuing a plan, as ratios measured side by side in one process.

    .venv/bin/python benchmarks/plan/bench_continue.py --n 2000000 --k 2000 --repeats 3

Corpus: N documents in K clusters with Zipf-like sizes. Measured, alternating, minimum of the repeats:

* ``plan``: ``build_plan`` (clusterclip, R=4, budget 2 N) as shipped, hashing its identity chunk by
  chunk as it writes the order;
* ``plan, no hash``: the same with the identity hasher replaced by a no-op (the cost of identities);
* ``hash alone``: ``identity_of`` over the finished order (the cost if the hash were not overlapped);
* ``continuation``: a plan continuing ``plan`` after 30 % under R=3 for the remaining 70 %
  (``prior_counts`` plus ``build_plan(..., prior=...)``), against ``plain 70 %``: an ordinary R=3 plan
  of the same length from scratch.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from clusterclip.contract import plan_identity as identity
from clusterclip.contract.plan_identity import identity_of
from clusterclip.plan import PlanConfig, build_plan
from clusterclip.plan.prior import prior_counts


class _NoHash:
    def add(self, chunk: np.ndarray) -> None:
        pass

    def hexdigest(self) -> str:
        return ""


def _labels(n: int, k: int) -> np.ndarray:
    sizes = np.maximum(1, (n / np.arange(1, k + 1)) / np.sum(1 / np.arange(1, k + 1))).astype(np.int64)
    sizes[0] += n - sizes.sum()
    return np.random.default_rng(0).permutation(np.repeat(np.arange(k), sizes)).astype(np.int32)


def _timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2_000_000)
    ap.add_argument("--k", type=int, default=2_000)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    labels = _labels(a.n, a.k)
    budget = 2 * a.n
    at = int(0.3 * budget)
    base, cont = PlanConfig(max_repeat=4, budget=budget), PlanConfig(max_repeat=3, budget=budget - at)
    best: dict[str, float] = {}
    shipped, parent = identity.OrderHash, None
    for r in range(a.repeats):
        for hashed in (r % 2 == 0, r % 2 == 1):  # alternate which runs first
            identity.OrderHash = shipped if hashed else _NoHash  # type: ignore[misc,assignment]
            try:
                t, plan = _timed(build_plan, labels, base)
            finally:
                identity.OrderHash = shipped  # type: ignore[misc]
            what = "plan" if hashed else "plan, no hash"
            best[what] = min(best.get(what, t), t)
            if hashed:
                parent = plan
        assert parent is not None
        t, _ = _timed(identity_of, parent.order)
        best["hash alone"] = min(best.get("hash alone", t), t)
        t, _ = _timed(lambda order: build_plan(labels, cont, prior=prior_counts(order, at, a.n)), parent.order)
        best["continuation"] = min(best.get("continuation", t), t)
        t, _ = _timed(build_plan, labels, cont)
        best["plain 70 %"] = min(best.get("plain 70 %", t), t)
    print(f"N={a.n:,} K={a.k:,} budget={budget:,} switch at {at:,}; min of {a.repeats}; "
          f"load average {os.getloadavg()[0]:.1f}")
    print("| measured | seconds (min) | ratio |")
    print("|---|---|---|")
    print(f"| plan (identity hashed while planning) | {best['plan']:.2f} | "
          f"{best['plan'] / best['plan, no hash']:.2f} x plan without hash |")
    print(f"| plan without hash | {best['plan, no hash']:.2f} | 1.00 |")
    print(f"| identity_of(order) alone | {best['hash alone']:.2f} | "
          f"{best['hash alone'] / best['plan, no hash']:.2f} x plan without hash |")
    print(f"| continuation after 30 %, R=3 | {best['continuation']:.2f} | "
          f"{best['continuation'] / best['plain 70 %']:.2f} x plain plan of its length |")
    print(f"| plain R=3 plan of the same length | {best['plain 70 %']:.2f} | 1.00 |")


if __name__ == "__main__":
    main()
