"""Near-duplicate groups: SemDeDup inside the clusters plus MinHash LSH, and the ``dedup`` stage.

:mod:`.semantic` finds each document's most similar earlier member of its cluster (blocked, bounded
memory), :mod:`.lexical` hashes the texts (MinHash signatures of shingles and of word sets, shingle counts,
text keys) and finds the LSH candidate pairs, :mod:`.checked` turns both into groups that do not chain for
given thresholds (:mod:`.groups`: the plain components), :mod:`.stage` is the stage and
:func:`clusterclip.contract.dedup.load_groups` the consumers' reader. See ``docs/dedup.md``.
"""
