"""``drift.json``, the drift report of the latest ``clusterclip add`` (:data:`clusterclip.store.layout.DRIFT_REPORT`),
typed: written by :mod:`clusterclip.add.workflow`, read by ``clusterclip add``'s summary and the add's lineage."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from clusterclip.contract.json_record import JsonRecord


@dataclasses.dataclass(frozen=True, kw_only=True)
class DriftReport(JsonRecord):
    """The new documents' inputs, how many were below each cut (the cosine to the nearest centroid, and when
    measured the neighbourhood similarity and the embedder's coverage), the cluster shift, the drift share against
    its threshold, every cluster's growth, the embedder, what happened to the duplicate groups and the duplicates
    skipped (:func:`clusterclip.add.drift.drift_report`). Version 1 has no version field."""

    WHAT: ClassVar[str] = "a drift report"
    UNVERSIONED: ClassVar[int | None] = 1
    FIX: ClassVar[str] = "it is rewritten by the next `clusterclip add`; delete it to drop it"

    inputs: list[str]
    documents_before: int
    documents_added: int
    percentile: float
    reference: str
    similarity_cut: float
    below_cut: int
    neighbour_cut: float | None = None
    below_neighbour_cut: int | None = None
    reference_documents: int | None = None
    clusters_with_own_cut: int | None = None
    neighbour_level: float | None = None
    cluster_test_flagged: int | None = None
    cluster_test_clusters: int | None = None
    coverage_cut: float | None = None
    below_coverage_cut: int | None = None
    cluster_shift: float
    cluster_shift_chance: float
    cluster_shift_excess: float
    drift_share: float
    drift_threshold: float
    recommend_refit: bool
    cluster_before: list[int]
    cluster_added: list[int]
    cluster_growth: list[float]
    embedder: str | None
    dedup: dict[str, Any] | None
    duplicates_skipped: int
    duplicates_within: int
