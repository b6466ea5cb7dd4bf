"""The corpus stage's duplicate-id check on the driver: id hashes in memory against spilled to scratch files.

    .venv/bin/python benchmarks/scale/bench_driver_state.py --docs 100000000 --out runs/bench-driver

Synthetic 64-bit id hashes (0.1 % of them repeats) arrive in reader batches of ``--batch`` documents, as the
corpus reader produces them. ``memory``: every hash kept, then counted with ``np.unique`` (what the stage did
before); ``spill``: :class:`clusterclip.corpus.id_spill.IdSpill`, the stage's check now. Each runs in its own
process; the table gives wall time, peak anonymous memory (``RssAnon``: what the process allocated) and the
scratch bytes, and both must report the same number of repeats.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

MEMWATCH = Path(__file__).resolve().parents[1]


def batches(n: int, batch: int, seed: int = 0):
    """Reader-sized batches of id hashes with one repeat per 1,000 documents (of an earlier document)."""
    rng = np.random.default_rng(seed)
    for a in range(0, n, batch):
        h = rng.integers(0, 2**64, size=min(batch, n - a), dtype=np.uint64)
        rep = np.flatnonzero(rng.random(h.size) < 1e-3)
        h[rep] = h[rep // 2]  # an earlier document of the same batch
        yield a, h


def run_one(mode: str, n: int, batch: int, scratch: Path) -> dict:
    sys.path.insert(0, str(MEMWATCH))
    from memwatch import AnonPeak

    from clusterclip.corpus.id_spill import IdSpill

    watch = AnonPeak(0.05)
    t0 = time.perf_counter()
    scratch_bytes = 0
    if mode == "memory":
        kept = [h for _, h in batches(n, batch)]
        hashes = np.concatenate(kept)
        del kept
        repeats = int(hashes.size - np.unique(hashes).size)
    else:
        spill = IdSpill(scratch / "ids")
        for a, h in batches(n, batch):
            spill.add(h, a)
        spill.flush()
        scratch_bytes = sum(p.stat().st_size for p in (scratch / "ids").glob("*"))
        repeats = spill.duplicates()[0]
    return {"mode": mode, "docs": n, "seconds": round(time.perf_counter() - t0, 1),
            "peak_rss_anon_mib": round(watch.read() / 1024, 1), "scratch_mib": round(scratch_bytes / 2**20, 1),
            "repeats": repeats}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, nargs="+", default=[10**7, 10**8])
    ap.add_argument("--batch", type=int, default=65_536)
    ap.add_argument("--out", type=Path, default=Path("runs/bench-driver"))
    ap.add_argument("--one", nargs=2, metavar=("MODE", "DOCS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        args.out.mkdir(parents=True, exist_ok=True)
        print(json.dumps(run_one(args.one[0], int(args.one[1]), args.batch, args.out)))
        return
    rows = []
    for n in args.docs:
        for mode in ("memory", "spill"):
            out = subprocess.run([sys.executable, __file__, "--one", mode, str(n), "--batch", str(args.batch),
                                  "--out", str(args.out)], check=True, capture_output=True, text=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
            print(rows[-1], flush=True)
    print("\n| documents | id hashes | seconds | peak RssAnon (MiB) | scratch (MiB) | repeats |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['docs']:,} | {r['mode']} | {r['seconds']} | {r['peak_rss_anon_mib']:,} | {r['scratch_mib']:,} | "
              f"{r['repeats']:,} |")


if __name__ == "__main__":
    main()
