"""The stages of a run directory, in pipeline order: each stage's contract (its record class, which names the
stage, its files and how to find its records). The one list that ``status``, the run summary, the report
and ``clusterclip add`` read; :mod:`clusterclip.stage_table` adds how each stage is built and grown.

Imports only contract modules, so anything that needs to know which stages exist (the report, the trainer
side) stays light.
"""

from __future__ import annotations

from pathlib import Path

from clusterclip.cluster.contract import ClusterRecord
from clusterclip.contract.report import ReportRecord
from clusterclip.corpus.contract import CorpusRecord
from clusterclip.dedup.contract import DedupRecord
from clusterclip.embed.contract import EmbedRecord
from clusterclip.plan.contract import PlanRecord
from clusterclip.store import RunDir
from clusterclip.store import layout as A
from clusterclip.store.record import StageRecord

STAGES: tuple[type[StageRecord], ...] = (CorpusRecord, EmbedRecord, ClusterRecord, DedupRecord, PlanRecord,
                                         ReportRecord)
"""Every stage of a run directory, upstream first (plans: one stage per plan; the report last)."""

PIPELINE: tuple[type[StageRecord], ...] = (CorpusRecord, EmbedRecord, ClusterRecord, PlanRecord)
"""The stages ``clusterclip run`` builds, in order (the report names those that have not run)."""

GROWN: tuple[type[StageRecord], ...] = (CorpusRecord, EmbedRecord, ClusterRecord)
"""The stages ``clusterclip add`` grows in place, in order (the dedup groups are extended when current; plans
and the report stay as built: behind, not stale)."""


def finished_stages(run: RunDir) -> list[str]:
    """The finished stages of ``run`` (those with a record), upstream first."""
    return [stage for contract in STAGES for stage in contract.instances(run)]


def contract_of(stage: str) -> type[StageRecord]:
    """The record class of stage ``stage`` (``plans/<name>/plan`` is a plan)."""
    kind = stage.split("/")[0]
    for contract in STAGES:
        if kind == contract.NAME:
            return contract
    raise KeyError(f"no stage {stage!r}; stages: {', '.join(c.NAME for c in STAGES)}")


def record_paths(run: RunDir) -> list[Path]:
    """Every record of the run directory that exists or is a link, and ``commands.json`` and an add journal."""
    return [*(p for contract in STAGES for p in contract.record_paths(run)),
            run.root / A.COMMANDS, run.root / A.ADD_JOURNAL]


def audit(run: RunDir) -> dict[str, list[str]]:
    """The full check of every finished stage (``clusterclip status --verify``): ``{stage: problems}``, an
    empty list for a stage whose artifacts all match their recorded sizes and checksums."""
    return run.audit(finished_stages(run))
