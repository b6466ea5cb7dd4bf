"""``--format megatron``: ``data.bin`` / ``data.idx`` (read by megatron-core's ``IndexedDataset``)."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from clusterclip.export.chat import LOSS_MASK
from clusterclip.export.writers.base import Writer, missing, token_rows

MEGATRON_NOISE = "Transformer Engine and Apex are not installed"
"""The start of the ``UserWarning`` megatron-core prints for each of its optimizer modules on import; an export
and a dataset use neither."""


@contextlib.contextmanager
def megatron_imports() -> Iterator[None]:
    """Around an import of megatron-core: its warnings about Transformer Engine and Apex are not shown."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=MEGATRON_NOISE, category=UserWarning)
        yield


class MegatronWriter(Writer):
    """``data.bin`` / ``data.idx`` by megatron-core's ``IndexedDatasetBuilder``: one document per row (a planned
    document, or a packed sample with ``--seq-len``), in stream order. Token ids only. ``prefix`` names the
    pair (``--blend`` writes one per cluster). With ``--assistant-only-loss``, ``data_loss_mask.bin`` / ``.idx`` beside
    them: an indexed dataset of uint8 of the same documents and lengths, 1 where a token is trained on."""

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
            with megatron_imports():
                from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
        except ImportError as exc:
            raise missing("megatron", "megatron-core", exc) from exc
        self.builder = IndexedDatasetBuilder(str(folder / f"{prefix}.bin"), dtype=token_dtype.type)
        self.masks: Any = None
        self._builder = IndexedDatasetBuilder

    def write(self, batch: pa.Table) -> None:
        for ids in token_rows(batch.column("tokens")):
            self.builder.add_document(np.asarray(ids), [int(ids.size)])
        if LOSS_MASK in batch.column_names:
            if self.masks is None:
                self.masks = self._builder(str(self.folder / f"{self.prefix}_{LOSS_MASK}.bin"), dtype=np.uint8)
            for mask in token_rows(batch.column(LOSS_MASK)):
                self.masks.add_document(np.asarray(mask, np.uint8), [int(mask.size)])
        self.batches += 1

    def close(self) -> None:
        self.builder.finalize(str(self.folder / f"{self.prefix}.idx"))
        if self.masks is not None:
            self.masks.finalize(str(self.folder / f"{self.prefix}_{LOSS_MASK}.idx"))
