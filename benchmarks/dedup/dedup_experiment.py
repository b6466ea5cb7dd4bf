"""Held-out loss of models trained under the per-document cap, ``--duplicates drop`` and ``group-cap``, on
corpora with injected near-copies (issue 26).

    HF_HUB_OFFLINE=1 python benchmarks/dedup/dedup_experiment.py --out runs/dedup-exp -- --max-repeats 12 --seeds 0,1

Each corpus (``--corpora``: minipile-1k, whose records carry a ``domain``, and the stdlib docstrings, which do
not) gets the near-copies of ``benchmarks/dedup/bench_dedup.py`` (``--copy-frac`` of its documents copied 2..20
times with one or two small edits; a copy keeps its source's domain), then ``clusterclip experiment`` runs
``random`` and ``clusterclip`` under ``--duplicate-modes none,drop,group-cap`` with the default proxies, or with
the options after ``--``. Its results table is printed, with the held-out documents that have a near-copy in
the training split set apart (the copies leak across the split, as they would in a real corpus).
A restart skips the finished runs. The cap must fit ``drop``'s budget: its kept documents hold about half the
training split's tokens (the copies are the rest), so at the default 6 passes a cap of 9 is infeasible
(refused, naming the smallest that fits: 11 on minipile-1k); 12 is the default sweep's other cap.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench_dedup import DATA, inject, stdlib_texts

from clusterclip.cli.main import main as cli


def minipile_1k() -> tuple[list[str], list[str]]:
    """minipile-1k's texts and domains."""
    rows = [json.loads(line) for line in (DATA / "minipile-1k.jsonl").read_text(encoding="utf-8").splitlines()]
    return [r["text"] for r in rows], [r["domain"] for r in rows]


def stdlib() -> tuple[list[str], list[str]]:
    """The stdlib docstrings (no domain)."""
    texts = stdlib_texts()
    return texts, ["(none)"] * len(texts)


CORPORA = {"minipile-1k": minipile_1k, "stdlib": stdlib}


def write_injected(name: str, frac: float, seed: int, path: Path) -> int:
    """The corpus with its injected copies as JSONL (id, text, domain, source); its document count."""
    texts, domains = CORPORA[name]()
    injected, truth = inject(texts, frac, seed)
    with open(path, "w", encoding="utf-8") as f:
        for i, (text, src) in enumerate(zip(injected, truth[0].tolist(), strict=True)):
            f.write(json.dumps({"id": f"doc{i}", "text": text, "domain": domains[src], "source": int(src)}) + "\n")
    return len(injected)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--corpora", default="minipile-1k,stdlib")
    ap.add_argument("--copy-frac", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("experiment", nargs="*", help="more `clusterclip experiment` options (after --)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.corpora.split(","):
        corpus = args.out / f"{name}-injected.jsonl"
        n = write_injected(name, args.copy_frac, args.seed, corpus)
        print(f"\n## {name}: {n} documents with copies ({corpus})\n", flush=True)
        cli(["experiment", str(corpus), "--out", str(args.out / name), "--strategies", "random,clusterclip",
             "--duplicate-modes", "none,drop,group-cap", "-q", *args.experiment])


if __name__ == "__main__":
    sys.exit(main())
