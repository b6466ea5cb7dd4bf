"""The plan, the report and the export at 10^7 and 10^8 documents: time, and the memory of the driver and of
its workers.

    .venv/bin/python benchmarks/scale/bench_driver_stages.py --docs 10000000 100000000 --out runs/bench-driver-stages

For each size a synthetic run directory is written straight to disk (no embedding: the stages that hold
per-document state here are the plan, the report and the export; the corpus stage's duplicate-id check is
``bench_driver_state.py``): corpus parts of 10^6 documents in the corpus stage's layout (row groups of 2,048
rows; ``id`` ``s:<i>``, a text of about 27 bytes), their token counts, labels, cosines and sizes over
``--clusters`` Zipf-sized clusters, and the stage records.
Then, each its own process, as a user runs them: the plan (``clusterclip plan RUN --force``: ClusterClip, an
epoch of draws), ``clusterclip report RUN`` (its keyword pass reads every text) and ``clusterclip export RUN
--format parquet`` (``--memory-mb 1024``, so that both sizes go through the one-pass bucket export; one
worker per core). Memory is ``RssAnon`` (what a process allocated; mapped files left out), sampled every
0.2 s, for the driver alone and summed over it and its worker processes. ``inverse`` is what the export's
scatter held on the driver before the one-pass export was split into tasks (its count per document and the
plan's argsort), measured alone in a process of its own on the same plan. ``assign`` is the cluster stage's
per-document state: :func:`clusterclip.cluster.assign` into arrays of the recorded size and
:func:`~clusterclip.cluster.compact_labels`, on streamed random unit vectors (dim 16, K = 1,000), in a
process of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from clusterclip.corpus.limits import ROW_GROUP_ROWS
from clusterclip.store import RunDir, atomic_path, save_npy

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.records import write_record

PART = 1_000_000


def build(root: Path, n: int, clusters: int, seed: int = 0) -> RunDir:
    """The synthetic run directory of ``n`` documents (kept when it exists)."""
    run = RunDir(root)
    if run.record("cluster") is not None:
        return run
    rng = np.random.default_rng(seed)
    rels = []
    for p, a in enumerate(range(0, n, PART)):
        idx = np.arange(a, min(a + PART, n), dtype=np.int64)
        digits = idx.astype(str)
        table = pa.table({"index": idx, "id": np.char.add("s:", digits),
                          "text": np.char.add("synthetic document ", digits),
                          "n_tokens": np.full(idx.size, 3, np.int64), "group": pa.nulls(idx.size, pa.string())})
        rel = f"corpus/part-{p:05d}.parquet"
        with atomic_path(run.path(rel)) as tmp:
            pq.write_table(table, tmp, row_group_size=ROW_GROUP_ROWS)  # the corpus stage's layout
        rels.append(rel)
    save_npy(run.path("tokens.npy"), np.full(n, 3, np.int64))
    write_record(run, "corpus", {}, "synthetic", [*rels, "tokens.npy"], count=n, tokens=3 * n)
    sizes = 1.0 / np.arange(1, clusters + 1)
    labels = rng.choice(clusters, size=n, p=sizes / sizes.sum()).astype(np.int32)
    save_npy(run.path("labels.npy"), labels)
    save_npy(run.path("scores.npy"), rng.uniform(0.3, 0.9, n).astype(np.float32))
    save_npy(run.path("sizes.npy"), np.bincount(labels, minlength=clusters).astype(np.int64))
    del labels
    write_record(run, "cluster", {}, "synthetic", ["labels.npy", "scores.npy", "sizes.npy"], k=clusters)
    return run


def anon_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return next((int(line.split()[1]) for line in fh if line.startswith("RssAnon:")), 0)
    except OSError:
        return 0


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def watched(cmd: list[str]) -> dict:
    """Run ``cmd``; its wall time and the peak ``RssAnon`` of the process and of its whole tree (MiB)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    driver = tree = 0
    while proc.poll() is None:
        own = anon_kib(proc.pid)
        driver, tree = max(driver, own), max(tree, own + sum(anon_kib(c) for c in descendants(proc.pid)))
        time.sleep(0.2)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr.read()[-3000:]}")
    return {"seconds": round(time.perf_counter() - t0, 1), "driver_mib": round(driver / 1024),
            "tree_mib": round(tree / 1024)}


