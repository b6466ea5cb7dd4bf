"""Online against static plans: paired differences from finished ``clusterclip experiment`` results.

Every online strategy of ``results.json`` is compared with every static one (and with the online strategies after
it, e.g. two exploration schedules) trained on the same (split, seed) pairs, on the held-out losses the
experiment reports, with the experiment's own paired interval (expanded bootstrap, 95 %) and verdict. The
weights each online run ended on are summarised by their distance from uniform (total variation) and the ratio of
the largest to the smallest weight, and the updates by how many left the weights uniform.

    .venv/bin/python benchmarks/experiment/online_vs_static.py runs/online-minipile/experiment/results.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.experiment.results import pair_key
from clusterclip.experiment.stats import format_interval, paired_interval

METRICS = (("heldout_macro_domain", "macro (domains)"), ("heldout_macro_cluster", "macro (clusters)"),
           ("heldout_micro", "micro"))


def by_strategy(results: dict[str, Any]) -> dict[str, dict[tuple[Any, int], dict[str, Any]]]:
    """Runs of each strategy keyed by their (split, seed) pair."""
    out: dict[str, dict[tuple[Any, int], dict[str, Any]]] = {}
    for run in results["runs"].values():
        out.setdefault(run["strategy"], {})[pair_key(run)] = run
    return out


def comparisons(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (online strategy, static strategy or a later online one, metric) with the paired interval of
    the difference."""
    runs = by_strategy(results)
    online = [s for s, r in runs.items() if any("online" in x for x in r.values())]
    static = [s for s in runs if s not in online]
    rows = []
    for i, o in enumerate(online):
        for s in [*static, *online[i + 1:]]:
            pairs = sorted(set(runs[o]) & set(runs[s]))
            for metric, label in METRICS:
                diffs = [runs[o][p][metric] - runs[s][p][metric] for p in pairs
                         if runs[o][p].get(metric) is not None and runs[s][p].get(metric) is not None]
                if diffs:
                    rows.append({"online": o, "static": s, "metric": label, **paired_interval(diffs)})
    return rows


def _tv(w: Any) -> float:
    a = np.asarray(w, np.float64)
    return float(0.5 * np.abs(a - 1 / a.size).sum())


def final_weights(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per online strategy: the mean over its runs of the last weights' total variation from uniform and of
    their largest / smallest ratio, the number of updates, how many left the weights uniform (exactly, at the
    record's 6 decimals), the step of the first that did not, and the total variation after each update."""
    out = {}
    for name, runs in by_strategy(results).items():
        done = [r["online"]["updates"] for r in runs.values() if r.get("online", {}).get("updates")]
        if done:
            last = [np.asarray(u[-1]["weights"]) for u in done]
            uniform = [[_tv(x["weights"]) < 1e-6 for x in u] for u in done]
            first = [next((x["step"] for x, flat in zip(u, f, strict=True) if not flat), None)
                     for u, f in zip(done, uniform, strict=True)]
            out[name] = {"tv_from_uniform": float(np.mean([_tv(w) for w in last])),
                         "max_over_min": float(np.mean([w.max() / w.min() for w in last])),
                         "updates": float(np.mean([len(u) for u in done])),
                         "uniform_updates": float(np.mean([sum(f) for f in uniform])),
                         "first_step_off_uniform": first,
                         "tv_per_update": np.mean([[_tv(x["weights"]) for x in u] for u in done
                                                   if len(u) == len(done[0])], axis=0).round(4).tolist()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", type=Path, help="results.json of finished experiments")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    a = ap.parse_args()
    everything = {}
    for path in a.results:
        results = json.loads(path.read_text())
        rows, weights = comparisons(results), final_weights(results)
        everything[str(path)] = {"rows": rows, "weights": weights}
        print(f"\n{path}: {len({pair_key(r) for r in results['runs'].values()})} (split, seed) pairs\n")
        print("| online | vs | " + " | ".join(label for _, label in METRICS) + " |")
        print("|---|---|" + "---|" * len(METRICS))
        for o in dict.fromkeys(r["online"] for r in rows):
            for s in dict.fromkeys(r["static"] for r in rows if r["online"] == o):
                cells = {r["metric"]: format_interval(r) for r in rows if r["online"] == o and r["static"] == s}
                print(f"| {o} | {s} | " + " | ".join(cells.get(label, "–") for _, label in METRICS) + " |")
        for name, w in weights.items():
            print(f"\n{name}: last weights TV from uniform {w['tv_from_uniform']:.3f}, "
                  f"max/min {w['max_over_min']:.2f}, {w['updates']:.0f} updates, {w['uniform_updates']:.1f} of them "
                  f"left the weights uniform; first update off uniform at step {w['first_step_off_uniform']}; "
                  f"TV from uniform after each update {w['tv_per_update']}")
    if a.json:
        a.json.write_text(json.dumps(everything, indent=1))


if __name__ == "__main__":
    main()
