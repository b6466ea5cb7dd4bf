"""k-means: clusterclip (faiss spherical, k-means++) against scikit-learn KMeans and MiniBatchKMeans.

All three cluster the same L2-normalised embeddings into the same K, in one process, one after another.
Quality is measured the same way for each: the spherical objective (mean cosine of each document to the
normalised mean of its cluster) and NMI with the ground-truth ``group`` (e.g. minipile's ``domain``).

    python benchmarks/cluster/bench_kmeans.py RUN_DIR [--k 91 7] [--repeats 3]

With ``--seeding``, only the greedy k-means++ seeding changes: clusterclip's ``greedy_kmeans_pp`` and
``sklearn.cluster.kmeans_plusplus`` on float32 and on float64 input seed the same subsample
(``SEED_POINTS_PER_CENTROID x K`` rows), then faiss runs the cluster stage's Lloyd iterations on the
stage's training sample and every document is assigned.

    python benchmarks/cluster/bench_kmeans.py RUN_DIR --seeding --k 100 1000 [--repeats 3]

RUN_DIR is a run directory with embeddings (``clusterclip embed ... --out RUN_DIR``).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import numpy as np
from sklearn.cluster import KMeans, MiniBatchKMeans, kmeans_plusplus
from sklearn.metrics import normalized_mutual_info_score

from clusterclip.cluster.config import DEFAULT_POINTS_PER_CENTROID
from clusterclip.cluster.kmeans import SEED_POINTS_PER_CENTROID, assign, fit_centroids, greedy_kmeans_pp, sample_rows
from clusterclip.contract.corpus import read_column
from clusterclip.contract.embed import load_embeddings
from clusterclip.store import RunDir


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


def sklearn_seeds(dtype: type) -> Callable[[np.ndarray, int, int], np.ndarray]:
    def seeds(x: np.ndarray, k: int, seed: int) -> np.ndarray:
        centers, _ = kmeans_plusplus(x.astype(dtype), k, random_state=seed)
        return np.ascontiguousarray(centers, dtype=np.float32)

    return seeds


SEEDINGS = {"clusterclip greedy_kmeans_pp (float32)": greedy_kmeans_pp,
            "sklearn kmeans_plusplus (float32 in)": sklearn_seeds(np.float32),
            "sklearn kmeans_plusplus (float64 in)": sklearn_seeds(np.float64)}


def seeded_fit(x: np.ndarray, k: int, seed: int, seeding: Callable[..., np.ndarray]) -> tuple[np.ndarray, float]:
    """The cluster stage's fit with ``seeding``: labels of every row and the seconds spent seeding."""
    import faiss

    train = x[sample_rows(len(x), k * DEFAULT_POINTS_PER_CENTROID, seed)]
    rng = np.random.default_rng(seed)
    sub = train
    if len(train) > SEED_POINTS_PER_CENTROID * k:
        sub = train[np.sort(rng.choice(len(train), SEED_POINTS_PER_CENTROID * k, replace=False))]
    t0 = time.perf_counter()
    init = seeding(np.ascontiguousarray(sub), k, seed)
    t_seed = time.perf_counter() - t0
    km = faiss.Kmeans(x.shape[1], k, niter=25, spherical=True, seed=seed, verbose=False,
                      max_points_per_centroid=max(DEFAULT_POINTS_PER_CENTROID, -(-len(train) // k)),
                      min_points_per_centroid=1)
    km.train(np.ascontiguousarray(train), init_centroids=init)
    labels, _ = assign([x], km.centroids / np.linalg.norm(km.centroids, axis=1, keepdims=True))
    return labels, t_seed


def compare_seedings(x: np.ndarray, truth: np.ndarray, ks: list[int], repeats: int) -> list[dict]:
    rows = []
    print("| K | seeding | seeding s (mean ± sd) | time vs ours | fit + assign s | objective | NMI |")
    print("|---|---|---|---|---|---|---|")
    for k in ks:
        base = None
        for name, seeding in SEEDINGS.items():
            seeds, totals, objs, nmis = [], [], [], []
            for seed in range(repeats):
                t0 = time.perf_counter()
                labels, t_seed = seeded_fit(x, k, seed, seeding)
                totals.append(time.perf_counter() - t0)
                seeds.append(t_seed)
                objs.append(spherical_objective(x, labels, k))
                nmis.append(normalized_mutual_info_score(truth, labels))
            base = base or float(np.mean(seeds))
            row = {"k": k, "seeding": name, "seed_seconds": float(np.mean(seeds)), "seed_sd": float(np.std(seeds)),
                   "ratio": float(np.mean(seeds)) / base, "total_seconds": float(np.mean(totals)),
                   "objective": float(np.mean(objs)), "objective_sd": float(np.std(objs)),
                   "nmi": float(np.mean(nmis)), "nmi_sd": float(np.std(nmis))}
            rows.append(row)
            print(f"| {k} | {name} | {row['seed_seconds']:.2f} ± {row['seed_sd']:.2f} | {row['ratio']:.2f}x | "
                  f"{row['total_seconds']:.1f} | {row['objective']:.4f} ± {row['objective_sd']:.4f} | "
                  f"{row['nmi']:.3f} ± {row['nmi_sd']:.3f} |", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir")
    ap.add_argument("--k", type=int, nargs="+", default=[91, 7])
    ap.add_argument("--repeats", type=int, default=3, help="seeds per method; mean and spread are reported")
    ap.add_argument("--seeding", action="store_true", help="compare k-means++ seedings instead of k-means")
    ap.add_argument("--json", default=None, help="also write the rows as JSON here")
    args = ap.parse_args()
    run = RunDir(args.run_dir)
    x = np.ascontiguousarray(load_embeddings(run), dtype=np.float32)
    groups = read_column(run, "group")
    truth = np.unique(np.array([g or "" for g in groups]), return_inverse=True)[1]
    print(f"{len(x):,} x {x.shape[1]} embeddings from {run.root}")
    rows = compare_seedings(x, truth, args.k, args.repeats) if args.seeding else compare_methods(x, truth, args)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


def compare_methods(x: np.ndarray, truth: np.ndarray, args: argparse.Namespace) -> list[dict]:
    rows = []
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
    return rows


if __name__ == "__main__":
    main()
