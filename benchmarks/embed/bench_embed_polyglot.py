"""Embedders on corpora unlike English prose: cluster quality, encode speed, collapse of unseen text, confidence.

Compares today's ``lsa`` (a reference copy of its recipe, so the benchmark does not depend on the package
being refactored), plain TF-IDF + SVD (scikit-learn defaults), and variants of the ``subword`` embedder
(``clusterclip.embed.subword.SubwordEmbedder``: ``lsa`` plus hashed character n-grams of every word; the options
of a spec go to its constructor). Candidates are named by a spec: ``lsa``, ``tfidf-svd``, ``subword`` or
``subword:char_weight=0.3,bits=16,ngram=3-5,oov=1,words=32768``.

``quality``: per corpus (JSON lines with ``text`` and ``domain``), every candidate is fitted on one seeded
sample of the corpus (``sample_size`` docs, the whole corpus when smaller, as the embed stage does) and encodes
the whole corpus; faiss spherical k-means (mean of 3 seeds, ``bench_embed.cluster_scores``) is scored with NMI
against ``domain`` on a seeded stratified subset at K = number of domains and K = ``--k`` (``--k2`` per corpus).
``--fit-seeds N`` repeats the fit with seeds ``seed..seed+N-1`` and reports the mean and spread of NMI. Speed: docs/s of
``encode`` over the first ``--rate-docs`` docs, best of 3 passes alternating between the candidates in this
process, and its ratio to ``lsa``; fit seconds. Per-domain medians of the confidence (``coverage``, ``energy``).

    nice python benchmarks/embed/bench_embed_polyglot.py quality --corpora ../shared/data/minipile.jsonl.gz \\
        benchmarks/out/corpora/polyglot.jsonl.gz --candidates lsa tfidf-svd subword --json benchmarks/out/q.json

``collapse``: every candidate is fitted on an English corpus (``--fit``, default minipile) and encodes the docs
of ``--new`` (default polyglot): mean cosine between documents of *different* domains within the non-English
domains, within the code domains, and across English held-out documents for comparison; the share of
documents whose nearest other document is a near-duplicate (cosine >= 0.95, SemDeDup's default eps 0.05); the
drift share (new docs whose best cosine to a K=50 centroid falls below the 5th percentile of the fit corpus'
leave-one-out cosines, as ``clusterclip add``); and the confidence distribution of new vs held-out English docs.

    nice python benchmarks/embed/bench_embed_polyglot.py collapse --candidates lsa subword --json benchmarks/out/c.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_embed import cluster_scores, stratified_subset  # noqa: E402
from bench_embed import load_minipile as load_corpus  # noqa: E402

from clusterclip.embed.base import normalise_rows  # noqa: E402
from clusterclip.embed.subword import SubwordEmbedder  # noqa: E402

# ---------------------------------------------------------------------------------------------------------------
# baselines with the package's interface: fit, encode, encode_with_confidence (vectors, [n, 2] coverage and norm)


class ReferenceLsa:
    """Today's ``lsa`` (``clusterclip.embed.lsa``, recipe 1) with a confidence: fitted vocabulary of at most 32,768
    words (``\\b\\w\\w+\\b``, lowercase, English stop words dropped, min_df 2, max_df 0.5), sublinear TF-IDF rows
    L2-normalised, randomized SVD (5 power iterations) to 256; ``coverage`` is the share of the document's word
    tokens (not stop words) in the vocabulary, ``energy`` the norm of the projection before normalising."""

    name = "lsa"
    PATTERN = r"(?u)\b\w\w+\b"

    def __init__(self, dim: int = 256, seed: int = 0, sample_size: int = 20_000, batch_size: int = 1024) -> None:
        self.dim, self.seed, self.sample_size, self.batch_size = dim, seed, sample_size, batch_size

    def fit(self, texts: Sequence[str]) -> ReferenceLsa:
        from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
        from sklearn.utils.extmath import randomized_svd

        texts = list(texts)
        vec = TfidfVectorizer(lowercase=True, token_pattern=self.PATTERN, stop_words="english",
                              min_df=min(2, len(texts)), max_df=0.5, max_features=32_768, sublinear_tf=True,
                              dtype=np.float32)
        x = vec.fit_transform(texts)
        k = min(self.dim, *x.shape)
        _, _, vt = randomized_svd(x, n_components=k, n_iter=5, random_state=self.seed)
        self.components = np.zeros((self.dim, x.shape[1]), dtype=np.float32)
        self.components[:k] = vt
        self.comps_t = np.ascontiguousarray(self.components.T)
        self.vocabulary = [str(t) for t in vec.get_feature_names_out()]
        self.idf = np.asarray(vec.idf_, dtype=np.float32)
        self.counter = CountVectorizer(lowercase=True, token_pattern=self.PATTERN, dtype=np.float32,
                                       vocabulary={t: i for i, t in enumerate(self.vocabulary)})
        self.all_words = CountVectorizer(lowercase=True, token_pattern=self.PATTERN, stop_words="english",
                                         dtype=np.float32)
        return self

    def _project(self, texts: list[str]) -> np.ndarray:
        from sklearn.preprocessing import normalize

        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            x = self.counter.transform(texts[start:start + self.batch_size]).tocsr()
            np.log(x.data, out=x.data)
            x.data += 1.0
            x.data *= self.idf[x.indices]
            x = normalize(x, copy=False)
            out[start:start + x.shape[0]] = x @ self.comps_t
        return out

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return normalise_rows(self._project(list(texts)))

    def encode_with_confidence(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        texts = list(texts)
        proj = self._project(texts)
        known = np.empty(len(texts), dtype=np.float32)
        total = np.empty(len(texts), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            part = texts[start:start + self.batch_size]
            known[start:start + len(part)] = np.asarray(self.counter.transform(part).sum(axis=1)).ravel()
            try:
                total[start:start + len(part)] = np.asarray(self.all_words.fit_transform(part).sum(axis=1)).ravel()
            except ValueError:
                total[start:start + len(part)] = 0
        coverage = np.where(total > 0, known / np.maximum(total, 1), 0).astype(np.float32)
        return normalise_rows(proj.copy()), np.stack([coverage, np.linalg.norm(proj, axis=1)], axis=1)


class TfidfSvd:
    """scikit-learn defaults: ``TfidfVectorizer()`` (no stop words, raw TF, min_df 1) and ``TruncatedSVD(256)``
    (randomized, 5 iterations), rows normalised; ``energy`` is the projection's norm, ``coverage`` the share of the
    document's ``\\w\\w+`` tokens in the vocabulary."""

    name = "tfidf-svd"

    def __init__(self, dim: int = 256, seed: int = 0, sample_size: int = 20_000) -> None:
        self.dim, self.seed, self.sample_size = dim, seed, sample_size

    def fit(self, texts: Sequence[str]) -> TfidfSvd:
        from sklearn.decomposition import TruncatedSVD
        from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer

        self.vec = TfidfVectorizer(dtype=np.float32)
        x = self.vec.fit_transform(list(texts))
        self.svd = TruncatedSVD(min(self.dim, x.shape[1] - 1), random_state=self.seed).fit(x)
        self.all_words = CountVectorizer(dtype=np.float32)
        return self

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return self.encode_with_confidence(texts, confidence=False)[0]

    def encode_with_confidence(self, texts: Sequence[str], confidence: bool = True
                               ) -> tuple[np.ndarray, np.ndarray]:
        texts = list(texts)
        x = self.vec.transform(texts)
        proj = np.zeros((len(texts), self.dim), dtype=np.float32)
        proj[:, :self.svd.n_components] = self.svd.transform(x)
        energy = np.linalg.norm(proj, axis=1).astype(np.float32)
        coverage = np.zeros(len(texts), dtype=np.float32)
        if confidence:
            known = np.asarray((x > 0).astype(np.float32).sum(axis=1)).ravel()  # distinct known words
            try:
                distinct = np.asarray((self.all_words.fit_transform(texts) > 0).sum(axis=1)).ravel()
            except ValueError:
                distinct = np.zeros(len(texts))
            coverage = np.where(distinct > 0, known / np.maximum(distinct, 1), 0).astype(np.float32)
        return normalise_rows(proj), np.stack([coverage, energy], axis=1)


