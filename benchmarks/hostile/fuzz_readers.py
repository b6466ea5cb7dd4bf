"""Corpus-mutation fuzzing of the readers: counts of cases tried and their outcomes.

Every case writes one mutated input and reads it twice (``--on-bad-record error`` and ``skip``). A
case passes when reading returns documents or raises a one-line ``ClusterClipError`` that names the
file; any other exception is a *crash* and a case over the time limit a *hang*.

    python benchmarks/hostile/fuzz_readers.py [--cases 300] [--seed 0]
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import signal
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from clusterclip.corpus.inputs import expand_inputs
from clusterclip.corpus.reading import iter_documents
from clusterclip.corpus.records import ReadOptions, ReadStats
from clusterclip.errors import ClusterClipError


def payload(rng: np.random.Generator, n: int) -> list[dict]:
    words = ["alpha", "beta", "gamma", "delta", "über", "naïve", "日本", "🙂"]
    return [{"id": int(i), "text": " ".join(rng.choice(words, 12)), "domain": "d"} for i in range(n)]


def jsonl_bytes(records: list) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()


def mutate(rng: np.random.Generator, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(int(rng.integers(1, 6))):
        op = rng.integers(4)
        pos = int(rng.integers(max(1, len(buf))))
        if op == 0:
            buf[pos:pos + 1] = bytes([int(rng.integers(256))])
        elif op == 1:
            del buf[pos:pos + int(rng.integers(1, 20))]
        elif op == 2:
            buf[pos:pos] = rng.bytes(int(rng.integers(1, 20)))
        else:
            buf = buf[:pos]
    return bytes(buf)


def make_case(rng: np.random.Generator, kind: str, root: Path) -> Path:
    records = payload(rng, int(rng.integers(1, 200)))
    if kind == "jsonl-bytes":
        path = root / "case.jsonl"
        path.write_bytes(mutate(rng, jsonl_bytes(records)))
    elif kind == "jsonl-values":
        path = root / "case.jsonl"
        odd = [None, 3, "", "   ", ["text"], {"nested": 1}, 2.5, True]
        for r in records:
            if rng.random() < 0.2:
                r["text"] = odd[int(rng.integers(len(odd)))]
            if rng.random() < 0.05:
                del r["text"]
        lines = [json.dumps(r) if rng.random() > 0.05 else json.dumps([1, 2]) for r in records]
        path.write_text("\n".join(lines) + "\n")
    elif kind in ("gzip", "zstd"):
        raw = jsonl_bytes(records)
        comp = gzip.compress(raw) if kind == "gzip" else zstandard.ZstdCompressor().compress(raw)
        path = root / f"case.jsonl.{'gz' if kind == 'gzip' else 'zst'}"
        path.write_bytes(mutate(rng, comp))
    elif kind == "parquet-schema":
        path = root / "case.parquet"
        variants = [pa.table({"body": ["x"] * 3}), pa.table({"text": [1, 2, 3]}),
                    pa.table({"text": ["a", None, " "]}), pa.table({"text": [["a"], ["b"]]}),
                    pa.Table.from_pylist(records)]
        pq.write_table(variants[int(rng.integers(len(variants)))], path)
    else:
        path = root / "case.parquet"
        pq.write_table(pa.Table.from_pylist(records), path)
        path.write_bytes(mutate(rng, path.read_bytes()))
    return path


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang


def run_case(path: Path, policy: str, limit: int) -> str:
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(limit)
    try:
        stats = ReadStats()
        for _ in iter_documents(expand_inputs([path]), ReadOptions(on_bad_record=policy), stats):
            pass
        return "skipped some" if stats.skipped else "read"
    except ClusterClipError as exc:
        clear = str(exc).startswith(str(path)) and "\n" not in str(exc)
        return "clear error" if clear else "unclear error"
    except Hang:
        return "hang"
    except Exception as exc:
        return f"crash: {type(exc).__name__}"
    finally:
        signal.alarm(0)


KINDS = ("jsonl-bytes", "jsonl-values", "gzip", "zstd", "parquet-schema", "parquet-bytes")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=300, help="cases per input kind")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit", type=int, default=20, help="seconds before a case counts as a hang")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    table: dict[str, collections.Counter] = {}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for kind in KINDS:
            counts: collections.Counter = collections.Counter()
            for _ in range(args.cases):
                path = make_case(rng, kind, Path(tmp))
                for policy in ("error", "skip"):
                    counts[f"{policy}: {run_case(path, policy, args.limit)}"] += 1
                path.unlink()
            table[kind] = counts
    columns = sorted({c for counts in table.values() for c in counts})
    print(f"{args.cases} cases per kind, each read with --on-bad-record error and skip "
          f"({time.perf_counter() - t0:.0f}s)\n")
    print("| input kind | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for kind, counts in table.items():
        print(f"| {kind} | " + " | ".join(str(counts.get(c, 0)) for c in columns) + " |")
    bad = sum(v for counts in table.values() for k, v in counts.items() if "crash" in k or "hang" in k
              or "unclear" in k)
    print(f"\ncrashes, hangs or unclear errors: {bad}")


if __name__ == "__main__":
    main()
