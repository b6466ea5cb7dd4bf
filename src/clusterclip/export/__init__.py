"""Export a plan as the training stream itself, in the format a trainer reads (``--format``).

Policy, once for every format: rows follow the plan order with repeats expanded; the plan is read in
windows of corpus text bounded by ``memory_mb``, optionally tokenized and packed, and handed to the
format's writer in batches of ``shard_size`` rows (:mod:`clusterclip.export.stream`, one writer per format
in :mod:`clusterclip.export.writers`). The output folder is a run directory with one stage, ``export``
(:mod:`clusterclip.export.stage`): its writer lock is held for the whole export and its record
``export.json`` (identity, files, counts) is written by the stage runner. Everything is written into
``OUT/.partial/`` first and moved into place at the end; export owns only what it wrote, refuses anything
else and never overwrites or deletes a file it did not write (:mod:`clusterclip.export.publish`). A killed
export is finished by the same command, with byte-identical data files.
"""

from clusterclip.export.stage import ExportConfig, export_plan
from clusterclip.export.writers import (
    FORMATS,
    WRITERS,
    HfWriter,
    JsonlWriter,
    LitdataWriter,
    MdsWriter,
    MegatronWriter,
    ParquetWriter,
    Writer,
)

__all__ = ["FORMATS", "WRITERS", "ExportConfig", "HfWriter", "JsonlWriter", "LitdataWriter", "MdsWriter",
           "MegatronWriter", "ParquetWriter", "Writer", "export_plan"]
