"""k-means: clusterclip (faiss spherical, k-means++) against scikit-learn KMeans and MiniBatchKMeans.

All three cluster the same L2-normalised embeddings into the same K, in one process, one after another.
Quality is measured the same way for each: the spherical objective (mean cosine of each document to the
normalised mean of its cluster) and NMI with the ground-truth ``group`` (e.g. minipile's ``domain``).

    python benchmarks/bench_kmeans.py RUN_DIR [--k 91 7] [--repeats 3]

RUN_DIR is a run directory with embeddings (``clusterclip embed ... --out RUN_DIR``).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from sklearn.cluster import KMeans, MiniBatchKMeans
from sklearn.metrics import normalized_mutual_info_score

from clusterclip.cluster import assign, fit_centroids
from clusterclip.corpus import read_column
from clusterclip.embed import load_embeddings
from clusterclip.rundir import RunDir


def spherical_objective(x: np.ndarray, labels: np.ndarray, k: int) -> float:
    sums = np.zeros((k, x.shape[1]))
    np.add.at(sums, labels, x)
    cents = sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)
    return float(np.mean(np.sum(x * cents[labels], axis=1)))


def ours(x: np.ndarray, k: int, seed: int) -> np.ndarray:
    fit = fit_centroids(x, k, seed=seed)
    labels, _ = assign([x], fit.centroids)
    return labels


def sk_kmeans(x: np.ndarray, k: int, seed: int) -> np.ndarray:
    return KMeans(k, init="k-means++", n_init=1, random_state=seed).fit_predict(x)


def sk_minibatch(x: np.ndarray, k: int, seed: int) -> np.ndarray:
    return MiniBatchKMeans(k, init="k-means++", n_init=1, batch_size=4096, random_state=seed).fit_predict(x)


METHODS = {"clusterclip (faiss)": ours, "sklearn KMeans": sk_kmeans, "sklearn MiniBatchKMeans": sk_minibatch}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir")
    ap.add_argument("--k", type=int, nargs="+", default=[91, 7])
    ap.add_argument("--repeats", type=int, default=3, help="seeds per method; mean and spread are reported")
    ap.add_argument("--json", default=None, help="also write the rows as JSON here")
    args = ap.parse_args()
    run = RunDir(args.run_dir)
    x = np.ascontiguousarray(load_embeddings(run), dtype=np.float32)
    groups = read_column(run, "group")
    truth = np.unique(np.array([g or "" for g in groups]), return_inverse=True)[1]
    rows = []
    print(f"{len(x):,} x {x.shape[1]} embeddings from {run.root}")
    print("| K | method | wall s (mean ± sd) | time vs ours | objective | NMI vs ground truth |")
    print("|---|---|---|---|---|---|")
    for k in args.k:
        base = None
        for name, fn in METHODS.items():
            times, objs, nmis = [], [], []
            for seed in range(args.repeats):
                t0 = time.perf_counter()
                labels = fn(x, k, seed)
                times.append(time.perf_counter() - t0)
                objs.append(spherical_objective(x, labels, k))
                nmis.append(normalized_mutual_info_score(truth, labels))
            t = float(np.mean(times))
            base = base or t
            row = {"k": k, "method": name, "seconds": t, "seconds_sd": float(np.std(times)),
                   "ratio": t / base, "objective": float(np.mean(objs)), "objective_sd": float(np.std(objs)),
                   "nmi": float(np.mean(nmis)), "nmi_sd": float(np.std(nmis))}
            rows.append(row)
            print(f"| {k} | {name} | {t:.2f} ± {row['seconds_sd']:.2f} | {row['ratio']:.1f}x | "
                  f"{row['objective']:.4f} ± {row['objective_sd']:.4f} | {row['nmi']:.3f} ± {row['nmi_sd']:.3f} |",
                  flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
