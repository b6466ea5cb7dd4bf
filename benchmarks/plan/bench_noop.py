"""Cost of a no-op re-run: ``clusterclip plan RUN ...`` when the plan is already built.

    .venv/bin/python benchmarks/plan/bench_noop.py                                      # this checkout
    PYTHONPATH=../before/src .venv/bin/python benchmarks/plan/bench_noop.py          # another checkout

Builds a run directory under ``--tmp`` (deleted afterwards unless ``--keep``): ``--docs`` labels in
``--k`` clusters and a ``cluster`` record (written with the checkout's own ``RunDir.write_record``), then
a plan of ``--draws`` draws (``uniform`` strategy) with the checkout's CLI. It then runs the same
``clusterclip plan`` command ``--repeats`` times, each in a fresh interpreter, and reports per run the
wall time of the child and the bytes it read: ``rchar`` (bytes returned by ``read()`` calls, page cache
included) and ``read_bytes`` (bytes fetched from storage) from the child's ``/proc/self/io``. ``warm``
runs find the artifacts in the page cache; before each ``cold`` run the run directory's files are
dropped from the page cache with ``posix_fadvise(DONTNEED)`` (only this benchmark's files; no root).
The checkout is whichever ``clusterclip`` is imported: set ``PYTHONPATH`` to compare another one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CHILD = """
import json, os, sys, time
t0 = time.perf_counter()
from clusterclip.cli.main import main
code = main(sys.argv[1:])
seconds = time.perf_counter() - t0
io = dict(line.split(": ") for line in open("/proc/self/io").read().splitlines())
with open(os.environ["BENCH_NOOP_OUT"], "w") as fh:
    json.dump({"code": code, "main_seconds": seconds, "rchar": int(io["rchar"]),
               "read_bytes": int(io["read_bytes"])}, fh)
"""


def build_run(run_dir: Path, docs: int, k: int, seed: int) -> None:
    """Labels of ``docs`` documents in ``k`` clusters and the cluster record that marks them finished."""
    from clusterclip.store import RunDir, save_npy

    labels = np.random.default_rng(seed).integers(0, k, docs).astype(np.int32)
    run = RunDir(run_dir)
    save_npy(run.path("labels.npy"), labels)
    save_npy(run.path("sizes.npy"), np.bincount(labels, minlength=k).astype(np.int64))
    run.write_record("cluster", {"bench": "noop", "k": k}, "bench-noop", ["labels.npy", "sizes.npy"], 0.0, k=k)


def drop_page_cache(run_dir: Path) -> None:
    """Evict the run directory's files from the page cache, so the next reader goes to storage."""
    for p in run_dir.rglob("*"):
        if p.is_file():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def run_cli(argv: list[str]) -> dict[str, float]:
    """Run ``clusterclip ARGV`` in a fresh interpreter: its exit code, wall time and bytes read."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        env = {**os.environ, "BENCH_NOOP_OUT": out.name, "HF_HUB_OFFLINE": "1"}
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", CHILD, *argv], env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"clusterclip {' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
        result = json.loads(Path(out.name).read_text())
    return {**result, "wall_seconds": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draws", type=int, default=10**9, help="draws of the plan")
    ap.add_argument("--docs", type=int, default=10**6, help="documents (labels)")
    ap.add_argument("--k", type=int, default=1000, help="clusters")
    ap.add_argument("--repeats", type=int, default=3, help="no-op runs, warm and cold each")
    ap.add_argument("--tmp", default="/tmp", help="folder for the run directory")
    ap.add_argument("--keep", action="store_true", help="keep the run directory")
    args = ap.parse_args()

    import clusterclip

    src = Path(clusterclip.__file__).resolve().parent.parent
    run_dir = Path(tempfile.mkdtemp(prefix="bench-noop-", dir=args.tmp))
    argv = ["plan", str(run_dir), "--strategy", "uniform", "--budget", str(args.draws), "-q"]
    print(f"clusterclip from {src}; {platform.python_version()}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}; run directory {run_dir}", flush=True)
    try:
        build_run(run_dir, args.docs, args.k, seed=0)
        built = run_cli(argv)
        size = sum(p.stat().st_size for p in run_dir.rglob("*") if p.is_file())
        print(f"build: {built['wall_seconds']:.1f} s, run directory {size / 2**30:.2f} GiB", flush=True)
        for mode in ("warm", "cold"):
            for _ in range(args.repeats):
                if mode == "cold":
                    drop_page_cache(run_dir)
                r = run_cli(argv)
                print(f"no-op {mode}: {r['wall_seconds']:.2f} s (main {r['main_seconds']:.2f} s), "
                      f"rchar {r['rchar'] / 2**20:,.1f} MiB, read_bytes {r['read_bytes'] / 2**20:,.1f} MiB",
                      flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
