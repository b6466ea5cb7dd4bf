"""Export a plan as the training stream itself: JSONL or Parquet shards of (text, id, index, cluster).

The corpus texts are read once into an Arrow table holding only the ``id`` and ``text`` columns, and
each shard is gathered from it with ``Table.take``. Memory is therefore about the size of the corpus
text plus one shard, independent of the plan length (a plan may repeat documents many times). For
corpora larger than RAM, train from the plan with ``clusterclip.torch.ClusterClipSampler`` over a
map-style dataset instead of exporting. Every shard is written to a temporary file and renamed into
place; ``export.json`` (written last) lists the shards.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from clusterclip.errors import ClusterClipError
from clusterclip.rundir import RunDir, StaleArtifactError, atomic_path, atomic_write, load_npy, save_json

FORMATS = ("jsonl", "parquet")


def _read_corpus(run: RunDir) -> pa.Table:
    parts = sorted(run.path("corpus").glob("part-*.parquet"))
    if not parts:
        raise StaleArtifactError(f"{run.path('corpus')}: no part-*.parquet files; re-run the corpus stage")
    tables = [pq.read_table(p, columns=["index", "id", "text"]) for p in parts]
    table = pa.concat_tables(tables)
    index = table.column("index").to_numpy()
    if not np.array_equal(index, np.arange(table.num_rows)):
        raise StaleArtifactError(f"{run.path('corpus')}: rows are not in index order 0..{table.num_rows - 1}; "
                                 "re-run the corpus stage")
    return table.drop_columns(["index"])


def export_plan(run: RunDir | str | os.PathLike[str], plan_name: str | None, out_dir: str | os.PathLike[str],
                fmt: str = "jsonl", shard_size: int = 100_000) -> list[Path]:
    """Write the planned stream of ``plans/<plan_name>`` (the only plan when None) into ``out_dir``.

    Rows follow the plan order (repeats expanded) with columns ``text, id, index, cluster``; shards
    are ``part-00000.jsonl`` (or ``.parquet``) of ``shard_size`` rows, listed in ``out_dir/export.json``.
    Returns the shard paths.
    """
    from clusterclip.torch import load_plan, resolve_plan_path

    if fmt not in FORMATS:
        raise ClusterClipError(f"unknown export format {fmt!r}; choose 'jsonl' or 'parquet'")
    if not isinstance(shard_size, int) or shard_size < 1:
        raise ClusterClipError(f"shard_size must be an integer >= 1, got {shard_size!r}")
    run = run if isinstance(run, RunDir) else RunDir(run)
    t0 = time.perf_counter()
    plan_path = resolve_plan_path(run.root, plan_name) if plan_name else resolve_plan_path(run.root)
    name = plan_path.parent.name
    run.require(f"plans/{name}/plan")
    run.require("corpus", verify=False)
    order = load_plan(plan_path)
    table = _read_corpus(run)
    n = table.num_rows
    if order.size and int(np.max(order)) >= n:
        raise StaleArtifactError(f"plan {name} refers to document {int(np.max(order))} but the corpus has {n}; "
                                 "re-run the plan stage")
    labels = load_npy(run.path("labels.npy"), mmap=True) if run.path("labels.npy").exists() else None

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    shards = []
    for i, s in enumerate(range(0, order.shape[0], shard_size)):
        idx = np.asarray(order[s:s + shard_size], dtype=np.int64)
        rows = table.take(pa.array(idx))
        cluster = pa.array(np.asarray(labels[idx], dtype=np.int64)) if labels is not None else pa.nulls(idx.size,
                                                                                                          pa.int64())
        shard = pa.table({"text": rows.column("text"), "id": rows.column("id"), "index": pa.array(idx),
                          "cluster": cluster})
        fname = f"part-{i:05d}.{fmt}"
        if fmt == "parquet":
            with atomic_path(out / fname) as tmp:
                pq.write_table(shard, tmp)
        else:
            with atomic_write(out / fname, "w") as fh:
                for rec in shard.to_pylist():
                    fh.write(json.dumps(rec, ensure_ascii=False))
                    fh.write("\n")
        shards.append({"file": fname, "rows": int(idx.size)})
    stale = re.compile(rf"part-(\d+)\.{fmt}$")
    for p in out.iterdir():
        m = stale.match(p.name)
        if m and int(m.group(1)) >= len(shards):
            p.unlink()
    manifest = {"plan": name, "run_dir": str(run.root), "format": fmt, "rows": int(order.shape[0]),
                "columns": ["text", "id", "index", "cluster"], "shard_size": shard_size, "shards": shards,
                "seconds": round(time.perf_counter() - t0, 3)}
    save_json(out / "export.json", manifest)
    return [out / sh["file"] for sh in shards]
