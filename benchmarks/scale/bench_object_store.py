"""``clusterclip run`` with inputs and run directory in S3 against the same on disk, in one session (issue 45).

The corpus: ``bench_realistic``'s recombined minipile documents (``--docs``, default 10^5), written as ``--files``
``.jsonl.gz`` files. The S3 store is a moto server on 127.0.0.1 started here (the one the tests use): every byte
goes through HTTP to another process, as to a store on the network, but with no network latency, so the ratio
measures clusterclip's own cost of the store (streamed reads, the working copy, uploads, checksums), not a
network's. Each ``run`` is its own process (wall time and peak RSS, ``ru_maxrss``), default settings unless
``--embedder`` says otherwise; disk and S3 alternate ``--repeats`` times. The artifacts of both are checked to be
byte-identical.

    python benchmarks/scale/bench_object_store.py --out runs/bench-s3
    python benchmarks/scale/bench_object_store.py --out runs/bench-s3 --embedder hashing --repeats 2
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from bench_pipeline import stage
from bench_realistic import build_corpus

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.s3_server import start_s3_server

ARTIFACTS = ("tokens.npy", "labels.npy", "sizes.npy", "corpus/part-00000.parquet")


def gz_corpus(source: Path, out: Path, docs: int, files: int) -> list[Path]:
    """``files`` gzip-compressed JSONL files holding ``docs`` documents recombined from ``source`` in all."""
    plain = build_corpus(source, out / "plain", 1, docs)
    lines = plain[0].read_bytes().splitlines(keepends=True)
    paths = []
    for f in range(files):
        path = out / "gz" / f"corpus-{f:03d}.jsonl.gz"
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            with gzip.GzipFile(path, "wb", mtime=0) as fh:
                fh.writelines(lines[f::files])
        paths.append(path)
    return paths


def digests(read) -> dict[str, str]:
    return {rel: hashlib.sha256(read(rel)).hexdigest() for rel in ARTIFACTS}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--source", type=Path, default=Path("../shared/data/minipile.jsonl.gz"))
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--embedder", default=None, help="default: the run's default embedder")
    args = ap.parse_args()
    files = gz_corpus(args.source, args.out, args.docs, args.files)
    proc, endpoint = start_s3_server()
    os.environ.update({"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                       "AWS_DEFAULT_REGION": "us-east-1"})
    try:
        import s3fs

        fs = s3fs.S3FileSystem(skip_instance_cache=True)
        fs.mkdir("bench")
        for f in files:
            fs.put_file(str(f), f"bench/corpus/{f.name}")
        extra = ["--embedder", args.embedder] if args.embedder else []
        rows = []
        for r in range(args.repeats):
            disk = args.out / "run-disk"
            shutil.rmtree(disk, ignore_errors=True)
            rows.append({"where": "disk", "repeat": r,
                         **stage("run (disk)", ["run", *map(str, files), "--out", str(disk), *extra])})
            if fs.exists("bench/runs"):
                fs.rm("bench/runs", recursive=True)
            rows.append({"where": "s3", "repeat": r,
                         **stage("run (s3)", ["run", "s3://bench/corpus/*.jsonl.gz", "--out", "s3://bench/runs/r",
                                              *extra])})
        same = digests(lambda rel: (disk / rel).read_bytes()) == digests(lambda rel: fs.cat_file(f"bench/runs/r/{rel}"))
        stored = sum(fs.du("bench/runs/r", total=False).values()) if hasattr(fs, "du") else None
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    summary = {"docs": args.docs, "files": args.files, "embedder": args.embedder or "default", "rows": rows,
               "identical": same, "run_dir_bytes_s3": stored,
               "ratio": sum(r["seconds"] for r in rows if r["where"] == "s3")
               / sum(r["seconds"] for r in rows if r["where"] == "disk")}
    (args.out / f"result-{summary['embedder']}.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
