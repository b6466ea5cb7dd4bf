"""How much the trainer side and the pure planner settings load: clusterclip modules, all modules and import
time of each statement, in fresh interpreters (median of ``--repeat`` runs after one warm-up).

    python benchmarks/contract/bench_imports.py                    # this checkout
    PYTHONPATH=OTHER/src python benchmarks/contract/bench_imports.py   # another checkout, for a before/after table
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

STATEMENTS = ("import torch", "import clusterclip.torch", "from clusterclip.plan import PlanConfig")
"""``import torch`` alone is the baseline: what the trainer side costs beyond it is clusterclip's."""
PROBE = """
import sys, time
t = time.perf_counter()
{statement}
dt = time.perf_counter() - t
ours = sorted(m for m in sys.modules if m == "clusterclip" or m.startswith("clusterclip."))
print(__import__("json").dumps({{"seconds": dt, "ours": ours, "all": len(sys.modules)}}))
"""


def measure(statement: str, repeat: int) -> dict[str, object]:
    """Median import time over ``repeat`` fresh interpreters, with the modules the statement loads."""
    runs = []
    for _ in range(repeat + 1):
        out = subprocess.run([sys.executable, "-c", PROBE.format(statement=statement)], check=True,
                             capture_output=True, text=True).stdout
        runs.append(json.loads(out))
    runs = runs[1:]  # the first warms the file cache
    packages = sorted({m.split(".")[1] for m in runs[0]["ours"] if "." in m})
    return {"statement": statement, "clusterclip_modules": len(runs[0]["ours"]), "all_modules": runs[0]["all"],
            "seconds": statistics.median(r["seconds"] for r in runs), "packages": packages}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print rows as JSON")
    args = parser.parse_args()
    rows = [measure(s, args.repeat) for s in STATEMENTS]
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print("| statement | clusterclip modules | all modules | import time (median) | clusterclip packages loaded |")
    print("|---|---:|---:|---:|---|")
    for r in rows:
        print(f"| `{r['statement']}` | {r['clusterclip_modules']} | {r['all_modules']} | {r['seconds']:.3f} s | "
              f"{', '.join(r['packages'])} |")


if __name__ == "__main__":
    main()
