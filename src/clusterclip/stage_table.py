"""The table of stages: each stage's contract (:mod:`clusterclip.contracts`), the function that builds it and
the one that grows it when ``clusterclip add`` appends documents.

``pipeline`` builds from it, ``add`` grows its stages in its order, and ``status``, the run summary and the
report read the contracts it is made of. A new stage is a contract module, a build module, and one line here
(and in :data:`clusterclip.contracts.STAGES`, whose order this table follows: a test checks both agree).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from clusterclip.cluster.contract import ClusterRecord
from clusterclip.cluster.grow import grow_cluster_record
from clusterclip.cluster.stage import cluster_stage
from clusterclip.contract.report import ReportRecord
from clusterclip.corpus.contract import CorpusRecord
from clusterclip.corpus.grow import grow_corpus_record
from clusterclip.corpus.stage import corpus_stage
from clusterclip.dedup.contract import DedupRecord
from clusterclip.dedup.grow import extend_groups
from clusterclip.dedup.stage import dedup_stage
from clusterclip.embed.contract import EmbedRecord
from clusterclip.embed.grow import grow_embed_record
from clusterclip.embed.stage import embed_stage
from clusterclip.plan.contract import PlanRecord
from clusterclip.plan.stage import plan_stage
from clusterclip.report import build_report
from clusterclip.store.record import StageRecord


@dataclass(frozen=True)
class StageEntry:
    """One stage: its contract (record class), the command that builds it, its build function, and how
    ``clusterclip add`` grows it (None: what was built stays valid over the documents it saw, *behind*)."""

    contract: type[StageRecord]
    command: str
    build: Callable[..., Any]
    grow: Callable[..., Any] | None = None

    @property
    def name(self) -> str:
        return self.contract.NAME


TABLE: tuple[StageEntry, ...] = (
    StageEntry(CorpusRecord, "embed", corpus_stage, grow_corpus_record),
    StageEntry(EmbedRecord, "embed", embed_stage, grow_embed_record),
    StageEntry(ClusterRecord, "cluster", cluster_stage, grow_cluster_record),
    StageEntry(DedupRecord, "dedup", dedup_stage, extend_groups),
    StageEntry(PlanRecord, "plan", plan_stage),
    StageEntry(ReportRecord, "report", build_report),
)
"""Every stage, upstream first: the commands a user runs, in order."""


def entry(name: str) -> StageEntry:
    """The table's entry of stage ``name`` (a plan's stage name ``plans/<name>/plan`` is the plan stage)."""
    kind = name.split("/")[0]
    for found in TABLE:
        if found.name == kind:
            return found
    raise KeyError(f"no stage {name!r}; stages: {', '.join(e.name for e in TABLE)}")
