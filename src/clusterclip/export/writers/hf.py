"""``--format hf``: a ``datasets.Dataset`` saved with ``save_to_disk`` (read by ``datasets.load_from_disk``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from clusterclip.contract.export import META_KEY
from clusterclip.errors import ClusterClipError
from clusterclip.export.writers.base import Writer, add_json_key, create, missing
from clusterclip.store import file_digest


class HfWriter(Writer):
    """A ``datasets.Dataset`` saved with ``save_to_disk``: batches go to one Arrow stream file (memory-mapped
    by ``Dataset.from_file``, so memory stays bounded), which ``save_to_disk`` then shards."""

    name = "hf"
    SUMMARY = "datasets.save_to_disk"
    RECORDS = "typed"
    WRITES_TWICE = True
    METADATA = "dataset_info.json"
    """The rows go to the Arrow stream, then ``save_to_disk`` writes its shards beside it."""

    def __init__(self, folder: Path, token_dtype: np.dtype, meta: dict[str, Any] | None = None) -> None:
        super().__init__(folder, token_dtype, meta)
        try:
            import datasets  # noqa: F401
        except ImportError as exc:
            raise missing("hf", "datasets", exc) from exc
        self.stream = folder.parent / (folder.name + ".arrow")
        self.file: Any = None
        self.sink: Any = None

    def write(self, batch: pa.Table) -> None:
        if self.sink is None:
            self.file = create(self.stream)
            self.sink = pa.ipc.new_stream(self.file, batch.schema)
        self.sink.write_table(batch)
        self.batches += 1

    def close(self) -> None:
        import datasets

        if self.sink is None:
            raise ClusterClipError("the plan is empty: nothing to export")
        self.sink.close()
        self.file.close()
        ds = datasets.Dataset.from_file(str(self.stream))
        # The fingerprint names the content, so a re-run writes identical state.json instead of a random one:
        # the export's identity determines its rows (the stream file's bytes also depend on buffer layout).
        ds._fingerprint = (hashlib.sha256(json.dumps(self.meta, sort_keys=True).encode()).hexdigest()[:16]
                           if self.meta else file_digest(self.stream)[:16])
        if self.meta:
            ds.info.description = (f"clusterclip export of plan {self.meta['plan']} (stream "
                                   f"{self.meta['stream_identity']}), rows in plan order")
        enabled = datasets.utils.is_progress_bar_enabled()
        datasets.utils.disable_progress_bars()  # the export shows its own progress, and -q means none
        try:
            ds.save_to_disk(str(self.folder))
        finally:
            if enabled:
                datasets.utils.enable_progress_bars()
        if self.meta:
            add_json_key(self.folder / self.METADATA, META_KEY, self.meta)
        del ds
        self.stream.unlink()
