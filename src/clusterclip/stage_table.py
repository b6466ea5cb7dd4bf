"""The table of stages: each stage's contract (:data:`clusterclip.contract.stages.STAGES`), the function that
builds it and the one that grows it when ``clusterclip add`` appends documents.

``pipeline`` builds from it, ``add`` grows its stages in its order, and ``status``, the run summary and the
report read the contracts it is made of. Which stages there are and their order come from the contracts' one
declaration; this module only attaches the functions (a stage declared without one, or one given for no declared
stage, fails at import).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from clusterclip.cluster.grow import grow_cluster_record
from clusterclip.cluster.stage import cluster_stage
from clusterclip.contract.cluster import CLUSTER_STAGE
from clusterclip.contract.corpus import CORPUS_STAGE
from clusterclip.contract.dedup import DEDUP_STAGE
from clusterclip.contract.embed import EMBED_STAGE
from clusterclip.contract.plan import PLANS_DIR
from clusterclip.contract.report import REPORT_STAGE
from clusterclip.contract.stages import STAGES
from clusterclip.corpus.grow import grow_corpus_record
from clusterclip.corpus.stage import corpus_stage
from clusterclip.dedup.grow import extend_groups
from clusterclip.dedup.stage import dedup_stage
from clusterclip.embed.grow import grow_embed_record
from clusterclip.embed.stage import embed_stage
from clusterclip.plan.stage import plan_stage
from clusterclip.report import build_report
from clusterclip.store.record import StageRecord


@dataclass(frozen=True)
class StageEntry:
    """One stage: its contract (record class), its build function, and how ``clusterclip add`` grows it (None:
    what was built stays valid over the documents it saw, *behind*)."""

    contract: type[StageRecord]
    build: Callable[..., Any]
    grow: Callable[..., Any] | None = None

    @property
    def name(self) -> str:
        return self.contract.NAME


BUILDS: dict[str, tuple[Callable[..., Any], Callable[..., Any] | None]] = {
    CORPUS_STAGE: (corpus_stage, grow_corpus_record),
    EMBED_STAGE: (embed_stage, grow_embed_record),
    CLUSTER_STAGE: (cluster_stage, grow_cluster_record),
    DEDUP_STAGE: (dedup_stage, extend_groups),
    PLANS_DIR: (plan_stage, None),
    REPORT_STAGE: (build_report, None),
}
"""Each declared stage's build and grow functions, by stage name."""
if set(BUILDS) != {c.NAME for c in STAGES}:
    raise ImportError(f"the table of builds names {sorted(BUILDS)}, the declared stages are "
                      f"{sorted(c.NAME for c in STAGES)}")

TABLE: tuple[StageEntry, ...] = tuple(StageEntry(c, *BUILDS[c.NAME]) for c in STAGES)
"""Every stage, upstream first (the order of :data:`~clusterclip.contract.stages.STAGES`)."""


def entry(name: str) -> StageEntry:
    """The table's entry of stage ``name`` (a plan's stage name ``plans/<name>/plan`` is the plan stage)."""
    kind = name.split("/")[0]
    for found in TABLE:
        if found.name == kind:
            return found
    raise KeyError(f"no stage {name!r}; stages: {', '.join(e.name for e in TABLE)}")
