"""The export formats (``--format``) and their writers."""

from __future__ import annotations

from clusterclip.export.writers.base import Writer
from clusterclip.export.writers.hf import HfWriter
from clusterclip.export.writers.jsonl import JsonlWriter
from clusterclip.export.writers.litdata import LitdataWriter
from clusterclip.export.writers.mds import MdsWriter
from clusterclip.export.writers.megatron import MegatronWriter
from clusterclip.export.writers.parquet import ParquetWriter

WRITERS: dict[str, type[Writer]] = {"jsonl": JsonlWriter, "parquet": ParquetWriter, "hf": HfWriter,
                                    "litdata": LitdataWriter, "megatron": MegatronWriter, "mds": MdsWriter}
"""Export formats and their writers (``--format``)."""
FORMATS = tuple(WRITERS)
