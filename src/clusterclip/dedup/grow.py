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

from collections.abc import Mapping
from typing import Any

from clusterclip.contract.corpus import CORPUS_STAGE
from clusterclip.contract.dedup import DEDUP_STAGE, INDEX_ARTIFACTS, DedupRecord, inputs_of
from clusterclip.dedup.config import DedupConfig
from clusterclip.dedup.stage import build_artifacts, dedup_stage
from clusterclip.stages.growth import Growth
from clusterclip.store import RunDir, artifact_checksums, save_json

JOURNAL_KEY = "dedup"
"""Field of the add journal: the dedup record the add extends (saved before anything grew), or None."""


def extendable(run: RunDir, base: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """The dedup record an add about to start from the records ``base`` will extend: the stage was current with
    them and its pairwise work is intact; else None (the groups stay stale and ``clusterclip dedup`` recomputes
    them). Decided once, before anything grows, and kept in the journal so a killed add extends the same
    groups when it is re-run, and ``add --abort`` can put them back."""
    previous = DedupRecord.read(run)
    if previous is None or previous.inputs_hash != inputs_of(base) or previous.documents != base[CORPUS_STAGE]["count"]:
        return None
    if not previous.lists(INDEX_ARTIFACTS) or run.problems(DEDUP_STAGE, previous.to_json(), only=INDEX_ARTIFACTS):
        return None
    return previous.to_json()


def extend_groups(run: RunDir, growth: Growth) -> DedupRecord | None:
    """The dedup record extended to the documents an add appended, when the journal says the groups were
    extendable (:func:`extendable`); else None. Each write of the extension keeps the older documents' rows, so a
    re-run after a kill gives the bytes of an uninterrupted add."""
    saved = growth.journal.get(JOURNAL_KEY)
    if saved is None:
        return None
    return dedup_stage(run, _config(saved), appended=growth.n_old)


def restore_groups(run: RunDir, saved: Mapping[str, Any]) -> str:
    """Undo an add's extension of the groups (``add --abort``, the older records already restored): rebuild the
    artifacts from the older documents' rows, which every write of the extension kept, and put the saved record
    back; the stage is left to recompute when the rebuilt bytes are not the recorded ones. Returns what was done."""
    current = run.record(DEDUP_STAGE)
    if current is not None and artifact_checksums(current) == artifact_checksums(saved) \
            and not run.problems(DEDUP_STAGE, current, checksums=False):
        return "untouched"
    run.invalidate(DEDUP_STAGE)
    build_artifacts(run, _config(saved), reuse=False, engine="local",
                    appended=int(saved["documents"]))
    restored = {**saved, "artifacts": {rel: dict(meta) for rel, meta in saved["artifacts"].items()}}
    if not run.adopt_times(restored):
        return f"left to recompute: `clusterclip dedup {run.root} --force`"
    save_json(run.record_path(DEDUP_STAGE), restored)
    return "restored"


def _config(saved: Mapping[str, Any]) -> DedupConfig:
    """The settings of the dedup record an add saved in its journal."""
    return DedupConfig(**DedupRecord.from_json(saved, "the dedup record in the add's journal").config.to_json())
