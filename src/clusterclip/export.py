"""Export a plan as the training stream itself: JSONL or Parquet shards of (text, id, index, cluster).

The plan is cut into windows of whole shards whose documents' text fits ``memory_mb`` (estimated from
the corpus parts' metadata). For each window the distinct documents it draws are read from the corpus,
only the row groups that hold them, and its shards are gathered from them with ``Table.take``. A
corpus whose text fits the limit is therefore read once; a larger one once per window, so memory stays
bounded by the limit plus one corpus part, whatever the corpus size and plan length. (For very large
corpora, training from the plan with ``clusterclip.torch.ClusterClipSampler`` over a map-style dataset
avoids the copy altogether.) Every shard is written to a temporary file and renamed into place;
``export.json`` (written last) lists the shards.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from clusterclip import artifacts as A
from clusterclip.errors import ClusterClipError
from clusterclip.rundir import RunDir, StaleArtifactError, atomic_path, atomic_write, save_json

FORMATS = ("jsonl", "parquet")


class _CorpusIndex:
    """Where each document lives: the corpus parts with their row groups' first rows, from metadata."""

    def __init__(self, run: RunDir) -> None:
        from clusterclip.corpus import corpus_parts, open_parquet

        self.parts = corpus_parts(run)
        if not self.parts:
            raise StaleArtifactError(f"{run.path(A.CORPUS_DIR)}: no {A.CORPUS_PART_GLOB} files; re-run the corpus "
                                     "stage")
        run.require(A.CORPUS_STAGE, only=[p.relative_to(run.root).as_posix() for p in self.parts])
        self.files = [open_parquet(p) for p in self.parts]
        self.rg_starts: list[np.ndarray] = []
        self.text_bytes = 0
        start = 0
        for pf in self.files:
            md = pf.metadata
            names = pf.schema_arrow.names
            cols = [names.index(c) for c in ("id", "text")]
            rows = [md.row_group(g).num_rows for g in range(md.num_row_groups)]
            self.rg_starts.append(start + np.concatenate([[0], np.cumsum(rows)]).astype(np.int64))
            self.text_bytes += sum(md.row_group(g).column(c).total_uncompressed_size
                                   for g in range(md.num_row_groups) for c in cols)
            start += sum(rows)
        self.n = start

    def gather(self, docs: np.ndarray) -> pa.Table:
        """``id`` and ``text`` of ``docs`` (sorted, distinct indices), reading only the row groups holding them."""
        tables = []
        for pf, starts in zip(self.files, self.rg_starts, strict=True):
            lo, hi = np.searchsorted(docs, [starts[0], starts[-1]])
            if lo == hi:
                continue
            mine = docs[lo:hi]
            rg = np.searchsorted(starts, mine, side="right") - 1
            groups = np.unique(rg)
            sizes = starts[groups + 1] - starts[groups]
            first = np.zeros(len(starts) - 1, np.int64)
            first[groups] = np.concatenate([[0], np.cumsum(sizes)[:-1]])
            table = pf.read_row_groups(groups.tolist(), columns=["index", "id", "text"])
            rows = table.take(pa.array(first[rg] + mine - starts[rg]))
            if not np.array_equal(rows.column("index").to_numpy(), mine):
                raise StaleArtifactError(f"{self.parts[0].parent}: rows are not in index order; re-run the corpus "
                                         "stage")
            tables.append(rows.drop_columns(["index"]))
        return pa.concat_tables(tables)


def export_plan(run: RunDir | str | os.PathLike[str], plan_name: str | None, out_dir: str | os.PathLike[str],
                fmt: str = "jsonl", shard_size: int = 100_000, memory_mb: int = 4096) -> list[Path]:
    """Write the planned stream of ``plans/<plan_name>`` (the only plan when None) into ``out_dir``.

    Rows follow the plan order (repeats expanded) with columns ``text, id, index, cluster``; shards
    are ``part-00000.jsonl`` (or ``.parquet``) of ``shard_size`` rows, listed in ``out_dir/export.json``.
    ``memory_mb`` bounds the corpus text held at once (see the module docstring). Returns the shard paths.
    """
    from clusterclip.cluster import load_labels
    from clusterclip.torch import load_plan, resolve_plan_path

    if fmt not in FORMATS:
        raise ClusterClipError(f"unknown export format {fmt!r}; choose 'jsonl' or 'parquet'")
    if not isinstance(shard_size, int) or shard_size < 1:
        raise ClusterClipError(f"shard_size must be an integer >= 1, got {shard_size!r}")
    if not isinstance(memory_mb, int) or memory_mb < 1:
        raise ClusterClipError(f"memory_mb must be an integer >= 1, got {memory_mb!r}")
    run = run if isinstance(run, RunDir) else RunDir(run)
    t0 = time.perf_counter()
    plan_path = resolve_plan_path(run.root, plan_name) if plan_name else resolve_plan_path(run.root)
    name = plan_path.parent.name
    run.require(A.plan_stage_name(name))
    order = load_plan(plan_path)
    corpus = _CorpusIndex(run)
    n = corpus.n
    if order.size and int(np.max(order)) >= n:
        raise StaleArtifactError(f"plan {name} refers to document {int(np.max(order))} but the corpus has {n}; "
                                 "re-run the plan stage")
    labels = load_labels(run, mmap=True) if run.record(A.CLUSTER_STAGE) is not None else None

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    shards: list[dict[str, Any]] = []
    limit = memory_mb * 2**20
    if corpus.text_bytes <= limit:
        window = max(order.shape[0], 1)
    else:
        window = max(1, int(limit / (corpus.text_bytes / n)) // shard_size) * shard_size
    windows = 0
    for w in range(0, order.shape[0], window):
        block = np.asarray(order[w:w + window], dtype=np.int64)
        docs, where = np.unique(block, return_inverse=True)
        texts = corpus.gather(docs)
        windows += 1
        for s in range(0, block.size, shard_size):
            shards.append(_write_shard(out, len(shards), fmt, block[s:s + shard_size],
                                       texts.take(pa.array(where[s:s + shard_size])), labels))
    stale = re.compile(A.EXPORT_SHARD_RE)
    for p in out.iterdir():
        m = stale.match(p.name)
        if m and m.group(2) == fmt and int(m.group(1)) >= len(shards):
            p.unlink()
    manifest = {"plan": name, "run_dir": str(run.root), "format": fmt, "rows": int(order.shape[0]),
                "columns": ["text", "id", "index", "cluster"], "shard_size": shard_size, "shards": shards,
                "memory_mb": memory_mb, "corpus_reads": windows, "seconds": round(time.perf_counter() - t0, 3)}
    save_json(out / A.EXPORT_MANIFEST, manifest)
    return [out / sh["file"] for sh in shards]


def _write_shard(out: Path, i: int, fmt: str, idx: np.ndarray, rows: pa.Table,
                 labels: np.ndarray | None) -> dict[str, Any]:
    cluster = (pa.array(np.asarray(labels[idx], dtype=np.int64)) if labels is not None
               else pa.nulls(idx.size, pa.int64()))
    shard = pa.table({"text": rows.column("text"), "id": rows.column("id"), "index": pa.array(idx),
                      "cluster": cluster})
    fname = A.export_shard(i, fmt)
    if fmt == "parquet":
        with atomic_path(out / fname) as tmp:
            pq.write_table(shard, tmp)
    else:
        with atomic_write(out / fname, "w") as fh:
            for rec in shard.to_pylist():
                fh.write(json.dumps(rec, ensure_ascii=False))
                fh.write("\n")
    return {"file": fname, "rows": int(idx.size)}
