"""``clusterclip add`` extends the duplicate groups to the documents it appends, instead of leaving them stale.

The stored pairwise work of the older documents is kept; each new document gets its most similar member of
its cluster (older documents and the new ones before it) and its text hashes: MinHash signature, word-set
signature, distinct shingle count and normalised-text key (only the new texts are read, in one pass; they
equal what a full run computes), and the LSH candidates are drawn again from all signatures. The groups are
then derived as the stage always derives them (confirmed edges, the low-information guard, the star check:
:mod:`clusterclip.dedup.checked`): a new document joins the group of any member it duplicates, may join two
groups into one, and becomes the kept document when it is the longest member (the kept rule). ``clusterclip dedup RUN
--force`` recomputes everything; it can differ slightly, because the older documents' neighbours are taken
in the kept rule's order and the new ones' in index order.
"""

from __future__ import annotations

from clusterclip.dedup.config import DedupConfig
from clusterclip.dedup.contract import DEDUP_STAGE, INDEX_ARTIFACTS, DedupRecord, inputs_of
from clusterclip.dedup.stage import dedup_stage
from clusterclip.stages.growth import Growth
from clusterclip.store import RunDir


def extend_groups(run: RunDir, growth: Growth) -> DedupRecord | None:
    """The dedup record extended to the documents an add appended, when the stage was current with the corpus,
    embed and cluster records before the add (its pairwise work intact); else None: the groups stay stale and
    ``clusterclip dedup`` recomputes them."""
    before, n_old = growth.journal["base"], growth.n_old
    previous = DedupRecord.read(run)
    if previous is None or previous.inputs_hash != inputs_of(before) or previous.documents != n_old:
        return None
    if not previous.lists(INDEX_ARTIFACTS) or run.problems(DEDUP_STAGE, previous.to_json(), only=INDEX_ARTIFACTS):
        return None
    return dedup_stage(run, DedupConfig(**previous.config), appended=n_old)
