"""What a split's training documents are in another run directory of the same corpus, looked up by document id:
their clusters there (a plan over that run's clusters: ``clusters=`` or ``plan:``) and their kept per-document
fields (the fields a stratified plan reads: ``strata=``, ``within=``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from clusterclip.contract.cluster import CENTROIDS, load_labels
from clusterclip.contract.corpus import CORPUS_STAGE, CorpusRecord, load_fields, read_column
from clusterclip.errors import ClusterClipError
from clusterclip.plan.strata import FieldValues, field_values
from clusterclip.store import RunDir, load_npy


def positions(run: RunDir, ids: Sequence[str], what: str) -> np.ndarray:
    """The row of each of ``ids`` in ``run``'s corpus (refused, naming one, when a document is not there)."""
    theirs = np.asarray(read_column(run, "id"), dtype=object).astype(str)
    order = np.argsort(theirs, kind="stable")
    wanted = np.asarray(ids, dtype=object).astype(str)
    pos = np.minimum(np.searchsorted(theirs[order], wanted), len(order) - 1)
    missing = np.flatnonzero(theirs[order][pos] != wanted)
    if missing.size:
        raise ClusterClipError(f"{missing.size:,} of the {len(ids):,} training documents (e.g. id "
                               f"{wanted[missing[0]]!r}) are not in {run.root}: {what} must name a run directory of "
                               "the same corpus")
    return order[pos]


def run_labels(clusters: str, ids: Sequence[str]) -> tuple[np.ndarray, int]:
    """The cluster of each document ``ids`` names in the run directory ``clusters`` (by document id), and that
    run's number of clusters: how a plan over another run's clusters sees a split's training documents."""
    run = RunDir(clusters)
    labels = np.asarray(load_labels(run), dtype=np.int64)
    k = int(load_npy(run.path(CENTROIDS), mmap=True).shape[0])
    return labels[positions(run, ids, "clusters= (or plan:)")], k


def run_fields(run: RunDir, names: Sequence[str], ids: Sequence[str]) -> dict[str, FieldValues]:
    """The kept fields ``names`` of the documents ``ids`` in ``run`` (by document id), for the planner's strata.
    A field no document has is refused: its tiers would be one tier of missing values, the plan unstratified."""
    rec: Any = CorpusRecord.require(run, verify=False)
    kept = rec.fields or {}
    absent = [n for n in names if n not in kept]
    if absent:
        raise ClusterClipError(f"{run.root}: its {CORPUS_STAGE} stage kept no field {absent[0]!r} (kept: "
                               f"{', '.join(kept) or 'none'})")
    rows = positions(run, ids, "the run a plan's fields come from")
    out = {}
    for name, field in load_fields(run, names).items():
        values = field_values(field)
        picked = FieldValues(np.asarray(values.values)[rows], values.categories)
        if not (np.isfinite(picked.values) if picked.categories is None else picked.values >= 0).any():
            raise ClusterClipError(f"no training document has the field {name!r} in {run.root} (the input has "
                                   "no such field; for 'quality', give --quality-scorer heuristic)")
        out[name] = picked
    return out
