"""What ``clusterclip add`` appended to a run, handed to each stage's grow function in the order of the table of
stages (:data:`clusterclip.stage_table.TABLE`), so each stage rewrites its own record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from clusterclip.store.record import StageRecord


@dataclass
class Growth:
    """An add, once every artifact has grown: the journal (``add-journal.json``: its key, inputs, command and the
    records it started from, as JSON), those records read as their contracts (``base``), the documents before
    it (``n_old``), what its reader wrote (``new``: :class:`clusterclip.corpus.grow.NewDocs`), the new embedding
    shards, the new documents' cosines to their centroids and the grown cluster sizes."""

    journal: Mapping[str, Any]
    base: Mapping[str, StageRecord]
    n_old: int
    new: Any
    shards: list[dict[str, Any]] = field(default_factory=list)
    scores: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    sizes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    seconds: float = 0.0

    @property
    def count(self) -> int:
        """Documents after the add."""
        return self.n_old + len(self.new.ids)
