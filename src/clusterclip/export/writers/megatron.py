"""``--format megatron``: ``data.bin`` / ``data.idx`` (read by megatron-core's ``IndexedDataset``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from clusterclip.export.writers.base import Writer, missing, token_rows


class MegatronWriter(Writer):
    """``data.bin`` / ``data.idx`` by megatron-core's ``IndexedDatasetBuilder``: one document per row (a planned
    document, or a packed sample with ``--seq-len``), in stream order. Token ids only. ``prefix`` names the
    pair (``--blend`` writes one per cluster)."""

    name = "megatron"
    SUMMARY = "Megatron .bin/.idx"
    TOKENS_ONLY = True
    FIRST_COLUMN_ONLY = True
    BLEND_SOURCES = True

    PREFIX = "data"

    def __init__(self, folder: Path, token_dtype: np.dtype, meta: dict[str, Any] | None = None,
                 prefix: str = PREFIX) -> None:
        super().__init__(folder, token_dtype, meta)
        self.prefix = prefix
        try:
            from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
        except ImportError as exc:
            raise missing("megatron", "megatron-core", exc) from exc
        self.builder = IndexedDatasetBuilder(str(folder / f"{prefix}.bin"), dtype=token_dtype.type)

    def write(self, batch: pa.Table) -> None:
        for ids in token_rows(batch.column("tokens")):
            self.builder.add_document(np.asarray(ids), [int(ids.size)])
        self.batches += 1

    def close(self) -> None:
        self.builder.finalize(str(self.folder / f"{self.prefix}.idx"))
