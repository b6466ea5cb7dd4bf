"""Does the ``--preset skewed`` regime make the clip matter? Cluster-size skew and repeats, no training.

    .venv/bin/python benchmarks/experiment/skewed_regime.py ../shared/data/minipile.jsonl.gz --out runs/skewed-sizes

Prepares the preset's first split exactly as ``clusterclip experiment --preset skewed`` does (subset,
held-out split, k-means of the training split, BPE), builds the uniform and ClusterClip plans for the
experiment's token budget, and prints: the training cluster sizes (largest / smallest and mean /
smallest ratios), how often uniform repeats the documents of the smallest clusters, and whether each
cap binds (documents drawn at the cap; clusters exhausted before the end of the plan).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from clusterclip.experiment.config import preset_config
from clusterclip.experiment.splits import prepare_split
from clusterclip.plan import PlanConfig, build_plan


def regime(inputs: list[str], out: str, preset: str = "skewed", smallest: int = 5) -> dict[str, object]:
    """Sizes and repeats of the preset's first split (see the module docstring)."""
    cfg = preset_config(preset)
    split = cfg.splits()[0]
    data, _ = prepare_split(inputs, out, cfg, split)
    labels, k, lengths = data.prep.labels, data.prep.data["k"], data.tok.train.lengths
    sizes = np.bincount(labels, minlength=k)
    small = np.argsort(sizes, kind="stable")[:smallest]
    report: dict[str, object] = {
        "train_documents": int(labels.size), "k": k, "budget_tokens": data.setup.budget, "passes": cfg.passes,
        "size_max": int(sizes.max()), "size_min": int(sizes.min()), "size_median": float(np.median(sizes)),
        "ratio_max_min": round(float(sizes.max() / max(sizes.min(), 1)), 1),
        "ratio_mean_min": round(float(sizes.mean() / max(sizes.min(), 1)), 1),
        "smallest_sizes": sizes[small].tolist(), "plans": {}}
    specs = [("uniform", None)] + [("clusterclip", r) for r in cfg.max_repeats]
    for strategy, cap in specs:
        plan = build_plan(labels, PlanConfig(strategy=strategy, budget=data.setup.budget, budget_unit="tokens",
                                             max_repeat=cap, seed=0), tokens=lengths, n_clusters=k)
        counts = np.bincount(np.asarray(plan.order), minlength=labels.size)
        at_small = np.isin(labels, small)
        exhausted = plan.per_cluster["exhausted_at"]
        report["plans"][f"{strategy}{'' if cap is None else f'-R{cap}'}"] = {
            "smallest_clusters_mean_repeats": [round(float(counts[labels == c].mean()), 1) for c in small],
            "smallest_max_repeats": int(counts[at_small].max()),
            "docs_at_cap": None if cap is None else int((counts == cap).sum()),
            "clusters_exhausted": None if exhausted is None else int((np.asarray(exhausted) >= 0).sum()),
        }
    return report


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+")
    p.add_argument("--out", required=True)
    p.add_argument("--preset", default="skewed")
    a = p.parse_args()
    json.dump(regime(a.inputs, a.out, a.preset), sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
