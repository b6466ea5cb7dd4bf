"""Sizes of reader batches, corpus parts and work units.

Every module reads them from here when it runs (``limits.BATCH_ROWS``, never a copy), so a test or benchmark
shrinks one in a single place: ``monkeypatch.setattr(clusterclip.corpus.limits, "PART_ROWS", 10)``.
"""

BATCH_ROWS = 2048
"""Documents in a batch of a reader (and rows read at a time from Parquet and Hugging Face datasets)."""
PART_ROWS = 50_000
"""Rows of every corpus part but the last."""
ROW_GROUP_ROWS = 2048
"""Rows of a row group of a corpus part."""
TXT_FILES_PER_UNIT = 10_000
"""Files of a ``.txt`` folder that one work unit reads."""
PARQUET_ROWS_PER_UNIT = 1_000_000
"""About how many rows of a large Parquet file one split work unit reads."""
JSONL_BYTES_PER_UNIT = 256 << 20
"""Bytes of a large plain JSON-lines file that one split work unit reads."""
