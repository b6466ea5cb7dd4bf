"""Near-duplicate quality of ``clusterclip dedup`` against MinHash LSH (rensa, datasketch) and SemHash, with
injected near-copies, at several corpus sizes (issue: near-duplicates collapse on a mixed corpus).

    python benchmarks/corpora/build_mixed_corpus.py --out benchmarks/out/corpora/mixed.jsonl.gz
    python benchmarks/corpora/build_corpora.py --corpus polyglot --out benchmarks/out/corpora
    python3 -m venv /tmp/venv-semhash && /tmp/venv-semhash/bin/pip install semhash==0.5.0 model2vec==0.10.0
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/dedup/dedup_quality.py \
        --corpus benchmarks/out/corpora/mixed.jsonl.gz --corpus benchmarks/out/corpora/polyglot.jsonl.gz \
        --corpus ../shared/data/minipile.jsonl.gz --corpus stdlib \
        --sizes 2000 20000 --semhash-python /tmp/venv-semhash/bin/python --json benchmarks/out/dedup-quality.json
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/dedup/dedup_quality.py --corpus pydocs --sizes 20000 \
        --semhash-python ...
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/dedup/dedup_quality.py --corpus stdlib --sizes 20000 --heavy ...

``--corpus`` is a JSONL(.gz) file (``text``, optional ``id`` and ``domain``), ``stdlib`` (the docstrings of the
standard library: clusterclip's default corpus, 2,669 on Python 3.11) or ``pydocs`` (those plus the docstrings
of the packages installed beside this interpreter, for sizes the standard library does not reach). Repeatable.

For each corpus and size N, with ``--seed``:

1. **Base**: N documents drawn without replacement (all of them when the corpus is smaller).
2. **Injected near-copies**: ``--copy-frac`` of the base documents are sources; a source gets 1 copy (half of
   them), 2-3 (30 %) or 4-10 (20 %). A copy is its source (or, 30 % of the time, an earlier copy of it) with
   1-3 edits: word substitutions, deletions or insertions (1-3 % of the words, at least one; the new words are
   drawn from the corpus), whitespace and punctuation changes, a tail cut (to 75-95 %), a boilerplate line
   added, or a few lines reordered (texts of 6+ lines: code, changelogs, ASCII art). Line structure is kept.
   Base and copies are shuffled together.
3. **Truth**: a source and its copies form one cluster; base documents that are already duplicates join too:
   the same text after lower-casing and collapsing whitespace, or an exact Jaccard >= 0.8 of their 3-shingles
   of whitespace-separated tokens, both having 10 or more (candidates from a 32-band MinHash LSH, then the
   exact Jaccard; tokens keep symbols, so two ASCII drawings with the same few letters are not duplicates).
   So a detector is not penalised for the
   corpus's own clear duplicates; looser natural near-duplicates (J < 0.8) it merges count as false positives,
   and the columns ``P copy``, ``R copy`` and ``F1 copy`` (over the predicted and the true pairs that hold an
   injected copy) leave all base-base pairs out. **Detectable truth** (columns ``P det``, ``R det``, ``F1 det``,
   ``F1 copy det``): the same with two members of one injected content joined only when they are near-copies in
   principle, an exact Jaccard >= 0.5 (the looser baseline threshold) of their byte 5-grams or of their word sets,
   the injected boilerplate lines left out (:func:`copy_similarity`): "Cannot open file" -> "Cannot open
   directory" is another message, not a copy, and no Jaccard-style detector can be asked to find it.
4. **clusterclip**: ``clusterclip embed`` (default embedder), ``cluster`` (default K) and ``dedup`` (defaults,
   or ``--dedup-args``) through the CLI into a temporary run directory; ``dedup/group.npy`` is mapped back to the
   input order through the corpus ids; ``dedup/removed.parquet`` gives the removed documents (and the smallest
   word-set Jaccard of one to its kept document), ``dedup.json`` what the checks refused (``checks`` in the JSON).
5. **Baselines** in the same process, on the same texts, all global (no clusters): word 3-shingles of the
   lower-cased whitespace-split text (fewer than 3 words: the words), 128 permutations, the LSH bands and rows
   of datasketch's optimal parameters for the threshold; *rensa* ``RMinHash`` + ``RMinHashLSH``, candidates kept
   when their estimated Jaccard is >= the threshold (as ``RMinHashDeduplicator`` does); *datasketch*
   ``MinHash`` + ``MinHashLSH`` candidates as returned (its documented use); SemHash ``self_deduplicate`` with
   clusterclip's static model (distilled offline; ``--semhash-python``: a virtualenv with semhash). Groups are the
   connected components of each method's duplicate edges.

Scores: pairwise precision / recall / F1 over pairs of documents in one group; the largest group and the
number of groups above 10 members; the median 5-gram Jaccard (whitespace tokens) of 300 pairs sampled in the 5 largest
groups (a pair of true near-copies is high; 0.05 means unrelated documents); the documents ``drop`` removes
(members that are not their group's kept document: clusterclip's kept rule, for the baselines the longest
member) against the injected copies and the true removable count (N minus truth clusters); removed documents
that are no duplicate of their kept one (``wrong drop``), and truth clusters with no member left (``lost``).
``--keep DIR`` keeps the run directories, truth and baseline groups for further analysis.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

BOILERPLATE = ("Share this article on Facebook, Twitter and LinkedIn.", "Copyright 2020. All rights reserved.",
               "Click here to subscribe to our newsletter.", "Advertisement", "# -*- coding: utf-8 -*-",
               "Posted by admin", "Translated automatically; see the original.", "-- ", "Read more...")
MIN_SHINGLES = 10  # natural near-duplicates need this many distinct shingles each (else: the same text)


# ----------------------------------------------------------------------------------------------- corpora
def load_corpus(spec: str) -> tuple[list[str], list[str]]:
    """Texts and domains of a corpus: a JSONL(.gz) path, ``stdlib`` or ``pydocs``."""
    if spec in ("stdlib", "pydocs"):
        from clusterclip.corpus.default_corpus import stdlib_documents

        roots = [None]
        if spec == "pydocs":
            import sysconfig

            roots.append(sysconfig.get_paths()["purelib"])
        texts, domains = [], []
        for root in roots:
            for batch in stdlib_documents(root=root):
                texts += batch.texts
                domains += [str(g) for g in batch.groups] if batch.groups is not None else ["(none)"] * len(batch.texts)
        return texts, domains
    path = Path(spec)
    opener = gzip.open if path.suffix == ".gz" else open
    texts, domains = [], []
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                if str(r.get("text") or "").strip():
                    texts.append(r["text"])
                    domains.append(str(r.get("domain", "(none)")))
    return texts, domains


def corpus_name(spec: str) -> str:
    return spec if spec in ("stdlib", "pydocs") else re.sub(r"\.jsonl(\.gz)?$", "", Path(spec).name)


# ---------------------------------------------------------------------------------------------- injection
def _split(text: str) -> tuple[list[str], list[str]]:
    """Words and the whitespace around them: ``text == seps[0] + words[0] + seps[1] + ... + words[-1] + seps[-1]``."""
    words = re.findall(r"\S+", text)
    seps = re.split(r"\S+", text)
    return words, seps


def _join(words: list[str], seps: list[str]) -> str:
    out = [seps[0] if seps else ""]
    for i, w in enumerate(words):
        out += [w, seps[i + 1] if i + 1 < len(seps) else " "]
    return "".join(out).rstrip()


def edit(text: str, rng: np.random.Generator, pool: list[str], heavy: bool = False) -> str:
    """1-3 realistic edits of ``text`` (see the module doc); line breaks kept where words are kept. ``heavy``:
    3-5 edits, 3-8 % of the words each, and swaps of adjacent words among the kinds (copies whose word
    shingles differ more: the semantic detector's ground)."""
    lines = text.split("\n")
    kinds = ["substitute", "delete", "insert", "space", "punct", "truncate", "boilerplate"] + ["swap"] * heavy
    if sum(1 for line in lines if line.strip()) >= 6:
        kinds += ["reorder", "reorder"]
    count = rng.integers(3, 6) if heavy else rng.integers(1, 4)
    for kind in rng.choice(kinds, size=min(int(count), len(kinds)), replace=False):
        words, seps = _split(text)
        n = len(words)
        k = max(1, round(n * (rng.uniform(0.03, 0.08) if heavy else rng.uniform(0.01, 0.03))))
        if kind in ("substitute", "delete") and n >= 4:
            at = rng.choice(n, min(k, n - 2), replace=False)
            if kind == "substitute":
                for i in at:
                    words[i] = pool[int(rng.integers(len(pool)))]
            else:
                keep = np.ones(n, bool)
                keep[at] = False
                words = [w for w, m in zip(words, keep, strict=True) if m]
                seps = [seps[0]] + [s for s, m in zip(seps[1:], keep, strict=True) if m] + [""]
            text = _join(words, seps)
        elif kind == "insert" and n >= 1:
            for i in sorted(rng.choice(n + 1, k), reverse=True):
                words.insert(int(i), pool[int(rng.integers(len(pool)))])
                seps.insert(int(i) + 1, " ")
            text = _join(words, seps)
        elif kind == "swap" and n >= 3:
            for i in rng.integers(0, n - 1, k):
                words[i], words[i + 1] = words[i + 1], words[i]
            text = _join(words, seps)
        elif kind == "space":
            choice = rng.integers(3)
            if choice == 0:
                text = re.sub(r"[ \t]+", " ", text)
            elif choice == 1:
                text = re.sub(r"\n\s*\n", "\n", text) if "\n\n" in text else text.replace(". ", ".  ")
            else:
                text = "\n".join(line.rstrip() + (" " if rng.random() < 0.3 else "") for line in text.split("\n"))
        elif kind == "punct":
            swaps = [(",", ""), (".", ";"), ('"', "'"), ("'", "\u2019"), (" - ", " \u2014 "), (":", " :")]
            a, b = swaps[int(rng.integers(len(swaps)))]
            idx = [m.start() for m in re.finditer(re.escape(a), text)]
            for i in sorted(rng.choice(idx, min(len(idx), k), replace=False), reverse=True) if idx else []:
                text = text[:i] + b + text[i + len(a):]
            if not idx:
                text = text.rstrip() + rng.choice([".", "!", " ...", ";"])
        elif kind == "truncate" and n >= 8:
            keep = max(4, int(n * rng.uniform(0.75, 0.95)))
            text = _join(words[:keep], seps[:keep + 1])
        elif kind == "boilerplate":
            line = BOILERPLATE[int(rng.integers(len(BOILERPLATE)))]
            text = line + "\n" + text if rng.random() < 0.5 else text.rstrip() + "\n" + line
        elif kind == "reorder":
            lines = text.split("\n")
            for _ in range(int(rng.integers(1, 4))):
                i = int(rng.integers(len(lines) - 1))
                lines[i], lines[i + 1] = lines[i + 1], lines[i]
            text = "\n".join(lines)
    return text if text.strip() else "x"


def inject(texts: list[str], frac: float, seed: int,
           heavy: bool = False) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """Base texts plus near-copies, shuffled: texts, source (base index of the content) and is-copy per
    document, and the input permutation (position -> index in base + copies order)."""
    rng = np.random.default_rng(seed)
    n = len(texts)
    pool = [w for i in rng.choice(n, min(n, 500), replace=False) for w in texts[int(i)].split()[:200]]
    pool = [w for w in pool if len(w) < 30] or ["the"]
    sources = rng.choice(n, round(frac * n), replace=False)
    out, src = list(texts), list(range(n))
    for s in sources.tolist():
        u = rng.random()
        m = 1 if u < 0.5 else int(rng.integers(2, 4)) if u < 0.8 else int(rng.integers(4, 11))
        made = []
        for _ in range(m):
            base = made[int(rng.integers(len(made)))] if made and rng.random() < 0.3 else texts[s]
            made.append(edit(base, rng, pool, heavy))
        out += made
        src += [s] * m
    perm = rng.permutation(len(out))
    return [out[i] for i in perm], np.asarray(src)[perm], perm >= n, perm


def words(text: str) -> list[str]:
    """Lower-cased whitespace-separated tokens (punctuation and symbols kept: code and ASCII art stay apart)."""
    return text.lower().split()


def shingles(text: str, k: int) -> set[str]:
    w = words(text)
    return {" ".join(w[i:i + k]) for i in range(len(w) - k + 1)} if len(w) >= k else set(w)


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def truth_clusters(texts: list[str], src: np.ndarray, is_copy: np.ndarray,
                   natural: float = 0.8) -> tuple[np.ndarray, int]:
    """Truth cluster per document: injected copies with their source, joined with base documents of the same
    normalised text or exact word 3-shingle Jaccard >= ``natural``; also the number of natural edges."""
    n = len(texts)
    edges = [np.stack([np.arange(n), src.astype(np.int64)], 1)]  # document -> its content's base index
    base_pos = np.full(int(src.max()) + 1, -1, np.int64)
    base_pos[src[~is_copy]] = np.flatnonzero(~is_copy)
    edges[0][:, 1] = base_pos[src]
    norm = {}
    nat = []
    for i in np.flatnonzero(~is_copy).tolist():
        key = " ".join(texts[i].lower().split())
        if key in norm:
            nat.append((norm[key], i))
        else:
            norm[key] = i
    from rensa import RMinHash, RMinHashLSH

    base = np.flatnonzero(~is_copy)
    cache: dict[int, set] = {int(i): shingles(texts[i], 3) for i in base}
    objs = RMinHash.from_token_sets([sorted(cache[int(i)]) or ["\x00"] for i in base], num_perm=128, seed=12345)
    lsh = RMinHashLSH(threshold=0.5, num_perm=128, num_bands=32)  # 4 rows a band: misses J 0.8 with p ~ 1e-7
    lsh.insert_many(objs)
    cand = [(a, b) for a, found in enumerate(lsh.query_all(objs)) for b in found if b > a]
    for a, b in cand:
        i, j = int(base[a]), int(base[b])
        sa = cache.setdefault(i, shingles(texts[i], 3))
        sb = cache.setdefault(j, shingles(texts[j], 3))
        if len(sa) >= MIN_SHINGLES and len(sb) >= MIN_SHINGLES and jaccard(sa, sb) >= natural:
            nat.append((i, j))
    if nat:
        edges.append(np.asarray(nat, np.int64))
    return components(n, np.concatenate(edges)), len(nat)


DETECTABLE = 0.5
"""A member of an injected content is a *detectable* near-copy of another when their :func:`copy_similarity` is at
least this (the looser of the MinHash baselines' thresholds)."""


def _without_boilerplate(text: str) -> str:
    """``text`` without its lines that are an injected boilerplate line (itself when nothing else is left)."""
    kept = [line for line in text.split("\n") if line.strip() not in BOILERPLATE]
    return "\n".join(kept) if kept else text


def _byte_grams(text: str, k: int = 5) -> np.ndarray:
    """Sorted distinct uint64 codes of the ``k``-byte grams of the normalised text (lower-cased, whitespace runs
    one space), without the injected boilerplate lines; a text of at most ``k`` bytes: one code of itself."""
    b = np.frombuffer(" ".join(_without_boilerplate(text).lower().split()).encode("utf-8"), np.uint8)
    if b.size <= k:
        return np.asarray([int.from_bytes(b.tobytes(), "little") + 1], np.uint64)
    windows = np.lib.stride_tricks.sliding_window_view(b, k).astype(np.uint64)
    return np.unique((windows << (np.arange(k, dtype=np.uint64) * np.uint64(8))).sum(axis=1, dtype=np.uint64))


def copy_similarity(a: str, b: str, grams_a: np.ndarray | None = None, grams_b: np.ndarray | None = None) -> float:
    """The larger of two exact Jaccards of two texts without the injected boilerplate lines (a detector can find
    such a line, common to many documents, as :mod:`clusterclip.dedup.lines` does): of their byte 5-grams (they
    see scripts without spaces and re-spacing) and of their sets of whitespace-separated words (reordering)."""
    ga = _byte_grams(a) if grams_a is None else grams_a
    gb = _byte_grams(b) if grams_b is None else grams_b
    inter = np.intersect1d(ga, gb, assume_unique=True).size
    words_a, words_b = set(words(_without_boilerplate(a))), set(words(_without_boilerplate(b)))
    return max(inter / (ga.size + gb.size - inter), jaccard(words_a, words_b))


def detectable_truth(texts: list[str], src: np.ndarray, is_copy: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """The truth restricted to near-copies detectable in principle: inside each injected content, two members are
    joined only when their :func:`copy_similarity` is >= ``DETECTABLE``; the base documents' own duplicates (the
    truth's other edges) are kept as they are. Why: a copy of a three-word message with one word substituted
    ("Cannot open file" -> "Cannot open directory") is another message, not a near-copy, under any Jaccard-style
    definition."""
    n = len(texts)
    content = src.astype(np.int64)
    multi = np.flatnonzero(np.bincount(content)[content] >= 2)
    grams = {int(i): _byte_grams(texts[int(i)]) for i in multi}
    edges = []
    order = multi[np.argsort(content[multi], kind="stable")]
    bounds = np.flatnonzero(np.diff(content[order], prepend=-1, append=-1))
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        members = order[lo:hi].tolist()
        edges += [(i, j) for x, i in enumerate(members) for j in members[x + 1:]
                  if copy_similarity(texts[i], texts[j], grams[i], grams[j]) >= DETECTABLE]
    # the base documents' own duplicates: truth pairs of two base documents of different contents
    base = np.flatnonzero(~is_copy)
    nat = base[np.argsort(truth[base], kind="stable")]
    same = truth[nat][1:] == truth[nat][:-1]
    edges += list(zip(nat[:-1][same].tolist(), nat[1:][same].tolist(), strict=True))
    return components(n, edges if edges else np.zeros((0, 2), np.int64))


# ----------------------------------------------------------------------------------------------- scoring
def components(n: int, edges: Any) -> np.ndarray:
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    e = np.asarray(edges, np.int64).reshape(-1, 2)
    return connected_components(coo_matrix((np.ones(len(e), np.int8), (e[:, 0], e[:, 1])), shape=(n, n)),
                                directed=False)[1].astype(np.int64)


def _pairs(*keys: np.ndarray) -> int:
    _, counts = np.unique(np.stack(keys, axis=1), axis=0, return_counts=True)
    return int((counts.astype(np.int64) * (counts - 1) // 2).sum())


def kept_longest(group: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Kept document per document's group: the longest member, ties by lowest index."""
    n = group.size
    order = np.lexsort((np.arange(n), -length, group))
    head = np.concatenate(([True], group[order][1:] != group[order][:-1]))
    rep = np.empty(int(group.max()) + 1, np.int64)
    rep[group[order[head]]] = order[head]
    return rep[group]


def score(group: np.ndarray, kept_of: np.ndarray, truth: np.ndarray, is_copy: np.ndarray, texts: list[str],
          seed: int = 0) -> dict[str, Any]:
    """Pairwise scores and group diagnostics of a grouping (``kept_of``: the kept document of each document's
    group)."""
    tp, pp, tt = _pairs(group, truth), _pairs(group), _pairs(truth)
    p, r = tp / pp if pp else 1.0, tp / tt if tt else 1.0
    copy_pairs = pp - _pairs(group[~is_copy])
    tp_base = _pairs(group[~is_copy], truth[~is_copy])
    p_copy = (tp - tp_base) / copy_pairs if copy_pairs else 1.0
    true_copy_pairs = tt - _pairs(truth[~is_copy])
    r_copy = (tp - tp_base) / true_copy_pairs if true_copy_pairs else 1.0
    sizes = np.bincount(group)
    removed = kept_of != np.arange(group.size)
    wrong = removed & (truth[kept_of] != truth)
    kept_truth = np.unique(truth[~removed])
    top = np.argsort(-sizes, kind="stable")[:5]
    top = top[sizes[top] >= 2]
    rng = np.random.default_rng(seed)
    jac = []
    if top.size:
        weights = sizes[top] * (sizes[top] - 1) / 2
        for g in rng.choice(top, 300, p=weights / weights.sum()):
            members = np.flatnonzero(group == g)
            a, b = rng.choice(members, 2, replace=False)
            jac.append(jaccard(shingles(texts[a], 5), shingles(texts[b], 5)))
    return dict(precision=p, recall=r, f1=2 * p * r / (p + r) if p + r else 0.0, p_copy=p_copy, r_copy=r_copy,
                f1_copy=2 * p_copy * r_copy / (p_copy + r_copy) if p_copy + r_copy else 0.0,
                largest=int(sizes.max()), groups_over_10=int((sizes > 10).sum()),
                top5_median_j5=float(np.median(jac)) if jac else None, removed=int(removed.sum()),
                injected=int(is_copy.sum()), removable=int(group.size - np.unique(truth).size),
                wrong_drop=int(wrong.sum()), lost=int(np.unique(truth).size - kept_truth.size))


# ---------------------------------------------------------------------------------------------- detectors
def cli_bin() -> list[str]:
    exe = Path(sys.executable).with_name("clusterclip")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "clusterclip"]


def run_clusterclip(corpus: Path, run: Path, args: argparse.Namespace) -> dict[str, Any]:
    """``clusterclip embed``, ``cluster``, ``dedup`` via the CLI; groups and kept in the input order."""
    import pyarrow.parquet as pq

    times = {}
    for step, cmd in (("embed", ["embed", str(corpus), "--out", str(run), "--id-field", "id", *args.embed_args]),
                      ("cluster", ["cluster", str(run), *args.cluster_args]),
                      ("dedup", ["dedup", str(run), *args.dedup_args])):
        t0 = time.perf_counter()
        subprocess.run([*cli_bin(), *cmd, "-q"], check=True)
        times[step] = time.perf_counter() - t0
    # read straight from the run directory (docs/run-directory.md), so the benchmark needs no internal API
    ids = [i for part in sorted((run / "corpus").glob("part-*.parquet"))
           for i in pq.read_table(part, columns=["id"]).column("id").to_pylist()]
    pos = np.asarray([int(i[1:]) for i in ids], np.int64)  # run order -> input position ("d<position>")
    group_run, kept_run = np.load(run / "dedup" / "group.npy"), np.load(run / "dedup" / "kept.npy")
    n = pos.size
    group = np.empty(n, np.int64)
    group[pos] = group_run
    kept_of = np.empty(n, np.int64)
    kept_of[pos] = pos[kept_run[group_run]]
    removed = pq.read_table(run / "dedup" / "removed.parquet")
    assert removed.num_rows == int((kept_of != np.arange(n)).sum())
    rec = json.loads((run / "dedup.json").read_text())
    checks = {k: rec.get(k) for k in ("semantic_edges", "unconfirmed_semantic", "refused_lexical", "split_off")}
    if "word_jaccard" in removed.column_names and removed.num_rows:  # every removed document is confirmed
        checks["min_removed_word_jaccard"] = float(removed.column("word_jaccard").to_numpy().min())
    return dict(group=group, kept_of=kept_of, seconds=times["dedup"], times=times,
                detectors=removed.column("detector").value_counts().to_pylist(), record=rec, checks=checks)


def baseline_tokens(texts: list[str]) -> list[list[str]]:
    out = []
    for t in texts:
        w = t.lower().split()
        out.append([" ".join(w[i:i + 3]) for i in range(len(w) - 2)] if len(w) >= 3 else (w or [t]))
    return out


def lsh_params(threshold: float, num_perm: int) -> tuple[int, int]:
    """Bands and rows minimising datasketch's (equally weighted) false positive + negative probability, bands
    restricted to divisors of ``num_perm`` (rensa needs them)."""
    from datasketch.lsh import _false_negative_probability as fn
    from datasketch.lsh import _false_positive_probability as fp

    options = [(b, num_perm // b) for b in range(1, num_perm + 1) if num_perm % b == 0]
    return min(options, key=lambda br: fp(threshold, *br) + fn(threshold, *br))


def rensa_groups(tokens: list[list[str]], thresholds: list[float], num_perm: int = 128) -> dict[float, tuple]:
    from rensa import RMinHash, RMinHashLSH

    t0 = time.perf_counter()
    objs = RMinHash.from_token_sets(tokens, num_perm=num_perm, seed=42)
    t_sig = time.perf_counter() - t0
    out = {}
    for thr in thresholds:
        t0 = time.perf_counter()
        b, _ = lsh_params(thr, num_perm)  # (32, 4) at 0.5, (16, 8) at 0.7
        lsh = RMinHashLSH(threshold=thr, num_perm=num_perm, num_bands=b)
        lsh.insert_many(objs)
        edges = [(i, j) for i, cands in enumerate(lsh.query_all(objs)) for j in cands
                 if j > i and objs[i].jaccard(objs[j]) >= thr]
        out[thr] = (components(len(tokens), edges), t_sig + time.perf_counter() - t0)
    return out


def datasketch_groups(tokens: list[list[str]], thresholds: list[float], num_perm: int = 128) -> dict[float, tuple]:
    from datasketch import MinHash, MinHashLSH

    t0 = time.perf_counter()
    sigs = []
    for tok in tokens:
        m = MinHash(num_perm=num_perm, seed=1)
        m.update_batch([s.encode("utf-8") for s in tok])
        sigs.append(m)
    t_sig = time.perf_counter() - t0
    out = {}
    for thr in thresholds:
        t0 = time.perf_counter()
        lsh = MinHashLSH(num_perm=num_perm, params=lsh_params(thr, num_perm))
        for i, m in enumerate(sigs):
            lsh.insert(i, m)
        edges = [(i, j) for i, m in enumerate(sigs) for j in lsh.query(m) if j > i]
        out[thr] = (components(len(tokens), edges), t_sig + time.perf_counter() - t0)
    return out


SEMHASH = """
import json, sys, time
from model2vec import StaticModel
from semhash import SemHash
texts = [json.loads(line)["text"] for line in open(sys.argv[1], encoding="utf-8")]
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


def semhash_groups(python: str, corpus: Path, n: int, thresholds: list[float]) -> dict[float, tuple]:
    from clusterclip.embed.distill import static_cache_dir

    if not static_cache_dir().exists():
        from clusterclip.embed.registry import get_embedder

        get_embedder("static", progress=False).encode(["x"])
    res = subprocess.run([python, "-c", SEMHASH, str(corpus), str(static_cache_dir()), ",".join(map(str, thresholds))],
                         capture_output=True, text=True, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    if res.returncode:
        raise SystemExit(f"semhash failed: {res.stderr[-2000:]}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    return {t: (components(n, out[str(t)]["edges"]), out[str(t)]["seconds"]) for t in thresholds}


# -------------------------------------------------------------------------------------------------- main
def run_one(spec: str, size: int, args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    name = corpus_name(spec)
    all_texts, _ = load_corpus(spec)
    rng = np.random.default_rng(args.seed)
    n_all = len(all_texts)
    pick = np.sort(rng.choice(n_all, size, replace=False)) if size < n_all else np.arange(n_all)
    base = [all_texts[i] for i in pick.tolist()]
    texts, src, is_copy, _ = inject(base, args.copy_frac, args.seed, args.heavy)
    truth, n_natural = truth_clusters(texts, src, is_copy)
    detectable = detectable_truth(texts, src, is_copy, truth)
    n = len(texts)
    label = f"{name}-{len(base)}" + ("-heavy" if args.heavy else "")
    d = work / label
    d.mkdir(parents=True, exist_ok=True)
    corpus = d / "corpus.jsonl"
    with open(corpus, "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": f"d{i}", "text": t}, ensure_ascii=False) + "\n")
    np.save(d / "truth.npy", truth)
    np.save(d / "truth-detectable.npy", detectable)
    np.save(d / "is_copy.npy", is_copy)
    np.save(d / "source.npy", src)
    length = np.asarray([len(t) for t in texts], np.int64)
    print(f"## {label}: {len(base)} base + {int(is_copy.sum())} copies = {n} documents; "
          f"{n - np.unique(truth).size} removable in the truth ({n_natural} natural duplicate pairs in the base); "
          f"truth pairs {_pairs(truth):,}, detectable {_pairs(detectable):,}",
          flush=True)
    rows = []

    def add(method: str, group: np.ndarray, kept_of: np.ndarray, seconds: float, **extra: Any) -> None:
        np.save(d / f"group-{re.sub(r'[^A-Za-z0-9.]+', '_', method)}.npy", group)
        s = score(group, kept_of, truth, is_copy, texts, args.seed)
        det = score(group, kept_of, detectable, is_copy, texts, args.seed)
        s.update({f"{k}_det": det[k] for k in ("precision", "recall", "f1", "f1_copy")})
        rows.append(dict(corpus=name + (" (heavy edits)" if args.heavy else ""), size=len(base), documents=n,
                         method=method, seconds=round(seconds, 1), **s, **extra))
        print(fmt_row(rows[-1]), flush=True)

    cc = run_clusterclip(corpus, d / "run", args)
    add("clusterclip dedup (defaults)" if not args.dedup_args else f"clusterclip dedup {' '.join(args.dedup_args)}",
        cc["group"], cc["kept_of"], cc["seconds"], detectors=cc["detectors"],
        embed_seconds=round(cc["times"]["embed"], 1), checks=cc["checks"])
    tokens = baseline_tokens(texts)
    for thr, (g, secs) in rensa_groups(tokens, args.thresholds).items():
        add(f"rensa MinHash LSH J{thr}", g, kept_longest(g, length), secs)
    if not args.no_datasketch:
        for thr, (g, secs) in datasketch_groups(tokens, args.thresholds).items():
            add(f"datasketch MinHashLSH J{thr}", g, kept_longest(g, length), secs)
    if args.semhash_python:
        for thr, (g, secs) in semhash_groups(args.semhash_python, corpus, n, args.semhash_thresholds).items():
            add(f"SemHash {thr}", g, kept_longest(g, length), secs)
    if not args.keep:
        shutil.rmtree(d / "run", ignore_errors=True)
    return rows


COLUMNS = ("corpus", "size", "documents", "method", "precision", "recall", "f1", "p_copy", "r_copy", "f1_copy",
           "precision_det", "recall_det", "f1_det", "f1_copy_det",
           "largest", "groups_over_10", "top5_median_j5", "removed", "injected", "removable", "wrong_drop", "lost",
           "seconds")
HEADER = ("corpus", "base", "docs", "method", "P", "R", "F1", "P copy", "R copy", "F1 copy", "P det", "R det", "F1 det",
          "F1 copy det", "largest", "groups >10",
          "J5 med top-5", "drop removes", "injected", "removable", "wrong drop", "lost", "s")


def fmt(x: Any) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.3f}" if x < 10 else f"{x:,.0f}"
    if isinstance(x, int):
        return f"{x:,}"
    return str(x)


def fmt_row(r: dict[str, Any]) -> str:
    return "| " + " | ".join(fmt(r.get(c)) for c in COLUMNS) + " |"


def table(rows: list[dict[str, Any]]) -> str:
    return "\n".join(["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER), *map(fmt_row, rows)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", action="append", required=True, help="JSONL(.gz) path, stdlib or pydocs; repeatable")
    ap.add_argument("--sizes", type=int, nargs="+", default=[2000, 20000])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--copy-frac", type=float, default=0.15, help="share of base documents that get copies")
    ap.add_argument("--heavy", action="store_true", help="heavier edits (3-5 a copy, adjacent-word swaps)")
    ap.add_argument("--thresholds", type=float, nargs="+", default=[0.5, 0.7], help="MinHash baselines' Jaccard")
    ap.add_argument("--semhash-python", default=None, help="python of a virtualenv with semhash (else skipped)")
    ap.add_argument("--semhash-thresholds", type=float, nargs="+", default=[0.95])
    ap.add_argument("--no-datasketch", action="store_true", help="skip datasketch (slow: ~1k docs/s)")
    ap.add_argument("--embed-args", nargs="*", default=[], help="more `clusterclip embed` options")
    ap.add_argument("--cluster-args", nargs="*", default=[], help="more `clusterclip cluster` options")
    ap.add_argument("--dedup-args", nargs="*", default=[], help="more `clusterclip dedup` options")
    ap.add_argument("--json", type=Path, default=None, help="save the rows as JSON")
    ap.add_argument("--keep", type=Path, default=None, help="keep run directories, truth and groups here")
    args = ap.parse_args()
    import clusterclip

    print(f"clusterclip from {Path(clusterclip.__file__).parent}", flush=True)
    rows: list[dict[str, Any]] = []
    print(table([]), flush=True)
    with tempfile.TemporaryDirectory(prefix="dedup-quality-") as tmp:
        work = args.keep or Path(tmp)
        for spec in args.corpus:
            for size in args.sizes:
                rows += run_one(spec, size, args, work)
                if args.json:
                    args.json.parent.mkdir(parents=True, exist_ok=True)
                    args.json.write_text(json.dumps(rows, indent=1))
    print("\n" + table(rows))


if __name__ == "__main__":
    main()
