"""Benchmark the embedders: throughput, and how well spherical k-means on each recovers the domains.

On minipile (JSON lines with ``id``, ``text``, ``domain``) every embedder encodes a fixed, seeded,
stratified subset (``--subset`` docs, MiniLM's budget), and the fast ones also the whole file. For each
embedding matrix, faiss spherical k-means with K = number of domains and K = 50 is run with several
seeds and scored against ``domain`` with NMI and purity. Prints a Markdown table; ``--json`` saves rows.

    nice python benchmarks/embed/bench_embed.py --data ../shared/data/minipile.jsonl.gz --json benchmarks/out/embed.json

``--corpora A B ...`` instead compares every embedder (and ``lsa+static``) per corpus on one seeded subset,
with docs/s on the whole corpus and, for the ``--e2e`` embedders, the time of ``clusterclip run``:

    nice python benchmarks/embed/bench_embed.py --corpora ../shared/data/minipile.jsonl.gz \\
        benchmarks/out/corpora/debdocs.jsonl.gz benchmarks/out/corpora/glossaries.jsonl.gz \\
        --subset 1500 --e2e lsa static --json benchmarks/out/embed-corpora.json

``--rate static static-vocab lsa`` only measures encode docs/s (best of 3 alternating passes over 8,000
documents per corpus, after the fits). ``--only static-vocab lsa static`` limits the table to some
embedders (``static-vocab`` distils MiniLM with each corpus' vocabulary once, then reuses the cached model).
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


def _scores(x: np.ndarray, labels: np.ndarray, ks: tuple[int, int], seeds: list[int]) -> dict[str, float]:
    row: dict[str, float] = {}
    for k in ks:
        row[f"nmi_k{k}"], row[f"purity_k{k}"] = cluster_scores(x, labels, k, seeds)
    return row


def _timed(emb: Any, texts: list[str]) -> tuple[np.ndarray, float]:
    emb.encode(texts[:8], progress=False)
    t = time.perf_counter()
    x = emb.encode(texts, progress=False)
    return np.ascontiguousarray(x.astype(np.float16).astype(np.float32)), len(texts) / (time.perf_counter() - t)


ALL_CORPUS_EMBEDDERS = ("lsa", "static", "hashing", "minilm", "static-vocab", "lsa+static", "lsa+static-vocab")


def corpus_rows(path: Path, subset: int, seed: int, seeds: list[int], skip_minilm: bool,
                k2: int = 30, only: list[str] | None = None) -> list[dict[str, Any]]:
    """Every embedder (or those in ``only``) on one corpus: NMI and purity at K = number of domains and
    K = ``k2`` on a seeded stratified subset (the same documents for all), docs/s on the whole corpus
    (MiniLM: on the subset). ``lsa`` and ``static-vocab`` are fitted on one seeded sample of the whole
    corpus, as the embed stage does (``fit_s``: for ``static-vocab`` the distillation, or the cache lookup
    when its vocabulary was distilled before); ``a+b`` concatenates the two unit vectors (weights 1:1) and
    is L2-normalised again."""
    from clusterclip.embed.hashing import HashingEmbedder
    from clusterclip.embed.lsa import LsaEmbedder
    from clusterclip.embed.minilm import MiniLMEmbedder
    from clusterclip.embed.static import StaticEmbedder
    from clusterclip.embed.static_vocab import StaticVocabEmbedder

    wanted = [e for e in (only or ALL_CORPUS_EMBEDDERS) if not (e == "minilm" and skip_minilm)]
    texts, labels, names = load_minipile(path)
    sub = stratified_subset(labels, min(subset, len(texts)), seed)
    sub_texts, sub_labels = [texts[i] for i in sub], labels[sub]
    ks = (len(names), k2)
    rng = np.random.default_rng(seed)
    lsa = LsaEmbedder(seed=seed, progress=False)
    sample = rng.choice(len(texts), size=min(lsa.sample_size, len(texts)), replace=False)
    sample_texts = [texts[i] for i in np.sort(sample)]
    fitted: dict[str, Any] = {"lsa": lsa, "static-vocab": StaticVocabEmbedder(seed=seed, progress=False)}
    makers: dict[str, Callable[[], Any]] = {"lsa": lambda: lsa, "static": lambda: StaticEmbedder(progress=False),
                                            "hashing": lambda: HashingEmbedder(progress=False),
                                            "static-vocab": lambda: fitted["static-vocab"]}
    vecs: dict[str, np.ndarray] = {}
    rows = []
    for name in (e for e in wanted if e in makers):
        extra: dict[str, Any] = {}
        if name in fitted:
            t = time.perf_counter()
            fitted[name].fit(sample_texts)
            extra["fit_s"] = time.perf_counter() - t
            if name == "static-vocab":
                extra.update(words=len(fitted[name].words), model=fitted[name].model_name)
        x_all, rate = _timed(makers[name](), texts)
        vecs[name] = x_all[sub]
        rows.append({"embedder": name, "docs_per_s": rate, **extra})
    if "minilm" in wanted:
        vecs["minilm"], rate = _timed(MiniLMEmbedder(progress=False), sub_texts)
        rows.append({"embedder": "minilm", "docs_per_s": rate})
    rate_of = {r["embedder"]: r["docs_per_s"] for r in rows}
    for combo in (e for e in wanted if "+" in e):
        a, b = combo.split("+")
        if a in vecs and b in vecs:
            both = np.hstack([vecs[a], vecs[b]])
            vecs[combo] = both / np.linalg.norm(both, axis=1, keepdims=True)
            rows.append({"embedder": combo, "docs_per_s": 1 / (1 / rate_of[a] + 1 / rate_of[b])})
    for row in rows:
        row.update(corpus=path.name.split(".")[0], docs=len(texts), subset=len(sub), ks=list(ks),
                   **_scores(vecs[row["embedder"]], sub_labels, ks, seeds))
        print(json.dumps(row), flush=True)
    return rows


def end_to_end(path: Path, embedder: str) -> float:
    """Seconds of ``clusterclip run`` on the whole corpus into a fresh run directory (default options)."""
    import subprocess
    import sys

    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "clusterclip", "run", str(path), "--out", f"{tmp}/run",
                        "--embedder", embedder, "-q"], check=True, stdout=subprocess.DEVNULL)
        return time.perf_counter() - t


def encode_rates(paths: list[Path], names: list[str], docs: int, repeats: int, seed: int) -> None:
    """``--rate``: encode docs/s alone (models fitted or distilled first), best of ``repeats`` alternating
    passes over the first ``docs`` documents of each corpus, so the embedders share the machine's load."""
    from clusterclip.embed.registry import get_embedder

    print("| corpus | docs | " + " | ".join(f"{n} docs/s" for n in names) + " |")
    print("|---|---|" + "---|" * len(names))
    for path in paths:
        texts, _, _ = load_minipile(path)
        embs = {n: get_embedder(n, seed=seed, progress=False) for n in names}
        for emb in embs.values():
            if hasattr(emb, "fit"):
                size = min(emb.sample_size, len(texts))
                pick = np.sort(np.random.default_rng(seed).choice(len(texts), size=size, replace=False))
                emb.fit([texts[i] for i in pick])
        part = texts[:docs]
        best = dict.fromkeys(names, 0.0)
        for emb in embs.values():
            emb.encode(part[:64], progress=False)
        for _ in range(repeats):
            for n, emb in embs.items():
                t = time.perf_counter()
                emb.encode(part, progress=False)
                best[n] = max(best[n], len(part) / (time.perf_counter() - t))
        print(f"| {path.name.split('.')[0]} | {len(part):,} | " + " | ".join(f"{best[n]:,.0f}" for n in names) + " |",
              flush=True)


