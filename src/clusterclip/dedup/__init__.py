"""Near-duplicate groups: SemDeDup inside the clusters plus MinHash LSH, and the ``dedup`` stage.

:mod:`.semantic` finds each document's most similar earlier member of its cluster (blocked, bounded
memory), :mod:`.lexical` the MinHash LSH candidate pairs, :mod:`.groups` turns both into groups for given
thresholds, :mod:`.stage` is the stage and :func:`load_groups` the consumers' reader. See ``docs/dedup.md``.
"""
