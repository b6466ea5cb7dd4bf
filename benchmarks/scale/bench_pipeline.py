"""End to end: ``clusterclip`` stage by stage on a corpus, wall time and peak memory of each stage.

Each stage runs in its own process (the CLI, exactly as a user runs it), so its peak resident memory
(``ru_maxrss``) is its own. The static model's one-time distillation is done before timing starts.

    python benchmarks/scale/bench_pipeline.py ../shared/data/minipile.jsonl.gz --out runs/bench-minipile
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time

WRAPPER = """
import resource, sys, time
from clusterclip.cli.main import main
t0 = time.perf_counter()
code = main(sys.argv[1:])
wall = time.perf_counter() - t0
print("@@", wall, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, code, file=sys.stderr)
sys.exit(code)
"""


def stage(name: str, argv: list[str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", WRAPPER, *argv, "-q"], capture_output=True, text=True)
    line = next((ln for ln in proc.stderr.splitlines() if ln.startswith("@@")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"{name} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    _, wall, rss_kb, _ = line.split()
    return {"stage": name, "seconds": float(wall), "peak_rss_mib": int(rss_kb) / 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--embedder", default="static")
    ap.add_argument("--keep", action="store_true", help="keep an existing run directory (default: start fresh)")
    args = ap.parse_args()
    if not args.keep:
        shutil.rmtree(args.out, ignore_errors=True)
    if args.embedder == "static":
        from clusterclip.embed.registry import get_embedder

        get_embedder("static").ensure_model()
    t0 = time.perf_counter()
    rows = [
        stage("corpus + embed", ["embed", *args.inputs, "--out", args.out, "--embedder", args.embedder]),
        stage("cluster", ["cluster", args.out]),
        stage("plan (clusterclip)", ["plan", args.out, "--strategy", "clusterclip"]),
        stage("plan (random)", ["plan", args.out, "--strategy", "random"]),
        stage("report", ["report", args.out]),
    ]
    total = time.perf_counter() - t0
    with open(f"{args.out}/embed.json") as fh:
        embed = json.load(fh)
    with open(f"{args.out}/corpus.json") as fh:
        corpus = json.load(fh)
    with open(f"{args.out}/cluster.json") as fh:
        cluster = json.load(fh)
    print(f"{corpus['count']:,} documents, {corpus['tokens']:,} tokens; embedder {args.embedder}; "
          f"k={cluster['k']}; corpus stage {corpus['seconds']:.1f}s, embed stage {embed['seconds']:.1f}s "
          f"({corpus['count'] / embed['seconds']:.0f} docs/s)\n")
    print("| stage | wall s | peak RSS MiB |")
    print("|---|---|---|")
    for r in rows:
        print(f"| {r['stage']} | {r['seconds']:.1f} | {r['peak_rss_mib']:.0f} |")
    print(f"| total | {total:.1f} | |")


if __name__ == "__main__":
    main()
