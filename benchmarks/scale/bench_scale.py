"""Scaling of each stage with N on the local and Ray engines, and a 10^9-draw plan over 10^8 documents.

Synthetic corpora (documents drawn from topic vocabularies with a Zipf topic mixture, ``--files`` JSONL
shards each) of several sizes go through the CLI stage by stage, once per engine; each command runs in
its own process (wall time and peak RSS of the driver; Ray workers' memory is not included), and the
corpus and embed stages' own times come from their stage records. Then a plan of ``--plan-draws`` over
``--plan-docs`` documents in Zipf-sized clusters is written memory-mapped, with its time and peak RSS.

    python benchmarks/scale/bench_scale.py --sizes 10000 30000 100000 --out runs/bench-scale
    python benchmarks/scale/bench_scale.py --sizes --plan-docs 100000000 --plan-draws 1000000000 --out runs/bench-scale
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from bench_pipeline import stage

from clusterclip.store import RunDir

PLAN = f"import sys\nsys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})\n" + """
import json, resource, sys, time
import numpy as np
from memwatch import AnonPeak
from clusterclip.plan import PlanConfig, build_plan
watch = AnonPeak(0.05)
n, draws, k, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rng = np.random.default_rng(0)
sizes = np.maximum(1, (n / np.arange(1, k + 1) ** 1.1 / np.sum(1 / np.arange(1, k + 1) ** 1.1))).astype(np.int64)
sizes[0] += n - sizes.sum()
labels = np.repeat(np.arange(k, dtype=np.int32), sizes)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
R = int(np.ceil(draws / n)) + 1
plan = build_plan(labels, PlanConfig(strategy="clusterclip", budget=draws, max_repeat=R, seed=0), out=out)
wall = time.perf_counter() - t0
print(json.dumps({"docs": n, "draws": len(plan.order), "k": k, "max_repeat": R, "seconds": wall,
                  "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                  "peak_anon_gib": watch.read() / 2**20, "rss_before_gib": before / 2**20}))
"""


def write_corpus(folder: Path, n: int, files: int, seed: int = 0) -> None:
    """``n`` synthetic documents in ``files`` JSONL shards, as pre-training corpora are shipped."""
    rng = np.random.default_rng(seed)
    topics = 40
    vocab = np.array([f"t{t}w{i}" for t in range(topics) for i in range(200)]).reshape(topics, 200)
    share = 1 / np.arange(1, topics + 1)
    topic = rng.choice(topics, size=n, p=share / share.sum())
    folder.mkdir(parents=True, exist_ok=True)
    bounds = np.linspace(0, n, files + 1).astype(int)
    for f in range(files):
        with open(folder / f"shard-{f:04d}.jsonl", "w") as fh:
            for i in range(bounds[f], bounds[f + 1]):
                words = vocab[topic[i], rng.integers(0, 200, 80)]
                fh.write(json.dumps({"id": int(i), "text": " ".join(words), "domain": f"topic{topic[i]}"}) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="*", default=[10_000, 30_000, 100_000])
    ap.add_argument("--engines", nargs="+", default=["local", "ray"])
    ap.add_argument("--embedder", default="hashing")
    ap.add_argument("--device", default="cpu", help="encoder device (cuda on a GPU machine, with --embedder minilm)")
    ap.add_argument("--files", type=int, default=8, help="JSONL shards each corpus is written as")
    ap.add_argument("--k", type=int, default=None, help="fixed K for every size (default: the CLI's sqrt(N/2))")
    ap.add_argument("--out", required=True)
    ap.add_argument("--plan-docs", type=int, default=0)
    ap.add_argument("--plan-draws", type=int, default=0)
    ap.add_argument("--plan-k", type=int, default=10_000)
    args = ap.parse_args()
    root = Path(args.out)
    root.mkdir(parents=True, exist_ok=True)
    if args.sizes:
        print("| N | engine | corpus s | embed s | corpus + embed command s | cluster s | plan s | docs/s (embed) "
              "| peak RSS MiB (max stage) |")
        print("|---|---|---|---|---|---|---|---|---|")
    for n in args.sizes:
        corpus = root / f"corpus-{n}-{args.files}"
        if not corpus.exists():
            write_corpus(corpus, n, args.files)
        for engine in args.engines:
            run = root / f"run-{n}-{engine}"
            shutil.rmtree(run, ignore_errors=True)
            extra = ["--engine", engine]
            k = ["--k", str(args.k)] if args.k else []
            rows = [stage("embed", ["embed", str(corpus), "--out", str(run), "--embedder", args.embedder,
                                    "--device", args.device, "--embed-shard-size", "16384", *extra]),
                    stage("cluster", ["cluster", str(run), *extra, *k]),
                    stage("plan", ["plan", str(run)])]
            seconds = {name: RunDir(run).record(name)["seconds"] for name in ("corpus", "embed")}
            print(f"| {n:,} | {engine} | {seconds['corpus']:.1f} | {seconds['embed']:.1f} | {rows[0]['seconds']:.1f} | "
                  f"{rows[1]['seconds']:.1f} | {rows[2]['seconds']:.1f} | {n / seconds['embed']:.0f} | "
                  f"{max(r['peak_rss_mib'] for r in rows):.0f} |", flush=True)
    if args.plan_docs:
        out = root / "plan-1e9.npy"
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", PLAN, str(args.plan_docs), str(args.plan_draws),
                               str(args.plan_k), str(out)], capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(proc.stderr[-3000:])
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        size = out.stat().st_size / 2**30
        print(f"\nplan: {res['draws']:,} draws over {res['docs']:,} documents in {res['k']:,} clusters "
              f"(clusterclip, max_repeat {res['max_repeat']}): {res['seconds']:.0f} s "
              f"({res['draws'] / res['seconds'] / 1e6:.1f} M draws/s), peak RSS {res['peak_rss_gib']:.2f} GiB, "
              f"of it anonymous (not the mapped plan file) {res['peak_anon_gib']:.2f} GiB "
              f"(labels alone {args.plan_docs * 4 / 2**30:.2f} GiB), plan file {size:.2f} GiB "
              f"[{time.perf_counter() - t0:.0f} s with setup]")
        out.unlink()
    print(f"\nbenchmark process peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
