"""Export of one window holding more than 2 GiB of text (more than one Arrow ``string`` array holds).

    python benchmarks/export/bench_export_large.py --docs 2600 --doc-bytes 1000000

Builds a run of ``--docs`` documents of about ``--doc-bytes`` characters each (compressible words, so the
corpus parts stay small on disk), a ClusterClip plan over them, and exports it to Parquet with default
settings (``--memory-mb 4096``: the whole corpus is one window). Checks that every planned row arrived in
plan order and prints the time and the peak RSS of the export process against the text it held.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from clusterclip.plan import PlanConfig
from clusterclip.plan.stage import plan_stage
from clusterclip.store import RunDir, atomic_path, save_npy

WORDS = np.array(["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"])


def build_run(root: Path, n: int, doc_bytes: int, parts: int = 4) -> tuple[RunDir, str, int]:
    """A run directory written directly (corpus parts, tokens, labels, one plan); its plan and text bytes."""
    run = RunDir(root)
    rng = np.random.default_rng(0)
    bounds = np.linspace(0, n, parts + 1).astype(int)
    rels, text_bytes = [], 0
    for p in range(parts):
        idx = np.arange(bounds[p], bounds[p + 1])
        texts = [f"doc {i} " + " ".join(WORDS[rng.integers(0, WORDS.size, doc_bytes // 6)]) for i in idx]
        text_bytes += sum(map(len, texts))
        table = pa.table({"index": pa.array(idx, pa.int64()), "id": [f"d{i}" for i in idx], "text": texts,
                          "n_tokens": pa.array(np.full(idx.size, doc_bytes // 6), pa.int64()),
                          "group": pa.nulls(idx.size, pa.string())})
        rel = f"corpus/part-{p:05d}.parquet"
        with atomic_path(run.path(rel)) as tmp:
            pq.write_table(table, tmp, row_group_size=64)
        rels.append(rel)
    save_npy(run.path("tokens.npy"), np.full(n, doc_bytes // 6, dtype=np.int64))
    run.write_record("corpus", {}, "c", [*rels, "tokens.npy"], 0.0)
    save_npy(run.path("labels.npy"), rng.integers(0, 4, n).astype(np.int32))
    run.write_record("cluster", {}, "x", ["labels.npy"], 0.0)
    cfg = PlanConfig(seed=1)
    plan_stage(run, cfg)
    return run, cfg.name(), text_bytes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--docs", type=int, default=2600)
    p.add_argument("--doc-bytes", type=int, default=1_000_000)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run, plan, text_bytes = build_run(Path(tmp) / "run", a.docs, a.doc_bytes)
        out = Path(tmp) / "out"
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "clusterclip", "export", str(run.root), "--plan", plan,
                        "--format", "parquet", "--dest", str(out), "-q"], check=True)
        seconds = time.perf_counter() - t0
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        order = np.load(run.path("plans", plan, "plan.npy"))
        got = np.concatenate([pq.read_table(f, columns=["index"]).column("index").to_numpy()
                              for f in sorted(out.glob("part-*.parquet"))])
        assert np.array_equal(got, order), "the export is not the plan in order"
        print(f"{a.docs:,} documents, {text_bytes / 2**30:.2f} GiB of text in one window, {order.size:,} planned rows: "
              f"export parquet {seconds:.0f} s, peak RSS {peak / 2**30:.2f} GiB ({peak / text_bytes:.1f}x the text); "
              "every row in plan order")


if __name__ == "__main__":
    main()
