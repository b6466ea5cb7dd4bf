"""``--format parquet``: one Parquet file per batch, written by pyarrow."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from clusterclip.contract.export import META_KEY, SCHEMA_METADATA, export_shard
from clusterclip.export.writers.base import ShardWriter, create


class ParquetWriter(ShardWriter):
    """``part-00000.parquet``: one file per batch (a shard)."""

    name = "parquet"
    SUMMARY = "Parquet shards"
    RECORDS = "typed"
    METADATA = SCHEMA_METADATA

    def write(self, batch: pa.Table) -> None:
        if self.meta:
            batch = batch.replace_schema_metadata({**(batch.schema.metadata or {}),
                                                   META_KEY.encode(): json.dumps(self.meta).encode()})
        with create(self.folder / export_shard(self.batches, "parquet")) as fh:
            pq.write_table(batch, fh)
        self.batches += 1
