"""One writer per export format, each only writing batches of records into a folder with its own library.

One module per format over :class:`~clusterclip.export.writers.base.Writer`. The trainer formats use
their library's own writer, so the library's own reader is the check: ``litdata`` (``BinaryWriter``,
read by ``litdata.StreamingDataset``), ``megatron`` (``IndexedDatasetBuilder``, read by
``IndexedDataset``), ``hf`` (``datasets.Dataset.save_to_disk``). ``mds`` is written directly (the library's
requirements clash with the project's) and checked by ``streaming.StreamingDataset`` in its own environment.
"""
