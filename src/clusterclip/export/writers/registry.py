"""The export formats (``--format``), one line each: a writer class carries its own name and facts."""

from __future__ import annotations

from clusterclip.export.writers.base import Writer
from clusterclip.export.writers.hf import HfWriter
from clusterclip.export.writers.jsonl import JsonlWriter
from clusterclip.export.writers.litdata import LitdataWriter
from clusterclip.export.writers.mds import MdsWriter
from clusterclip.export.writers.megatron import MegatronWriter
from clusterclip.export.writers.parquet import ParquetWriter

WRITERS: dict[str, type[Writer]] = {cls.name: cls for cls in (
    JsonlWriter,
    ParquetWriter,
    HfWriter,
    LitdataWriter,
    MegatronWriter,
    MdsWriter,
)}
"""Export formats and their writers (``--format``), in the order ``--help`` lists them."""
FORMATS = tuple(WRITERS)
