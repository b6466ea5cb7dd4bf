"""Benchmark the embedders: throughput, and how well spherical k-means on each recovers the domains.

On minipile (JSON lines with ``id``, ``text``, ``domain``) every embedder encodes a fixed, seeded,
stratified subset (``--subset`` docs, MiniLM's budget), and the fast ones also the whole file. For each
embedding matrix, faiss spherical k-means with K = number of domains and K = 50 is run with several
seeds and scored against ``domain`` with NMI and purity. Prints a Markdown table; ``--json`` saves rows.

    nice python benchmarks/bench_embed.py --data ../shared/data/minipile.jsonl.gz --json benchmarks/out/embed.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def load_minipile(path: Path) -> tuple[list[str], np.ndarray, list[str]]:
    """Texts, integer domain labels and the domain names of a JSON-lines file."""
    opener: Callable[..., Any] = gzip.open if path.suffix == ".gz" else open
    texts, domains = [], []
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            texts.append(rec["text"])
            domains.append(rec["domain"])
    names = sorted(set(domains))
    return texts, np.array([names.index(d) for d in domains]), names


def stratified_subset(labels: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Sorted indices of ``n`` documents, each domain in proportion to its size but at least 10 docs."""
    rng = np.random.default_rng(seed)
    counts = np.bincount(labels)
    want = np.maximum(np.minimum(counts, 10), np.floor(counts * n / len(labels)).astype(int))
    want[np.argmax(counts)] += n - want.sum()
    picks = [rng.choice(np.flatnonzero(labels == c), size=min(w, counts[c]), replace=False)
             for c, w in enumerate(want)]
    return np.sort(np.concatenate(picks))


def purity(labels: np.ndarray, clusters: np.ndarray) -> float:
    """Share of documents whose cluster's majority domain is their own."""
    table = np.zeros((clusters.max() + 1, labels.max() + 1), dtype=np.int64)
    np.add.at(table, (clusters, labels), 1)
    return float(table.max(axis=1).sum() / len(labels))


def cluster_scores(x: np.ndarray, labels: np.ndarray, k: int, seeds: list[int]) -> tuple[float, float]:
    """Mean NMI and purity of faiss spherical k-means over ``seeds``."""
    import faiss
    from sklearn.metrics import normalized_mutual_info_score

    nmi, pur = [], []
    for seed in seeds:
        km = faiss.Kmeans(x.shape[1], k, niter=20, spherical=True, seed=seed, verbose=False)
        km.train(x)
        assign = km.index.search(x, 1)[1].ravel()
        nmi.append(normalized_mutual_info_score(labels, assign))
        pur.append(purity(labels, assign))
    return float(np.mean(nmi)), float(np.mean(pur))


def run_one(name: str, make: Callable[[], Any], texts: list[str], labels: np.ndarray, n_domains: int,
            seeds: list[int], subset: str) -> dict[str, Any]:
    emb = make()
    t = time.perf_counter()
    emb.encode(texts[:8], progress=False)
    warm = time.perf_counter() - t
    t = time.perf_counter()
    x = emb.encode(texts, progress=False)
    secs = time.perf_counter() - t
    x = np.ascontiguousarray(x.astype(np.float16).astype(np.float32))
    row: dict[str, Any] = {"embedder": name, "subset": subset, "docs": len(texts), "dim": int(x.shape[1]),
                           "load_s": round(warm, 1), "encode_s": round(secs, 1),
                           "docs_per_s": round(len(texts) / secs, 1)}
    for k in (n_domains, 50):
        row[f"nmi_k{k}"], row[f"purity_k{k}"] = cluster_scores(x, labels, k, seeds)
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("../shared/data/minipile.jsonl.gz"))
    ap.add_argument("--subset", type=int, default=2000, help="docs in the subset every embedder encodes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kmeans-seeds", type=int, default=3)
    ap.add_argument("--skip-minilm", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    from clusterclip.embed import HashingEmbedder, MiniLMEmbedder, StaticEmbedder, distill_static_model

    texts, labels, names = load_minipile(args.data)
    sub = stratified_subset(labels, args.subset, args.seed)
    sub_texts, sub_labels = [texts[i] for i in sub], labels[sub]
    seeds = list(range(args.kmeans_seeds))
    k = len(names)

    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        distill_static_model(Path(tmp) / "m", progress=False)
        distil_s = time.perf_counter() - t
    print(json.dumps({"static_distillation_s": round(distil_s, 1)}), flush=True)

    embedders: list[tuple[str, Callable[[], Any], bool]] = [
        ("static", lambda: StaticEmbedder(progress=False), True),
        ("static max_length=256", lambda: StaticEmbedder(max_length=256, progress=False), True),
        ("hashing", lambda: HashingEmbedder(progress=False), True),
        ("minilm", lambda: MiniLMEmbedder(progress=False), False),
    ]
    rows = []
    for name, make, fast in embedders:
        if name == "minilm" and args.skip_minilm:
            continue
        rows.append(run_one(name, make, sub_texts, sub_labels, k, seeds, f"{len(sub)} stratified"))
        if fast:
            rows.append(run_one(name, make, texts, labels, k, seeds, "all"))
    print(f"\n{len(texts)} docs, {k} domains; {platform.processor() or platform.machine()}; "
          f"static distillation {distil_s:.0f} s; k-means seeds {seeds}\n")
    print(f"| embedder | docs | dim | docs/s | NMI K={k} | purity K={k} | NMI K=50 | purity K=50 |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['embedder']} | {r['subset']} | {r['dim']} | {r['docs_per_s']:,.0f} | "
              f"{r[f'nmi_k{k}']:.3f} | {r[f'purity_k{k}']:.3f} | {r['nmi_k50']:.3f} | {r['purity_k50']:.3f} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"distil_s": distil_s, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
