"""Does balancing over strata help training? (issue 43's evidence.)

On corpora with a known quality signal (``benchmarks/corpora/build_degraded.py``: 30 % of the documents degraded, their
domain ``degraded-<kind>``), ``clusterclip experiment`` trains one small GPT per (strategy, split, seed) at the same
token budget, scoring documents with ``--quality-scorer heuristic`` (the scorer never sees the degraded labels):

* ``random``: the corpus' natural mixture;
* ``cc``: ClusterClip (clusters balanced, one cap);
* ``cc-tiers``: ClusterClip over ``strata=[cluster,quality:4]`` with ``tier_weights=[0,1,1,2]`` (the worst quarter
  never drawn, the best quarter twice as often inside its cluster);
* ``q-only``: the same tiers under ``random`` (quality filtering without cluster balance).

The experiment's own metrics average over every held-out domain, degraded ones included, which a plan that never
draws degraded text must lose on. What a quality tier is *for* is the clean text, so this script also reports the
macro loss over the clean domains only (the held-out per-domain losses of each run, ``degraded-*`` left out),
paired per (split, seed) with the experiment's expanded-bootstrap 95 % interval, and the share of the training
draws that were degraded documents.

    .venv/bin/python benchmarks/corpora/build_degraded.py minipile --out /tmp/degraded-minipile.jsonl
    .venv/bin/python benchmarks/corpora/build_degraded.py pydocs --out /tmp/degraded-pydocs.jsonl
    .venv/bin/python benchmarks/experiment/strata_evidence.py /tmp/degraded-minipile.jsonl /tmp/degraded-pydocs.jsonl \
        --work /tmp/strata-evidence
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from clusterclip.experiment.stats import format_interval, paired_interval

STRATEGIES = ("random,clusterclip:name=cc,"
              "clusterclip:strata=[cluster,quality:4],tier_weights=[0,1,1,2],name=cc-tiers,"
              "random:strata=[quality:4],tier_weights=[0,1,1,2],name=q-only")
SHAPE = ["--docs", "800", "--max-words", "80", "--k", "12", "--passes", "3", "--max-repeats", "6",
         "--vocab-size", "1024", "--context", "64", "--layers", "1", "--d-model", "64", "--heads", "2",
         "--curve-points", "4"]
DEGRADED = "degraded-"


def run_experiment(corpus: Path, out: Path, splits: str, seeds: str) -> dict:
    """``clusterclip experiment`` on one corpus (a restart skips finished runs); its results.json."""
    cmd = [sys.executable, "-m", "clusterclip", "experiment", str(corpus), "--out", str(out), "--quality-scorer",
           "heuristic", "--strategies", STRATEGIES, *SHAPE, "--split-seeds", splits, "--seeds", seeds, "-q"]
    subprocess.run(cmd, check=True, env={**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    return json.loads((out / "experiment" / "results.json").read_text())


def clean_macro(run: dict) -> float:
    """Mean held-out loss over the run's clean domains."""
    return float(np.mean([v for d, v in run["heldout_per_domain"].items() if not d.startswith(DEGRADED)]))


def degraded_share(run: dict) -> float:
    """Share of the plan's draws that were degraded documents (the run's domain mixture over the whole plan)."""
    shares = run["domain_mixture"]["shares"]
    total = sum(shares.values()) or 1.0
    return sum(v for d, v in shares.items() if d.startswith(DEGRADED)) / total


def table(results: dict) -> list[str]:
    """Markdown rows: per strategy, clean-domain macro (mean), its paired difference to random and to cc, the
    experiment's all-domain macro difference to random, and the degraded share of the draws."""
    by: dict[str, dict[tuple[int, int], dict]] = {}
    for run in results["runs"].values():
        by.setdefault(run["strategy"], {})[(run["split"], run["seed"])] = run
    rows = []
    for name, runs in by.items():
        clean = np.mean([clean_macro(r) for r in runs.values()])
        share = np.mean([degraded_share(r) for r in runs.values()])
        rows.append(f"| {name} | {len(runs)} | {clean:.3f} | {_diff(by, name, 'random', clean_macro)} "
                    f"| {_diff(by, name, 'cc', clean_macro)} "
                    f"| {_diff(by, name, 'random', lambda r: r['heldout_macro_domain'])} | {share:.1%} |")
    return rows


def _diff(by: dict[str, dict[tuple[int, int], dict]], name: str, other: str, metric: Callable[[dict], float]) -> str:
    """Paired difference of ``metric`` between strategy ``name`` and ``other`` over their common (split, seed)."""
    if name == other or other not in by:
        return "–"
    keys = sorted(set(by[name]) & set(by[other]))
    return format_interval(paired_interval([metric(by[name][k]) - metric(by[other][k]) for k in keys]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpora", nargs="+", type=Path)
    parser.add_argument("--work", type=Path, default=Path("runs/strata-evidence"))
    parser.add_argument("--split-seeds", default="0,1,2")
    parser.add_argument("--seeds", default="0,1")
    args = parser.parse_args()
    head = ("| strategy | runs | macro, clean domains | Δ clean vs random [95 %] | Δ clean vs cc [95 %] "
            "| Δ macro all domains vs random [95 %] | degraded share of draws |\n|---|---|---|---|---|---|---|")
    for corpus in args.corpora:
        results = run_experiment(corpus, args.work / corpus.stem, args.split_seeds, args.seeds)
        print(f"\n{corpus.name}\n\n{head}")
        print("\n".join(table(results)))


if __name__ == "__main__":
    main()
