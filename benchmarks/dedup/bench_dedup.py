"""Near-duplicate detection and repetition of content under the plan's cap, on corpora with injected copies.

    .venv/bin/python benchmarks/dedup/bench_dedup.py --base 2000 --semhash-python /tmp/semhash-venv/bin/python

For each corpus, ``--copy-frac`` of the documents get 2..20 near-copies each (one or two edits per copy: up to
five swapped adjacent word pairs, truncation to 70-95 % of the words, or a boilerplate line added before or
after). The truth groups are a source with its copies. Detectors, scored by pairwise precision/recall/F1
(a pair of documents is positive when they are in one group; natural duplicates of the corpus count as false
positives) and throughput (documents/s of the detection itself; embedding time is listed apart):

* clusterclip semantic (SemDeDup inside the k-means clusters, stored pairwise work, eps),
* clusterclip lexical (rensa MinHash, NumPy LSH inside the clusters), and both (the ``dedup`` stage);
* a plain global MinHash LSH (datasketch ``MinHash`` + ``MinHashLSH``, word 3-shingles, Jaccard 0.7);
* SemHash ``self_deduplicate`` with the same static model2vec model (distilled offline by
  ``clusterclip.embed.distill``), run in its own virtualenv (``--semhash-python``); time includes encoding.

Then plans of one epoch (budget N, max_repeat 4) under ``--duplicates none|drop|group-cap`` with the
detected groups: the most draws any injected content (a truth group) gets, and how many exceed the cap.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import tempfile
import time
from itertools import islice
from pathlib import Path

import numpy as np

from clusterclip.cli.main import main as cli
from clusterclip.dedup.groups import derive_groups
from clusterclip.dedup.lexical import lsh_pairs, signatures
from clusterclip.dedup.semantic import earlier_neighbours
from clusterclip.dedup.stage import fetch_rows
from clusterclip.plan import PlanConfig
from clusterclip.plan.duplicates import build_grouped_plan
from clusterclip.store import RunDir, load_npy

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
BOILERPLATE = ("Share this article on Facebook, Twitter and LinkedIn.", "Copyright 2020. All rights reserved.",
               "Click here to subscribe to our newsletter for weekly updates.", "Advertisement",
               "This post may contain affiliate links; we may earn a commission.")
SEMHASH = """
import json, sys, time
from model2vec import StaticModel
from semhash import SemHash
texts = [json.loads(line)["text"] for line in open(sys.argv[1])]
model = StaticModel.from_pretrained(sys.argv[2])
out = {}
for thr in map(float, sys.argv[3].split(",")):
    t0 = time.perf_counter()
    records = [{"i": str(i), "text": t} for i, t in enumerate(texts)]
    res = SemHash.from_records(records=records, columns=["text"], model=model).self_deduplicate(threshold=thr)
    edges = []
    for d in res.filtered:
        dups = d.duplicate_of if isinstance(d.duplicate_of, list) else [d.duplicate_of]
        for o in dups:
            o = o[0] if isinstance(o, (tuple, list)) else o
            edges.append([int(d.record["i"]), int(o["i"])])
    out[str(thr)] = {"seconds": time.perf_counter() - t0, "edges": edges}
