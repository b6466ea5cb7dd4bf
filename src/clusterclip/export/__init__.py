"""Export a plan as the training stream itself, in the format a trainer reads (``--format``).

Policy, once for every format: rows follow the plan order with repeats expanded; the plan is read in
windows of corpus text bounded by ``memory_mb``, optionally tokenized and packed, and handed to the
format's writer in batches of ``shard_size`` rows (:mod:`clusterclip.export.stream`, one writer per format
in :mod:`clusterclip.export.writers`). The output folder is a run directory with one stage, ``export``
(:mod:`clusterclip.export.stage`): its writer lock is held for the whole export and its record
``export.json`` (identity, files, counts) is written by the stage runner. Everything is written into
``OUT/.partial/`` first and moved into place at the end; export owns only what it wrote, refuses anything
else and never overwrites or deletes a file it did not write (:mod:`clusterclip.export.publish`). A killed
export is finished by the same command, with byte-identical data files. With ``--blend`` the folder holds
instead one Megatron source per cluster and the plan's token mixture as Megatron-LM and OLMo-core blend
files (:mod:`clusterclip.export.blend`), under the same staging, record and ownership. On the trainer's side,
:func:`read_export` / :func:`check_export` (:mod:`clusterclip.export.manifest`) read an export's identity back
and refuse one of another plan than a training state was saved on.

:class:`clusterclip.export.megatron_dataset.PlanOrderGPTDataset` (imported on its own: it needs megatron-core)
lets Megatron read a ``megatron`` export in plan order, one pass at most.
"""
