"""``--format jsonl``: one JSON object per row, written with the standard library."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from clusterclip.contract.export import export_shard
from clusterclip.export.records import RECORD, json_rows
from clusterclip.export.writers.base import ShardWriter, create


class JsonlWriter(ShardWriter):
    """``part-00000.jsonl``: one JSON object per row, one file per batch (a shard); with ``--keep-record``, each
    record's own fields (as they were read) and then the export's (``record_fields``: every record field seen)."""

    name = "jsonl"
    SUMMARY = "JSON lines"
    RECORDS = "json"

    def __init__(self, folder: Path, token_dtype: np.dtype, meta: dict[str, Any] | None = None) -> None:
        super().__init__(folder, token_dtype, meta)
        self.record_fields: list[str] = []

    def write(self, batch: pa.Table) -> None:
        seen = dict.fromkeys(self.record_fields)
        rows = json_rows(batch, seen) if RECORD in batch.column_names else batch.to_pylist()
        with create(self.folder / export_shard(self.batches, "jsonl"), "w") as fh:
            for rec in rows:
                fh.write(json.dumps(rec, ensure_ascii=False))
                fh.write("\n")
        self.record_fields = list(seen)
        self.batches += 1
