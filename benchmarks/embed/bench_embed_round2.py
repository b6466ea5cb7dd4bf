"""Choosing the default embedder again (issue 47): NMI against ``domain`` at K = domains and K = 4 x domains, with
encode speed and fit time beside it, for package embedders and two anchors, on any number of corpora.

Candidates are named by a spec: a registered embedder with constructor options (``lsa``, ``subword``,
``subword:bits=15,n_iter=2``; values are Python literals), or an anchor:

* ``char-svd`` -- character 3-5-grams within white-space separated tokens (scikit-learn's ``char_wb``,
  lowercase), sublinear TF-IDF (``min_df`` 2), randomized SVD to 256 (5 power iterations): the "char 3-5-gram
  TF-IDF + SVD(256)" of the issue, independent of this package's code.
* ``word-svd`` -- scikit-learn defaults, ``TfidfVectorizer()`` and a randomized SVD to 256.

Per corpus every candidate is fitted on a seeded uniform sample of the corpus (a package embedder: its own
``sample_size``, as the embed stage draws it; an anchor: ``--anchor-sample`` documents, since scikit-learn's
character analyzer is Python per n-gram) and encodes a seeded stratified subset of ``--subset`` documents
(``bench_embed.stratified_subset``: every domain at least 10), which faiss spherical k-means (3 seeds) clusters at
both K; NMI is the mean over seeds. Speed: ``encode`` docs/s over ``--rate-docs`` seeded documents, best of
``--rate-repeats`` passes alternating between the candidates in this process (warmed up first), and its ratio to
the first candidate (``--baseline``, default ``lsa``); fit seconds (the fit also in the same process, one after the
other, so the ratios hold on a shared machine only roughly).

    nice python benchmarks/embed/bench_embed_round2.py --corpora benchmarks/out/corpora/codezoo.jsonl.gz \\
        --candidates lsa subword char-svd --json benchmarks/out/round2-codezoo.json
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_embed import cluster_scores, load_minipile, stratified_subset  # noqa: E402
from bench_embed_polyglot import TfidfSvd, fit_sample, rates  # noqa: E402

from clusterclip.embed.base import normalise_rows  # noqa: E402
from clusterclip.embed.registry import get_embedder  # noqa: E402


class CharSvd:
    """The anchor: scikit-learn ``TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True,
    min_df=2)`` and a randomized SVD to ``dim`` (5 power iterations), projections L2-normalised."""

    name = "char-svd"

    def __init__(self, dim: int = 256, seed: int = 0, sample_size: int = 6000, sublinear_tf: bool = True,
                 max_features: int | None = None) -> None:
        self.dim, self.seed, self.sample_size = dim, seed, sample_size
        self.sublinear_tf, self.max_features = sublinear_tf, max_features

    def fit(self, texts: Sequence[str]) -> CharSvd:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.utils.extmath import randomized_svd

        texts = list(texts)
        self.vec = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=self.sublinear_tf,
                                   min_df=min(2, len(texts)), max_features=self.max_features, dtype=np.float32)
        x = self.vec.fit_transform(texts)
        k = min(self.dim, *x.shape)
        _, _, vt = randomized_svd(x, n_components=k, n_iter=5, random_state=self.seed)
        self.comps_t = np.zeros((x.shape[1], self.dim), dtype=np.float32)
        self.comps_t[:, :k] = vt.T
        return self

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return normalise_rows(np.asarray(self.vec.transform(list(texts)) @ self.comps_t, dtype=np.float32))


def make(spec: str, seed: int, anchor_sample: int) -> Any:
    """A candidate from its spec (see the module docstring)."""
    name, _, opts = spec.partition(":")
    kw = {}
    for item in filter(None, opts.split(",")):
        key, _, value = item.partition("=")
        kw[key] = ast.literal_eval(value)
    if name == "char-svd":
        return CharSvd(seed=seed, sample_size=anchor_sample, **kw)
    if name == "word-svd":
        return TfidfSvd(seed=seed, sample_size=anchor_sample)
    return get_embedder(name, seed=seed, progress=False, **kw)


def corpus_rows(path: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """One row per candidate on one corpus (scores, fit seconds, speed)."""
    texts, labels, names = load_minipile(path)
    corpus = path.name.split(".")[0]
    sub = stratified_subset(labels, min(args.subset, len(texts)), args.seed)
    sub_texts = [texts[i] for i in sub]
    ks = (len(names), args.k_factor * len(names))
    rows, embs = [], {}
    for spec in args.candidates:
        scores: dict[int, list[float]] = {k: [] for k in ks}
        fit_s = 0.0
        for seed in range(args.seed, args.seed + args.fit_seeds):
            emb = make(spec, seed, args.anchor_sample)
            pick = fit_sample(len(texts), emb.sample_size, seed)
            t = time.perf_counter()
            emb.fit([texts[i] for i in pick])
            fit_s = time.perf_counter() - t if seed == args.seed else fit_s
            x = np.ascontiguousarray(emb.encode(sub_texts).astype(np.float16).astype(np.float32))
            for k in ks:
                scores[k].extend(cluster_scores(x, labels[sub], k, [s])[0] for s in range(args.kmeans_seeds))
            if seed == args.seed:
                embs[spec] = emb
        row: dict[str, Any] = {"corpus": corpus, "candidate": spec, "docs": len(texts), "domains": len(names),
                               "subset": len(sub), "fit_docs": len(pick), "fit_s": round(fit_s, 1), "ks": list(ks)}
        for k in ks:
            row[f"nmi_k{k}"] = float(np.mean(scores[k]))
            row[f"nmi_k{k}_spread"] = round(float(np.max(scores[k]) - np.min(scores[k])), 4)
            row[f"nmi_k{k}_runs"] = [round(v, 4) for v in scores[k]]
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.rate_docs:
        pick = np.sort(np.random.default_rng(args.seed).choice(len(texts), min(args.rate_docs, len(texts)),
                                                               replace=False))
        timed = {s: e for s, e in embs.items() if not s.startswith(("char-svd", "word-svd"))}
        got = rates(timed, [texts[i] for i in pick], args.rate_repeats)
        base = got.get(args.baseline)
        for row in rows:
            if row["candidate"] in got:
                row["docs_per_s"] = round(got[row["candidate"]], 1)
                row["speed_vs_baseline"] = round(got[row["candidate"]] / base, 3) if base else None
        print(json.dumps({"corpus": corpus, "rate_docs": len(pick), "docs_per_s": got}), flush=True)
    return rows


def print_table(rows: list[dict[str, Any]], baseline: str) -> None:
    print(f"\n| corpus (docs, K) | candidate | NMI K=domains | NMI K=4x | docs/s | vs {baseline} | fit s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        k1, k2 = r["ks"]
        speed = f"{r['docs_per_s']:,.0f} | {r['speed_vs_baseline']:.2f}x" if "docs_per_s" in r else "- | -"
        print(f"| {r['corpus']} ({r['docs']:,}, K={k1}/{k2}) | {r['candidate']} | {r[f'nmi_k{k1}']:.3f} | "
              f"{r[f'nmi_k{k2}']:.3f} | {speed} | {r['fit_s']} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpora", type=Path, nargs="+", required=True)
    ap.add_argument("--candidates", nargs="+", default=["lsa", "subword", "char-svd"])
    ap.add_argument("--baseline", default="lsa", help="the candidate speeds are compared with")
    ap.add_argument("--subset", type=int, default=3000, help="documents scored per corpus (stratified, seeded)")
    ap.add_argument("--k-factor", type=int, default=4, help="the second K is this times the number of domains")
    ap.add_argument("--anchor-sample", type=int, default=6000, help="fit sample of the anchors")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fit-seeds", type=int, default=1, help="fits per candidate (seeds seed, seed+1, ...)")
    ap.add_argument("--kmeans-seeds", type=int, default=3)
    ap.add_argument("--rate-docs", type=int, default=3000, help="documents timed per corpus (0: no timing)")
    ap.add_argument("--rate-repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    rows = [row for path in args.corpora for row in corpus_rows(path, args)]
    print_table(rows, args.baseline)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"argv": sys.argv, "date": time.strftime("%Y-%m-%d"), "rows": rows},
                                        indent=1) + "\n")


if __name__ == "__main__":
    main()
