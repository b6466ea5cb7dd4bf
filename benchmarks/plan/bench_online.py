"""What one online re-plan costs at scale (issue 36): ``OnlineMixer.maybe_update`` on a run of N documents in K
clusters, against building the root plan in the same run (the baseline: a plan of the same length from scratch).

``python benchmarks/plan/bench_online.py --docs 1000000 --clusters 10000`` prints, per update: the seconds of the
controller's step, of the continuation plan (written to disk, checksummed), the size of the controller state and
of the plan, and the ratio to the root plan's build time.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from clusterclip.contract.cluster import CLUSTER_STAGE, LABELS
from clusterclip.plan import PlanConfig
from clusterclip.plan.stage import plan_stage
from clusterclip.store import RunDir, save_npy
from clusterclip.torch.mixer import OnlineMixer
from tests.records import write_record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--clusters", type=int, default=10_000)
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--every", type=int, default=100_000, help="plan positions between updates")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = RunDir(Path(tmp) / "run")
        rng = np.random.default_rng(0)
        sizes = rng.zipf(1.5, args.clusters).astype(np.float64)  # skewed cluster sizes, as corpora have
        labels = rng.choice(args.clusters, args.docs, p=sizes / sizes.sum()).astype(np.int32)
        save_npy(run.path(LABELS), labels)
        write_record(run, CLUSTER_STAGE, {"k": args.clusters}, "x", [LABELS], 0.0)
        root = PlanConfig(budget=2 * args.docs, max_repeat=4)
        t0 = time.perf_counter()
        plan_stage(run, root)
        root_s = time.perf_counter() - t0
        mixer = OnlineMixer(run.root, root.name(), every=args.every)
        rows = []
        for u in range(1, args.updates + 1):
            ids = labels[rng.integers(0, args.docs, args.every)]  # the clusters of the documents trained
            mixer.report(ids, rng.gamma(2.0, 1.5, args.every))
            t0 = time.perf_counter()
            controller = mixer.controller.update(mixer.sums, mixer.counts)
            step_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            name = mixer.maybe_update(u * args.every)
            total_s = time.perf_counter() - t0
            state = len(json.dumps(mixer.state_dict()))
            rows.append({"update": u, "controller_s": round(step_s, 4), "replan_s": round(total_s, 2),
                         "vs_root_plan": round(total_s / root_s, 2), "state_bytes": state,
                         "plan_bytes": (run.path("plans", str(name), "plan.npy")).stat().st_size,
                         "weights_equal": bool(np.allclose(controller.weights, mixer.controller.weights))})
        print(json.dumps({"docs": args.docs, "clusters": args.clusters, "root_plan_s": round(root_s, 2),
                          "updates": rows}, indent=1))


if __name__ == "__main__":
    main()