print(json.dumps(out))
"""


def read_texts(path: Path, limit: int) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in islice(f, limit)]


def edit(text: str, rng: np.random.Generator) -> str:
    """One or two small edits: word swaps, truncation, boilerplate."""
    words = text.split()
    for kind in rng.choice(3, size=rng.integers(1, 3), replace=False):
        if kind == 0 and len(words) > 2:
            for i in rng.integers(0, len(words) - 1, rng.integers(1, 6)):
                words[i], words[i + 1] = words[i + 1], words[i]
        elif kind == 1 and len(words) > 4:
            words = words[:max(2, int(len(words) * rng.uniform(0.7, 0.95)))]
        else:
            line = BOILERPLATE[rng.integers(len(BOILERPLATE))].split()
            words = line + words if rng.random() < 0.5 else words + line
    return " ".join(words)


def inject(texts: list[str], frac: float, seed: int) -> tuple[list[str], np.ndarray]:
    """Corpus with copies appended, shuffled, and the truth group of every document (copies of source ``s`` and
    ``s`` itself are group ``s``; a document is an injected copy when its position in the input is >= n)."""
    rng = np.random.default_rng(seed)
    n = len(texts)
    sources = rng.choice(n, int(frac * n), replace=False)
    out, truth = list(texts), list(range(n))
    for s in sources.tolist():
        for _ in range(int(rng.integers(2, 21))):
            out.append(edit(texts[s], rng))
            truth.append(s)
    perm = rng.permutation(len(out))
    return [out[i] for i in perm], np.stack([np.asarray(truth)[perm], perm >= n])


def pair_scores(pred: np.ndarray, truth: np.ndarray) -> tuple[float, float, float, float]:
    """Pairwise precision, recall, F1 of a grouping against the truth (``[group, is_copy]``), and the precision
    over the pairs that hold an injected copy (pairs of two original documents are left out: they are the
    corpus's own duplicates, or false positives; this benchmark cannot tell which)."""
    def pairs(*keys: np.ndarray) -> int:
        _, counts = np.unique(np.stack(keys, axis=1), axis=0, return_counts=True)
        return int((counts * (counts - 1) // 2).sum())

    group, copy = truth[0], truth[1].astype(bool)
    tp, pp, tt = pairs(pred, group), pairs(pred), pairs(group)
    p, r = tp / pp if pp else 1.0, tp / tt if tt else 1.0
    with_copy = pp - pairs(pred[~copy])
    multi = np.bincount(pred[~copy], minlength=pred.max() + 1)[pred] >= 2  # in a group with 2+ originals
    wrong_multi = pairs(pred[multi]) - pairs(pred[multi], group[multi])
    return (p, r, 2 * p * r / (p + r) if p + r else 0.0, tp / with_copy if with_copy else 1.0,
            wrong_multi / (pp - tp) if pp > tp else 0.0)


def components(n: int, edges: list[list[int]] | np.ndarray) -> np.ndarray:
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    e = np.asarray(edges, np.int64).reshape(-1, 2)
    return connected_components(coo_matrix((np.ones(len(e)), (e[:, 0], e[:, 1])), shape=(n, n)), directed=False)[1]


def datasketch_groups(texts: list[str], threshold: float = 0.7, num_perm: int = 128) -> tuple[np.ndarray, float]:
    """The plain baseline: global datasketch MinHash LSH over word 3-shingles, groups by union."""
    from datasketch import MinHash, MinHashLSH

    t0 = time.perf_counter()
    lsh, sigs = MinHashLSH(threshold=threshold, num_perm=num_perm), []
    for i, t in enumerate(texts):
        w = re.findall(r"\w+", t.lower())
        m = MinHash(num_perm=num_perm)
        m.update_batch([" ".join(w[j:j + 3]).encode() for j in range(max(1, len(w) - 2))])
        lsh.insert(i, m)
        sigs.append(m)
    edges = [[i, j] for i, m in enumerate(sigs) for j in lsh.query(m) if j != i]
    return components(len(texts), edges), time.perf_counter() - t0


def semhash_groups(python: str, corpus: Path, n: int, thresholds: list[float]) -> dict[float, tuple[np.ndarray, float]]:
    """SemHash in its own interpreter, with the static model clusterclip distilled (offline)."""
    from clusterclip.embed.distill import static_cache_dir

    res = subprocess.run([python, "-c", SEMHASH, str(corpus), str(static_cache_dir()), ",".join(map(str, thresholds))],
                         capture_output=True, text=True, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    if res.returncode:
        raise SystemExit(f"semhash failed: {res.stderr[-2000:]}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    return {t: (components(n, out[str(t)]["edges"]), out[str(t)]["seconds"]) for t in thresholds}


def run_corpus(name: str, texts: list[str], args: argparse.Namespace, work: Path) -> tuple[list[list], list[list]]:
    """Detector rows and plan rows for one corpus."""
    texts, truth = inject(texts, args.copy_frac, args.seed)
    n = len(texts)
    corpus = work / f"{name}.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"doc{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    t0 = time.perf_counter()
    cli(["embed", str(corpus), "--out", str(work / name), "--embedder", args.embedder, "--id-field", "id", "-q"])
    t_embed = time.perf_counter() - t0
    cli(["cluster", str(work / name), "-q"])
    run = RunDir(work / name)
    labels, tokens = load_npy(run.path("labels.npy")), load_npy(run.path("tokens.npy"))
    t0 = time.perf_counter()
    nb, sim = earlier_neighbours(labels, tokens, lambda rows: fetch_rows(run, rows))
    t_sem = time.perf_counter() - t0
    import pyarrow as pa

    t0 = time.perf_counter()
    sig = signatures([pa.array(texts[a:a + 2048]) for a in range(0, n, 2048)], n, 128, 3, 0)
    pairs, jac = lsh_pairs(sig, 16, labels)
    t_lex = time.perf_counter() - t0
    rows, found = [], {}
    for label, eps, jt, secs in (("clusterclip semantic eps=0.05", 0.05, 2.0, t_sem),
                                 ("clusterclip semantic eps=0.10", 0.10, 2.0, t_sem),
                                 ("clusterclip lexical J>=0.7", -1.0, 0.7, t_lex),
                                 ("clusterclip both (dedup stage defaults)", 0.05, 0.7, t_sem + t_lex)):
        t0 = time.perf_counter()
        g = derive_groups(nb, sim, pairs, jac, tokens, eps, jt)
        found[label] = g
        rows.append([name, n, label, *pair_scores(g.group, truth), n / (secs + time.perf_counter() - t0)])
    base, secs = datasketch_groups(texts)
    rows.append([name, n, "datasketch MinHash LSH (global, J 0.7)", *pair_scores(base, truth), n / secs])
    if args.semhash_python:
        for thr, (g, secs) in semhash_groups(args.semhash_python, corpus, n, [0.95, 0.9]).items():
            rows.append([name, n, f"SemHash threshold {thr} (incl. encoding)", *pair_scores(g, truth), n / secs])
    rows.append([name, n, f"(embedding, {args.embedder}, not in the rows above)", None, None, None, None, None,
                 n / t_embed])
    return rows, plan_rows(name, labels, truth, found["clusterclip both (dedup stage defaults)"], n)


def plan_rows(name: str, labels: np.ndarray, truth: np.ndarray, g, n: int) -> list[list]:
    """Most draws of any injected content in a one-epoch plan (max_repeat 4) under each duplicates mode."""
    out = []
    for mode in ("none", "drop", "group-cap"):
        plan = build_grouped_plan(labels, PlanConfig(max_repeat=4, budget=n, duplicates=mode), g.group, g.kept)
        seen = np.bincount(truth[0][np.asarray(plan.order)], minlength=truth[0].max() + 1)
        out.append([name, mode, int(seen.max()), int((seen > 4).sum()), int((np.bincount(truth[0]) > 1).sum()),
                    plan.stats["unique_docs"]])
    return out


def table(rows: list[list], plans: list[list], command: str) -> str:
    fmt = lambda x: "–" if x is None else f"{x:.3f}" if isinstance(x, float) and x < 10 else f"{x:,.0f}"  # noqa: E731
    lines = ["## Near-duplicates (`clusterclip dedup`, `--duplicates drop|group-cap`)", "", "```", command, "```", "",
             "| corpus | docs | detector | precision | recall | F1 | precision, pairs with a copy "
             "| wrong pairs in groups with 2+ originals | docs/s |", "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r[0]} | {r[1]:,} | {r[2]} | " + " | ".join(fmt(x) for x in r[3:]) + " |" for r in rows]
    lines += ["", "Most draws of one injected content (a source and its copies) in a one-epoch plan (budget N, "
              "clusterclip, max_repeat 4), groups from the dedup stage's defaults:", "",
              "| corpus | --duplicates | most draws of one content | contents drawn > 4 times | injected contents "
              "| unique documents drawn |", "|---|---|---|---|---|---|"]
    lines += [f"| {p[0]} | {p[1]} | {p[2]} | {p[3]} | {p[4]} | {p[5]:,} |" for p in plans]
    return "\n".join(lines) + "\n"


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=int, default=2000, help="documents read from minipile.jsonl.gz")
    ap.add_argument("--copy-frac", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--embedder", default="static")
    ap.add_argument("--semhash-python", default=None, help="python of a virtualenv with semhash installed")
    ap.add_argument("--corpora", default="minipile,minipile-1k",
                    help="comma-separated: minipile (the first --base documents), minipile-1k, stdlib (the "
                         "docstrings of the Python standard library: clusterclip's default corpus, not minipile)")
    ap.add_argument("--write", action="store_true", help="append the table to benchmarks/RESULTS.md")
    return ap.parse_args()


def stdlib_texts() -> list[str]:
    """The default corpus of ``clusterclip run``: docstrings of the installed Python standard library."""
    from clusterclip.corpus.default_corpus import stdlib_documents

    return [t for batch in stdlib_documents() for t in batch.texts]


def run_all() -> None:
    args = parse()
    readers = {"minipile": (f"minipile {args.base}", lambda: read_texts(DATA / "minipile.jsonl.gz", args.base)),
               "minipile-1k": ("minipile-1k", lambda: read_texts(DATA / "minipile-1k.jsonl", 10**9)),
               "stdlib": ("stdlib-docstrings", stdlib_texts)}
    corpora = {readers[c][0]: readers[c][1]() for c in args.corpora.split(",")}
    rows, plans = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name, texts in corpora.items():
            r, p = run_corpus(name.replace(" ", "-"), texts, args, Path(tmp))
            rows += r
            plans += p
    import sys

    command = "HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/dedup/bench_dedup.py " + " ".join(sys.argv[1:])
    text = table(rows, plans, command)
    print(text)
    if args.write:
        with open(Path(__file__).resolve().parents[1] / "RESULTS.md", "a", encoding="utf-8") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    run_all()
