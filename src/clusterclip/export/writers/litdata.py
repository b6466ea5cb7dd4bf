"""``--format litdata``: litdata chunks and ``index.json`` (read by ``litdata.StreamingDataset``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from clusterclip.contract.export import META_KEY
from clusterclip.export.writers.base import Writer, add_json_key, missing, plain_rows


class LitdataWriter(Writer):
    """litdata chunks (``chunk-0-0.bin`` ...) and ``index.json``, written by ``litdata``'s ``BinaryWriter``."""

    name = "litdata"
    METADATA = "index.json"
    SUMMARY = "litdata chunks"

    def __init__(self, folder: Path, token_dtype: np.dtype, meta: dict[str, Any] | None = None) -> None:
        super().__init__(folder, token_dtype, meta)
        try:
            from litdata.streaming.writer import BinaryWriter
        except ImportError as exc:
            raise missing("litdata", "litdata", exc) from exc
        self.writer = BinaryWriter(str(folder), chunk_bytes="64MB")
        self.items = 0

    def write(self, batch: pa.Table) -> None:
        for row in plain_rows(batch):
            self.writer.add_item(self.items, row)
            self.items += 1
        self.batches += 1

    def close(self) -> None:
        self.writer.done()
        self.writer.merge()
        if self.meta:
            add_json_key(self.folder / self.METADATA, META_KEY, self.meta)