def multi_corpus(args: argparse.Namespace) -> None:
    """``--corpora``: the per-corpus table (and ``--e2e`` embedders through ``clusterclip run``)."""
    seeds = list(range(args.kmeans_seeds))
    rows = [r for path in args.corpora
            for r in corpus_rows(path, args.subset, args.seed, seeds, args.skip_minilm, args.k, args.only)]
    e2e = {(p.name.split(".")[0], e): end_to_end(p, e) for p in args.corpora for e in args.e2e}
    print(f"\nk-means seeds {seeds}; subset {args.subset} stratified docs per corpus (seed {args.seed})\n")
    print(f"| corpus | embedder | docs/s | NMI K=domains | purity K=domains | NMI K={args.k} | purity K={args.k} "
          "| `run` s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        k = r["ks"][0]
        run_s = e2e.get((r["corpus"], r["embedder"]))
        scores = " | ".join(f"{r[f'{m}_k{kk}']:.3f}" for kk in (k, args.k) for m in ("nmi", "purity"))
        print(f"| {r['corpus']} ({r['docs']:,} docs, K={k}) | {r['embedder']} | {r['docs_per_s']:,.0f} | {scores} | "
              f"{f'{run_s:.0f}' if run_s else ''} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"rows": rows, "e2e": [[c, e, s] for (c, e), s in e2e.items()]},
                                        indent=2) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("../shared/data/minipile.jsonl.gz"))
    ap.add_argument("--subset", type=int, default=2000, help="docs in the subset every embedder encodes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kmeans-seeds", type=int, default=3)
    ap.add_argument("--skip-minilm", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--corpora", type=Path, nargs="+", help="the multi-corpus table instead (JSON lines with "
                    "`domain`; see benchmarks/corpora/build_corpora.py)")
    ap.add_argument("--k", type=int, default=30, help="with --corpora: the second K (the first: number of domains)")
    ap.add_argument("--e2e", nargs="*", default=[], help="with --corpora: embedders timed through `clusterclip run`")
    ap.add_argument("--only", nargs="+", choices=ALL_CORPUS_EMBEDDERS, default=None,
                    help="with --corpora: only these embedders (default: all)")
    ap.add_argument("--rate", nargs="+", default=None, help="with --corpora: only measure the encode docs/s of "
                    "these embedders (best of --rate-repeats alternating passes), no clustering")
    ap.add_argument("--rate-docs", type=int, default=8000)
    ap.add_argument("--rate-repeats", type=int, default=3)
    args = ap.parse_args()
    if args.corpora and args.rate:
        encode_rates(args.corpora, args.rate, args.rate_docs, args.rate_repeats, args.seed)
        return
    if args.corpora:
        multi_corpus(args)
        return

    from clusterclip.embed.distill import distill_static_model
    from clusterclip.embed.hashing import HashingEmbedder
    from clusterclip.embed.minilm import MiniLMEmbedder
    from clusterclip.embed.static import StaticEmbedder

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
