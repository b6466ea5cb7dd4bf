"""Rows of an export, as a model takes them: map-style access for the sampler, token batches as int64.

``ExportRows`` gives any export reader that indexes rows (litdata's ``StreamingDataset``, a ``datasets``
``Dataset``, megatron-core's ``IndexedDataset``) the map-style face ``DataLoader(sampler=...)`` needs, so that
``ClusterClipSampler.from_export`` drives the read. ``TokenCollator`` batches tokenized rows: exports store
ids as ``uint16`` (vocabularies up to 65,536) or ``int32``, and unpacked rows differ in length, while
``nn.Embedding`` takes ``int64`` of one shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

__all__ = ["ExportRows", "TokenCollator"]


class ExportRows(Dataset):
    """Map-style access to the rows of an export reader: ``rows[i]`` is ``reader[i]``, row ``i`` of the export.

    litdata's ``StreamingDataset`` is an ``IterableDataset`` (a ``DataLoader`` refuses a sampler for it) that
    also reads single rows by index; wrapped, it is read in the order ``ClusterClipSampler`` yields.
    """

    def __init__(self, reader: Any) -> None:
        self.reader = reader

    def __len__(self) -> int:
        return len(self.reader)

    def __getitem__(self, index: int) -> Any:
        return self.reader[index]


class TokenCollator:
    """Batches rows holding ``tokens`` (any length, any integer dtype) for a causal language model.

    Returns ``input_ids`` (``int64``, ``[batch, longest]``, right-padded with ``pad_id``), ``attention_mask``
    (1 on tokens, 0 on padding) and ``labels`` (``input_ids`` with ``-100`` on padding, the value the Hugging
    Face losses ignore); other integer fields (``index``, ``cluster``) become ``int64`` tensors and the rest
    (``text``, ``id``) lists. Packed rows (``--seq-len``) all have the same length: nothing is padded. A plain
    class, so that ``DataLoader`` workers can pickle it.
    """

    def __init__(self, pad_id: int = 0, field: str = "tokens") -> None:
        self.pad_id = int(pad_id)
        self.field = field

    def __call__(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        ids = [np.asarray(row[self.field]).astype(np.int64, copy=False).reshape(-1) for row in rows]
        lengths = np.fromiter((a.size for a in ids), np.int64, len(ids))
        longest = int(lengths.max()) if len(ids) else 0
        batch = np.full((len(ids), longest), self.pad_id, dtype=np.int64)
        mask = np.arange(longest)[None, :] < lengths[:, None]
        if len(ids):
            batch[mask] = np.concatenate(ids)
        input_ids = torch.from_numpy(batch)
        attention = torch.from_numpy(mask.astype(np.int64))
        out: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention,
                               "labels": input_ids.masked_fill(attention == 0, -100)}
        for key in rows[0] if rows else ():
            if key == self.field:
                continue
            values = [row[key] for row in rows]
            numeric = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values)
            out[key] = torch.tensor(values, dtype=torch.int64) if numeric else values
        return out
