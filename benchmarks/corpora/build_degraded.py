"""Corpora with a known quality signal, for the strata evidence (issue 43): clean documents plus injected
degraded ones (shuffled words, boilerplate, machine-garbled text) at a given share.

    .venv/bin/python benchmarks/corpora/build_degraded.py minipile --out /tmp/degraded-minipile.jsonl
    .venv/bin/python benchmarks/corpora/build_degraded.py pydocs --out /tmp/degraded-pydocs.jsonl

Sources (two corpora of different kinds):

* ``minipile``: ``../shared/data/minipile.jsonl.gz`` (Debian documentation, dictionaries, man pages; its
  ``domain``), a seeded sample of ``--docs`` documents;
* ``pydocs``: the docstrings of the third-party packages installed beside clusterclip (numpy, scipy,
  scikit-learn, torch, transformers, pyarrow, ... in this interpreter's site-packages), parsed with ``ast``
  (nothing imported), one document per module/class/function of at least 60 words, ``domain`` = the package.

A share ``--degraded`` of the documents (default 0.3) is replaced by a degraded copy of another clean
document, one of three kinds in turn: ``shuffled`` (its words in a random order), ``boilerplate`` (its first
sentences under repeated cookie/subscribe/terms lines), ``garbled`` (half of its letters replaced at random). A
degraded document's ``domain`` is ``degraded-<kind>`` (so the experiment's per-domain losses separate clean from
degraded text) and ``source`` the domain it came from. Everything is seeded.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import random
import string
import sysconfig
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MINIPILE = ROOT.parent / "shared" / "data" / "minipile.jsonl.gz"
PACKAGES = ("numpy", "scipy", "sklearn", "torch", "transformers", "pyarrow", "datasets", "matplotlib", "ray",
            "huggingface_hub", "tokenizers", "faiss", "lightgbm", "pandas", "accelerate", "sentence_transformers")
BOILERPLATE = ["Accept all cookies to continue. Read our privacy policy and terms of use.",
               "Click here to subscribe to our newsletter and never miss an update!",
               "Share this page. All rights reserved. Sign up or log in to comment."]
KINDS = ("shuffled", "boilerplate", "garbled")


def minipile(n: int, seed: int) -> list[dict]:
    with gzip.open(MINIPILE, "rt", encoding="utf-8") as fh:
        docs = [json.loads(line) for line in fh]
    random.Random(seed).shuffle(docs)
    return [{"id": d["id"], "text": d["text"], "domain": d["domain"]} for d in docs[:n]]


def _docstrings(path: Path) -> Iterator[tuple[str, str]]:
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError, UnicodeDecodeError):
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                yield getattr(node, "name", path.stem), doc


def pydocs(n: int, seed: int) -> list[dict]:
    site = Path(sysconfig.get_paths()["purelib"])
    docs = []
    for package in PACKAGES:
        base = site / package
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            if "tests" in path.parts or "test" in path.parts:
                continue
            for name, doc in _docstrings(path):
                if len(doc.split()) >= 60:
                    rel = path.relative_to(site).with_suffix("")
                    docs.append({"id": f"{'.'.join(rel.parts)}.{name}:{len(docs)}", "text": doc, "domain": package})
    random.Random(seed).shuffle(docs)
    return docs[:n]


def degrade(text: str, kind: str, rng: random.Random) -> str:
    if kind == "shuffled":
        words = text.split()
        rng.shuffle(words)
        return " ".join(words)
    if kind == "boilerplate":
        head = " ".join(text.split()[:40])
        return "\n".join([*(rng.sample(BOILERPLATE, 3) * 3), head, *BOILERPLATE])
    return "".join(rng.choice(string.ascii_lowercase) if c.isalpha() and rng.random() < 0.5 else c for c in text)


def build(docs: list[dict], share: float, seed: int) -> list[dict]:
    rng = random.Random(seed + 1)
    bad = set(rng.sample(range(len(docs)), round(share * len(docs))))
    out = []
    for i, doc in enumerate(docs):
        if i not in bad:
            out.append({**doc, "source": doc["domain"]})
            continue
        donor = docs[rng.randrange(len(docs))]
        kind = KINDS[len(out) % len(KINDS)]
        out.append({"id": f"degraded-{i}", "text": degrade(donor["text"], kind, rng), "domain": f"degraded-{kind}",
                    "source": donor["domain"]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", choices=("minipile", "pydocs"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--docs", type=int, default=6000)
    ap.add_argument("--degraded", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    docs = (minipile if a.source == "minipile" else pydocs)(a.docs, a.seed)
    rows = build(docs, a.degraded, a.seed)
    with open(a.out, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    domains: dict[str, int] = {}
    for row in rows:
        domains[row["domain"]] = domains.get(row["domain"], 0) + 1
    print(json.dumps({"out": a.out, "documents": len(rows), "domains": domains}, indent=1))


if __name__ == "__main__":
    main()