def make(spec: str, seed: int) -> Any:
    """A candidate from its spec (see the module docstring)."""
    name, _, opts = spec.partition(":")
    if name == "lsa":
        return ReferenceLsa(seed=seed)
    if name == "tfidf-svd":
        return TfidfSvd(seed=seed)
    if name != "subword":
        raise SystemExit(f"unknown candidate {spec!r}")
    kw: dict[str, Any] = {"seed": seed}
    for item in filter(None, opts.split(",")):
        key, _, value = item.partition("=")
        if key == "ngram":
            lo, hi = value.split("-")
            kw["ngram_range"] = (int(lo), int(hi))
        elif key == "oov":
            kw["char_oov_only"] = value == "1"
        elif key == "exact":
            kw["exact_norm"] = value == "1"
        elif key == "dtype":
            kw["component_dtype"] = value
        elif key == "words":
            kw["max_features"] = int(value)
        elif key in ("bits", "n_iter", "dim", "min_df"):
            kw[key] = int(value)
        elif key in ("char_weight", "max_df"):
            kw[key] = float(value)
        else:
            raise SystemExit(f"unknown option {key!r} in {spec!r}")
    return SubwordEmbedder(progress=False, **kw)


def encode3(emb: Any, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectors, coverage and norm before normalising (``energy``) of ``texts``: the columns of the confidence."""
    x, conf = emb.encode_with_confidence(texts)
    return x, conf[:, 0], conf[:, 1]


# ---------------------------------------------------------------------------------------------------------------


def fit_sample(n: int, size: int, seed: int) -> np.ndarray:
    """Sorted indices of the seeded uniform fit sample (the whole corpus when it is smaller), as ``bench_embed``."""
    if n <= size:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False))


def rates(embs: dict[str, Any], texts: list[str], repeats: int = 3) -> dict[str, float]:
    """Best docs/s of ``encode`` over ``texts`` of each embedder, passes alternating between the embedders."""
    for emb in embs.values():
        emb.encode(texts[:64])
    best = dict.fromkeys(embs, 0.0)
    for _ in range(repeats):
        for name, emb in embs.items():
            t = time.perf_counter()
            emb.encode(texts)
            best[name] = max(best[name], len(texts) / (time.perf_counter() - t))
    return best


def quality(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    seeds = list(range(args.kmeans_seeds))
    for path in args.corpora:
        texts, labels, names = load_corpus(path)
        corpus = path.name.split(".")[0]
        pick = fit_sample(len(texts), args.sample_size, args.seed)
        sample = [texts[i] for i in pick]
        if args.score_all or args.subset >= len(texts):
            sub = np.arange(len(texts))
        else:
            sub = stratified_subset(labels, args.subset, args.seed)
        ks = (len(names), dict(kv.split("=") for kv in args.k2).get(corpus, args.k))
        ks = (ks[0], int(ks[1]))
        embs: dict[str, Any] = {}
        for spec in args.candidates:
            emb = make(spec, args.seed)
            t = time.perf_counter()
            emb.fit(sample)
            fit_s = time.perf_counter() - t
            t = time.perf_counter()
            x, coverage, energy = encode3(emb, texts)
            enc_s = time.perf_counter() - t
            x = np.ascontiguousarray(x.astype(np.float16).astype(np.float32))  # as the embed stage stores them
            row: dict[str, Any] = {"corpus": corpus, "candidate": spec, "docs": len(texts), "domains": len(names),
                                   "subset": len(sub), "fit_docs": len(sample), "fit_s": round(fit_s, 1),
                                   "encode_all_s": round(enc_s, 1), "ks": list(ks)}
            if args.no_scores:
                embs[spec] = emb
                rows.append(row)
                continue
            runs = {k: [cluster_scores(x[sub], labels[sub], k, seeds)] for k in ks}
            for extra in range(1, args.fit_seeds):  # other fit seeds: another sample (when the corpus is larger)
                seed = args.seed + extra             # and another SVD start; scores only
                other = make(spec, seed)
                other.fit([texts[i] for i in fit_sample(len(texts), args.sample_size, seed)])
                y = np.ascontiguousarray(other.encode(texts).astype(np.float16).astype(np.float32))
                for k in ks:
                    runs[k].append(cluster_scores(y[sub], labels[sub], k, seeds))
            for k in ks:
                nmis, purities = np.array([r[0] for r in runs[k]]), np.array([r[1] for r in runs[k]])
                row[f"nmi_k{k}"], row[f"purity_k{k}"] = float(nmis.mean()), float(purities.mean())
                row[f"nmi_k{k}_std"], row[f"nmi_k{k}_runs"] = float(nmis.std()), [round(float(v), 4) for v in nmis]
            row["coverage_median"] = {names[c]: round(float(np.median(coverage[labels == c])), 3)
                                      for c in range(len(names))}
            row["energy_median"] = {names[c]: round(float(np.median(energy[labels == c])), 3)
                                    for c in range(len(names))}
            if hasattr(emb, "components_ngrams"):
                row["model_mib"] = round((emb.components_ngrams.nbytes + emb.components_words.nbytes) / 2**20, 1)
            embs[spec] = emb
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if "median" not in k}), flush=True)
        if args.rate_docs:
            if args.rate_random and len(texts) > args.rate_docs:  # a seeded uniform sample, in corpus order
                pick = np.sort(np.random.default_rng(args.seed).choice(len(texts), args.rate_docs, replace=False))
                part = [texts[i] for i in pick]
            else:
                part = texts[:args.rate_docs]
            got = rates(embs, part, args.rate_repeats)
            base = got.get("lsa")
            for row in rows[-len(embs):]:
                row["docs_per_s"] = round(got[row["candidate"]], 1)
                row["speed_vs_lsa"] = round(got[row["candidate"]] / base, 3) if base else None
            print(json.dumps({"corpus": corpus, "rate_docs": len(part), "docs_per_s": got}), flush=True)
    if not args.no_scores:
        print_quality(rows)
    return rows


def print_quality(rows: list[dict[str, Any]]) -> None:
    print("\n| corpus | candidate | NMI K=domains | NMI K2 | docs/s | vs lsa | fit s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        k1, k2 = r["ks"]
        print(f"| {r['corpus']} ({r['docs']:,}, K={k1}/{k2}) | {r['candidate']} | {r[f'nmi_k{k1}']:.3f} | "
              f"{r[f'nmi_k{k2}']:.3f} | {r.get('docs_per_s', 0):,.0f} | {r.get('speed_vs_lsa') or 0:.2f}x | "
              f"{r['fit_s']} |")


# ---------------------------------------------------------------------------------------------------------------
# collapse: fit on English, encode unseen kinds of text


def leave_one_out_cut(x: np.ndarray, k: int, seed: int, percentile: float = 5.0) -> tuple[Any, float]:
    """faiss spherical k-means on ``x`` and the ``percentile`` of the members' leave-one-out cosine to their
    centroid (``clusterclip.add.drift``'s reference)."""
    import faiss

    km = faiss.Kmeans(x.shape[1], k, niter=20, spherical=True, seed=seed, verbose=False)
    km.train(x)
    sims, assign = km.index.search(x, 1)
    own, assign = sims.ravel().astype(np.float64), assign.ravel()
    sums = np.bincount(assign, weights=own, minlength=k)
    total = sums[assign]
    rest = np.sqrt(np.maximum(total * total - 2 * own * total + 1, 0.0))
    loo = np.where(rest > 1e-9, (own * total - 1) / np.where(rest > 1e-9, rest, 1.0), -1.0)
    return km, float(np.percentile(loo, percentile, method="lower"))


def mean_cross_cosine(x: np.ndarray, labels: np.ndarray, max_per: int, seed: int) -> float:
    """Mean cosine over pairs of documents from different domains (at most ``max_per`` docs per domain); with a
    single domain, over all pairs of distinct documents."""
    rng = np.random.default_rng(seed)
    idx = np.concatenate([rng.permutation(np.flatnonzero(labels == c))[:max_per] for c in np.unique(labels)])
    xs, ls = x[idx].astype(np.float64), labels[idx]
    sims = xs @ xs.T
    pairs = ls[:, None] != ls[None, :] if len(np.unique(ls)) > 1 else ~np.eye(len(ls), dtype=bool)
    return float(sims[pairs].mean()) if pairs.any() else math.nan


def near_duplicate_share(x: np.ndarray, eps: float = 0.05) -> float:
    """Share of documents whose most similar other document has cosine >= 1 - eps (SemDeDup's rule)."""
    sims = x @ x.T
    np.fill_diagonal(sims, -1.0)
    return float((sims.max(axis=1) >= 1 - eps).mean())


GEORGIAN = {**{ord("a") + i: 0x10D0 + i for i in range(26)}, **{ord("A") + i: 0x10D0 + i for i in range(26)}}
SYMBOLS = set("-|+/\\_=*#<>^.:'`()[]{}~o@$%&!,;\"")


def cipher(texts: list[str]) -> list[str]:
    """English in a script the fit never saw: Latin letters mapped to Georgian letters (digits, punctuation kept),
    so every word is out of vocabulary while the documents keep their words and topics."""
    return [t.translate(GEORGIAN) for t in texts]


def art_blocks(roots: Sequence[str], limit: int, seed: int) -> list[str]:
    """Symbol-heavy blocks found on this machine (ASCII diagrams, tables, banners): blank-line separated blocks
    of 3+ lines whose non-space characters are >= 60 % symbols, deduplicated, a seeded sample of ``limit``."""
    import re

    seen: dict[str, None] = {}
    for root in roots:
        for path in sorted(Path(root).rglob("*")):
            if not path.is_file() or path.is_symlink() or path.stat().st_size > 2_000_000:
                continue
            try:
                data = path.read_bytes()
                data = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
                text = data.decode("utf-8")
            except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile):
                continue
            for block in re.split(r"\n[ \t]*\n", text):
                lines = [line.rstrip() for line in block.split("\n") if line.strip()]
                chars = [c for c in "".join(lines) if not c.isspace()]
                if len(lines) >= 3 and len(chars) >= 30 and sum(c in SYMBOLS for c in chars) >= 0.6 * len(chars):
                    seen.setdefault("\n".join(lines))
    blocks = list(seen)
    pick = np.random.default_rng(seed).permutation(len(blocks))[:limit]
    return [blocks[i] for i in np.sort(pick)]


def set_metrics(prefix: str, x: np.ndarray, cov: np.ndarray, en: np.ndarray, labels: np.ndarray, best: np.ndarray,
                cut: float, seed: int, min_coverage: float) -> dict[str, Any]:
    """Collapse, near-duplicates, drift and confidence of one set of new documents; ``*_confident``: the same
    with documents under ``min_coverage`` treated as unrepresented (never a near-duplicate, always new)."""
    few = np.random.default_rng(seed).permutation(len(x))[:3000]
    sure = cov[few] >= min_coverage
    confident_dups = near_duplicate_share(x[few][sure]) * sure.mean() if sure.any() else 0.0
    return {f"{prefix}_docs": len(x), f"{prefix}_empty_share": round(float((en == 0).mean()), 4),
            f"{prefix}_cross_cosine": round(mean_cross_cosine(x, labels, 60, seed), 4),
            f"{prefix}_near_dup_share": round(near_duplicate_share(x[few]), 4),
            f"{prefix}_near_dup_share_confident": round(float(confident_dups), 4),
            f"{prefix}_drift_share": round(float((best < cut).mean()), 4),
            f"{prefix}_drift_share_confident": round(float(((best < cut) | (cov < min_coverage)).mean()), 4),
            f"{prefix}_coverage_pct": [round(float(v), 3) for v in np.percentile(cov, [5, 25, 50, 75, 95])],
            f"{prefix}_energy_pct": [round(float(v), 3) for v in np.percentile(en, [5, 25, 50, 75, 95])]}


def collapse(args: argparse.Namespace) -> list[dict[str, Any]]:
    fit_texts, fit_labels, _ = load_corpus(args.fit)
    rng = np.random.default_rng(args.seed)
    order = rng.permutation(len(fit_texts))
    held = np.sort(order[:args.held_out])
    train = np.sort(order[args.held_out:])
    train_texts = [fit_texts[i] for i in train]
    held_texts = [fit_texts[i] for i in held]
    new_texts, new_labels, new_names = load_corpus(args.new)
    groups = {"non-English": [i for i, n in enumerate(new_names) if n.startswith("lang-")],
              "code": [i for i, n in enumerate(new_names) if n.startswith("code-")],
              "other": [i for i, n in enumerate(new_names) if not n.startswith(("lang-", "code-"))]}
    ciphered = cipher(held_texts)
    art = art_blocks(args.art_roots, args.art_docs, args.seed)
    print(json.dumps({"held_out": len(held_texts), "new": len(new_texts), "cipher": len(ciphered), "art": len(art)}),
          flush=True)
    rows = []
    for spec in args.candidates:
        emb = make(spec, args.seed)
        emb.fit([train_texts[i] for i in fit_sample(len(train_texts), args.sample_size, args.seed)])
        x_train = np.ascontiguousarray(emb.encode(train_texts))
        km, cut = leave_one_out_cut(x_train, args.drift_k, args.seed)

        def best_cos(x: np.ndarray, km: Any = km) -> np.ndarray:
            return km.index.search(np.ascontiguousarray(x), 1)[0].ravel()

        row: dict[str, Any] = {"candidate": spec, "fit": args.fit.name, "new": args.new.name,
                               "drift_cut": round(cut, 4), "drift_k": args.drift_k}
        x_held, cov_held, en_held = encode3(emb, held_texts)
        row.update(set_metrics("held_out", x_held, cov_held, en_held, fit_labels[held], best_cos(x_held), cut,
                               args.seed, args.min_coverage))
        x_new, cov_new, en_new = encode3(emb, new_texts)
        best_new = best_cos(x_new)
        for group, members in groups.items():
            sel = np.flatnonzero(np.isin(new_labels, members))
            if len(sel):
                row.update(set_metrics(group, x_new[sel], cov_new[sel], en_new[sel], new_labels[sel], best_new[sel],
                                       cut, args.seed, args.min_coverage))
        x_c, cov_c, en_c = encode3(emb, ciphered)
        row.update(set_metrics("cipher", x_c, cov_c, en_c, fit_labels[held], best_cos(x_c), cut, args.seed,
                               args.min_coverage))
        n_dom = len(np.unique(fit_labels[held]))
        row["cipher_nmi"] = round(cluster_scores(np.ascontiguousarray(x_c), fit_labels[held], n_dom, [0, 1, 2])[0], 4)
        row["held_out_nmi"] = round(cluster_scores(np.ascontiguousarray(x_held), fit_labels[held], n_dom,
                                                   [0, 1, 2])[0], 4)
        if art:
            x_a, cov_a, en_a = encode3(emb, art)
            row.update(set_metrics("art", x_a, cov_a, en_a, np.zeros(len(art), int), best_cos(x_a), cut, args.seed,
                                   args.min_coverage))
        p5 = float(np.percentile(en_held, 5))
        row["energy_held_out_p5"] = round(p5, 4)
        sets = {"held_out": en_held, "cipher": en_c, **({"art": en_a} if art else {})}
        sets.update({g: en_new[np.isin(new_labels, m)] for g, m in groups.items() if m})
        row["energy_below_held_out_p5"] = {k: round(float((v < p5).mean()), 4) for k, v in sets.items()}
        covs = {"held_out": cov_held, "cipher": cov_c, **({"art": cov_a} if art else {})}
        covs.update({g: cov_new[np.isin(new_labels, m)] for g, m in groups.items() if m})
        for thr in args.thresholds:
            row[f"coverage_below_{thr}"] = {k: round(float((v < thr).mean()), 4) for k, v in covs.items()}
        row["per_domain"] = {new_names[c]: {"coverage": round(float(np.median(cov_new[new_labels == c])), 3),
                                            "energy": round(float(np.median(en_new[new_labels == c])), 3),
                                            "drift": round(float((best_new[new_labels == c] < cut).mean()), 3)}
                             for c in range(len(new_names))}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("quality", "collapse"))
    ap.add_argument("--candidates", nargs="+", default=["lsa", "tfidf-svd", "subword"])
    ap.add_argument("--corpora", type=Path, nargs="+", default=[Path("../shared/data/minipile.jsonl.gz")])
    ap.add_argument("--subset", type=int, default=2000, help="docs scored per corpus (stratified, seeded)")
    ap.add_argument("--score-all", action="store_true", help="score every document instead of a subset")
    ap.add_argument("--k", type=int, default=50, help="the second K (the first: number of domains)")
    ap.add_argument("--k2", nargs="*", default=["minipile-1k=32", "debdocs=30", "glossaries=30", "stdlib=30"],
                    help="per-corpus second K as name=K (name: file name before the first dot)")
    ap.add_argument("--sample-size", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kmeans-seeds", type=int, default=3)
    ap.add_argument("--rate-docs", type=int, default=4000, help="docs timed per corpus (0: no timing)")
    ap.add_argument("--rate-repeats", type=int, default=3, help="alternating timed passes (the best counts)")
    ap.add_argument("--rate-random", action="store_true", help="time a seeded uniform sample of --rate-docs docs "
                    "instead of the first ones (polyglot is stored domain by domain)")
    ap.add_argument("--no-scores", action="store_true", help="quality: skip the clustering (speed and fit only)")
    ap.add_argument("--fit-seeds", type=int, default=1, help="fits per candidate (seeds seed, seed+1, ...): NMI is "
                    "their mean, with the standard deviation across fits")
    ap.add_argument("--fit", type=Path, default=Path("../shared/data/minipile.jsonl.gz"))
    ap.add_argument("--new", type=Path, default=Path("benchmarks/out/corpora/polyglot.jsonl.gz"))
    ap.add_argument("--held-out", type=int, default=2000)
    ap.add_argument("--drift-k", type=int, default=50)
    ap.add_argument("--thresholds", type=float, nargs="+", default=[0.3, 0.5])
    ap.add_argument("--art-roots", nargs="*", default=["/usr/share/doc", "/usr/include"],
                    help="collapse: folders searched for symbol-heavy blocks (ASCII art, tables)")
    ap.add_argument("--art-docs", type=int, default=500)
    ap.add_argument("--min-coverage", type=float, default=0.5, help="collapse: the confidence gate of the "
                    "*_confident metrics (documents below it count as new and never as near-duplicates)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    rows = quality(args) if args.mode == "quality" else collapse(args)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"argv": sys.argv, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