INVERSE = """
import sys, numpy as np
sys.path.insert(0, {memwatch_dir!r})
from memwatch import AnonPeak
w = AnonPeak(0.05)
order = np.load({plan!r}, mmap_mode="r", allow_pickle=False)
counts = np.bincount(order, minlength={n})
by_doc = np.argsort(order, kind="stable")
starts = np.concatenate([[0], np.cumsum(counts)])
print(w.read() // 1024)
"""


ASSIGN = """
import sys, time, numpy as np
sys.path.insert(0, {memwatch_dir!r})
from memwatch import AnonPeak
from clusterclip.cluster.kmeans import assign, compact_labels
w = AnonPeak(0.05)
rng = np.random.default_rng(0)
cents = rng.normal(size=(1000, 16)).astype(np.float32)
cents /= np.linalg.norm(cents, axis=1, keepdims=True)
def batches():
    for a in range(0, {n}, 65536):
        x = rng.normal(size=(min(65536, {n} - a), 16)).astype(np.float32)
        yield x / np.linalg.norm(x, axis=1, keepdims=True)
t0 = time.perf_counter()
labels, scores = assign(batches(), cents, {n})
labels, cents, sizes = compact_labels(labels, cents)
print(round(time.perf_counter() - t0, 1), w.read() // 1024)
"""


def one_size(n: int, out: Path, clusters: int, memory_mb: int) -> dict:
    root = out / f"run-{n}"
    t0 = time.perf_counter()
    run = build(root, n, clusters)
    row = {"docs": n, "build_s": round(time.perf_counter() - t0, 1)}
    cli = [sys.executable, "-m", "clusterclip"]
    row["plan"] = watched([*cli, "plan", str(root), "--force", "-q"])
    plan = next(run.path("plans").glob("*/plan.npy"))
    row["draws"] = int(np.load(plan, mmap_mode="r").shape[0])
    row["report"] = watched([*cli, "report", str(root), "--force", "-q"])
    export = out / f"export-{n}"
    row["export"] = watched([*cli, "export", str(root), "--plan", plan.parent.name, "--format", "parquet",
                             "--memory-mb", str(memory_mb), "--dest", str(export), "--force", "-q"])
    record = json.loads((export / "export.json").read_text())
    row["export"].update(buckets=record["buckets"], rows=record["rows"],
                         output_gib=round(sum(f.stat().st_size for f in export.glob("part-*")) / 2**30, 2))
    code = INVERSE.format(memwatch_dir=str(Path(__file__).resolve().parents[1]), plan=str(plan), n=n)
    row["inverse_mib"] = int(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                                            text=True).stdout.split()[-1])
    code = ASSIGN.format(memwatch_dir=str(Path(__file__).resolve().parents[1]), n=n)
    seconds, mib = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                                  text=True).stdout.split()[-2:]
    row["assign"] = {"seconds": float(seconds), "driver_mib": int(mib)}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, nargs="+", default=[10**7, 10**8])
    ap.add_argument("--clusters", type=int, default=10_000)
    ap.add_argument("--memory-mb", type=int, default=1024,
                    help="the export's --memory-mb (1,024: both sizes go through the one-pass bucket export)")
    ap.add_argument("--out", type=Path, default=Path("runs/bench-driver-stages"))
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    rows = []
    for n in args.docs:
        rows.append(one_size(n, args.out, args.clusters, args.memory_mb))
        print(json.dumps(rows[-1]), flush=True)
    print("\n| documents | cluster assign: s / MiB | plan: s / MiB | report: s / MiB | export parquet: s / driver MiB "
          "/ driver+workers MiB | buckets | output GiB | old scatter's inverse MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        c, p, q, e = r.get("assign", {}), r["plan"], r["report"], r["export"]
        print(f"| {r['docs']:,} | {c.get('seconds')} / {c.get('driver_mib')} | {p['seconds']} / {p['driver_mib']:,} | "
              f"{q['seconds']} / {q['driver_mib']:,} | {e['seconds']} / {e['driver_mib']:,} / {e['tree_mib']:,} | "
              f"{e['buckets']} | {e['output_gib']} | {r['inverse_mib']:,} |")


if __name__ == "__main__":
    main()
