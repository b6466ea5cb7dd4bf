"""The Ray engine on a corpus part over 128 MiB, where Ray Data's parquet reader returns blocks out of order.

    python benchmarks/scale/ray_large_part.py --docs 52000 --words 450

Writes a JSONL corpus of ``--docs`` documents of ``--words`` distinct-looking words (a part of 50,000
documents then holds about 230 MB), embeds it with ``--embedder hashing`` on the local engine and on Ray,
and compares the embedding shards byte for byte.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--docs", type=int, default=52_000)
    p.add_argument("--words", type=int, default=450)
    a = p.parse_args()
    rng = np.random.default_rng(1)
    vocab = np.array([f"w{i}x{i * 7919 % 100003}" for i in range(200_000)])
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "c.jsonl"
        with open(corpus, "w") as f:
            for _ in range(a.docs):
                f.write(json.dumps({"text": " ".join(vocab[rng.integers(0, vocab.size, a.words)])}) + "\n")
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        for engine in ("local", "ray"):
            subprocess.run([sys.executable, "-m", "clusterclip", "embed", str(corpus), "--out", f"{tmp}/{engine}",
                            "--embedder", "hashing", "--engine", engine, "-q"], check=True, env=env,
                           stderr=subprocess.DEVNULL)
        sizes = [f"{q.stat().st_size / 2**20:.0f} MiB" for q in sorted(Path(tmp, "local", "corpus").glob("*.parquet"))]
        shards = sorted(Path(tmp, "local", "embeddings").glob("shard-*.npy"))
        same = all(s.read_bytes() == Path(tmp, "ray", "embeddings", s.name).read_bytes() for s in shards)
        print(f"{a.docs:,} documents, corpus parts of {', '.join(sizes)}: {len(shards)} embedding shards, "
              f"ray {'identical to' if same else 'DIFFERENT from'} local")


if __name__ == "__main__":
    main()
