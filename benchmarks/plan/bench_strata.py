"""A plan over strata against today's plain ClusterClip plan, built alternately in one process (same load).

    .venv/bin/python benchmarks/plan/bench_strata.py                    # 10^7 draws, 10^4 clusters x 5 tiers
    .venv/bin/python benchmarks/plan/bench_strata.py --draws 1000000 --clusters 1000 --repeats 3

Corpus: N documents in K clusters with Zipf-like sizes and a uniform random ``quality`` field. Plans:

* plain: ``clusterclip`` with cap R (the paper's equal-rate rounds);
* strata: ``clusterclip`` over ``cluster,quality:T`` with tier weights ``0,1,1,2,4`` and per-tier caps
  ``0,2,3,4,6`` (the issue's settings), the same budget.

Both are built into memory; the time of each is the best of ``--repeats`` alternate builds, and the ratio
strata / plain is the result (the target: within 2x).
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np
from bench_plan import zipf_labels

from clusterclip.plan import PlanConfig, build_plan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=4_000_000)
    ap.add_argument("--clusters", type=int, default=10_000)
    ap.add_argument("--tiers", type=int, default=5)
    ap.add_argument("--draws", type=int, default=10_000_000)
    ap.add_argument("--cap", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    labels = zipf_labels(a.docs, a.clusters)
    quality = np.random.default_rng(1).random(a.docs)
    weights = ",".join(str(w) for w in [0, 1, 1, 2, 4][: a.tiers] + [1] * max(0, a.tiers - 5))
    caps = ",".join(str(c) for c in [0, 2, 3, 4, 6][: a.tiers] + [a.cap] * max(0, a.tiers - 5))
    plans = {
        "plain": (PlanConfig(strategy="clusterclip", max_repeat=a.cap, budget=a.draws), None),
        "strata": (PlanConfig(strategy="clusterclip", max_repeat=a.cap, budget=a.draws,
                              strata=f"cluster,quality:{a.tiers}", tier_weights=weights, tier_caps=caps),
                   {"quality": quality}),
    }
    best = {name: float("inf") for name in plans}
    stats = {}
    for _ in range(a.repeats):
        for name, (cfg, fields) in plans.items():
            t0 = time.perf_counter()
            plan = build_plan(labels, cfg, fields=fields)
            best[name] = min(best[name], time.perf_counter() - t0)
            stats[name] = {"length": int(np.asarray(plan.order).size), "exhausted": plan.stats["clusters_exhausted"],
                           "strata": (plan.stats.get("strata") or {}).get("n_strata")}
            del plan
    print(json.dumps({"docs": a.docs, "clusters": a.clusters, "tiers": a.tiers, "draws": a.draws,
                      "seconds": {k: round(v, 3) for k, v in best.items()},
                      "ratio": round(best["strata"] / best["plain"], 2), "stats": stats,
                      "machine": platform.processor() or platform.machine()}, indent=2))


if __name__ == "__main__":
    main()
