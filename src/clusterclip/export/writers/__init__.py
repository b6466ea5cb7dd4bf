"""One writer per export format, each only writing batches of records into a folder with its own library.

One module per format over :class:`~clusterclip.export.writers.base.Writer`. The trainer formats use
their library's own writer, so the library's own reader is the check: ``litdata`` (``BinaryWriter``,
read by ``litdata.StreamingDataset``), ``megatron`` (``IndexedDatasetBuilder``, read by
``IndexedDataset``), ``hf`` (``datasets.Dataset.save_to_disk``). ``mds`` is written directly (the library's
requirements clash with the project's) and checked by ``streaming.StreamingDataset`` in its own environment.
"""

from clusterclip.export.writers.base import ShardWriter, Writer, create, token_rows
from clusterclip.export.writers.hf import HfWriter
from clusterclip.export.writers.jsonl import JsonlWriter
from clusterclip.export.writers.litdata import LitdataWriter
from clusterclip.export.writers.mds import MdsWriter
from clusterclip.export.writers.megatron import MegatronWriter
from clusterclip.export.writers.parquet import ParquetWriter
from clusterclip.export.writers.registry import FORMATS, WRITERS

__all__ = ["FORMATS", "WRITERS", "HfWriter", "JsonlWriter", "LitdataWriter", "MdsWriter", "MegatronWriter",
           "ParquetWriter", "ShardWriter", "Writer", "create", "token_rows"]
