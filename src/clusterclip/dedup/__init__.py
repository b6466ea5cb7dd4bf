"""Near-duplicate groups: SemDeDup inside the clusters plus MinHash LSH, and the ``dedup`` stage.

:mod:`.semantic` finds each document's most similar earlier member of its cluster (blocked, bounded
memory), :mod:`.lexical` the MinHash LSH candidate pairs, :mod:`.groups` turns both into groups for given
thresholds, :mod:`.stage` is the stage and :func:`load_groups` the consumers' reader. See ``docs/dedup.md``.
"""

from clusterclip.dedup.config import DEDUP_STAGE, GROUP, KEPT, REMOVED, DedupConfig
from clusterclip.dedup.groups import DuplicateGroups, derive_groups
from clusterclip.dedup.stage import dedup_stage, load_groups

__all__ = ["DEDUP_STAGE", "GROUP", "KEPT", "REMOVED", "DedupConfig", "DuplicateGroups", "dedup_stage",
           "derive_groups", "load_groups"]
