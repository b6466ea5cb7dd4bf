"""``--format jsonl``: one JSON object per row, written with the standard library."""

from __future__ import annotations

import json

import pyarrow as pa

from clusterclip.export.contract import export_shard
from clusterclip.export.writers.base import ShardWriter, create


class JsonlWriter(ShardWriter):
    """``part-00000.jsonl``: one JSON object per row, one file per batch (a shard)."""

    name = "jsonl"
    SUMMARY = "JSON lines"

    def write(self, batch: pa.Table) -> None:
        with create(self.folder / export_shard(self.batches, "jsonl"), "w") as fh:
            for rec in batch.to_pylist():
                fh.write(json.dumps(rec, ensure_ascii=False))
                fh.write("\n")
        self.batches += 1
