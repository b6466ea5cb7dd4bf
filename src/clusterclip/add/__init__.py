"""``clusterclip add``: append new documents to a finished run, assign them to the frozen centroids, and
report drift.

The new documents become corpus parts after the existing ones (indices ``N..N+M-1``; old indices never
change, so existing plans stay valid for the documents they index), embedding shards after the existing
ones (same embedder, rebuilt from the embed record), and rows appended to ``tokens.npy``, ``labels.npy``
and ``scores.npy``. Each stage grows by its own step: the corpus and embed steps are in :mod:`.grow`, the
cluster stage's in :mod:`clusterclip.cluster` (:func:`~clusterclip.cluster.grow_clusters`). The records
are then rewritten so that every later command sees one consistent, grown run. Memory is bounded by the
new documents: old ids, tokens, labels and scores are streamed.

Crash safety: before the first existing artifact changes, ``add-journal.json`` saves the records the add
started from. A re-run of the same add finds it and redoes every step from those records (each step is
deterministic and rewrites only by atomic rename), so it ends with the bytes of an uninterrupted run; the
journal goes last. A re-run after completion finds the inputs in the corpus record and does nothing.

Lineage: every input is identified by its content (SHA-256), so an input already in the run (under any
name) is refused, a document whose text is already in it is skipped, and a moved or rewritten input still
finishes a killed add; ``add --abort`` undoes one. The corpus record lists each add's command (``regrow``).

Modules: :mod:`.workflow` (the steps in order, the journal), :mod:`.new_docs` (reading the new inputs,
checking their ids), :mod:`.grow` (corpus and embed), :mod:`.drift` (the drift report), :mod:`.lineage`
(duplicates, the add's command, ``--abort``).
"""
