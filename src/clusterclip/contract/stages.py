"""The stages of a run directory, declared once: each stage's contract (its record class, which names the
stage, its files, how to find its records and the stages it is built from, ``UPSTREAM``).

:data:`STAGES` orders the contracts upstream first from their ``UPSTREAM`` alone; what ``clusterclip run``
builds (:data:`PIPELINE`), what ``clusterclip add`` grows (:data:`GROWN`), the stages the report shows and the
table of builds (:mod:`clusterclip.stage_table`) are derived from it. ``status``, the run summary, the report
and ``clusterclip add`` read it. Imports only the contract package, so anything that needs to know which stages
exist (the report, the trainer side) stays light.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from clusterclip.contract.cluster import ClusterRecord
from clusterclip.contract.corpus import CorpusRecord
from clusterclip.contract.dedup import DedupRecord
from clusterclip.contract.embed import EmbedRecord
from clusterclip.contract.plan import PlanRecord
from clusterclip.contract.report import ReportRecord
from clusterclip.store import RunDir
from clusterclip.store import layout as A
from clusterclip.store.record import StageRecord


def upstream_first(contracts: Iterable[type[StageRecord]]) -> tuple[type[StageRecord], ...]:
    """``contracts`` ordered so that each comes after every stage its ``UPSTREAM`` names (ties: in the order
    given). Refuses an upstream that is not among them, a name given twice and a cycle (``ValueError``)."""
    pending = list(contracts)
    names = [c.NAME for c in pending]
    if len(set(names)) != len(names):
        raise ValueError(f"a stage is declared twice: {', '.join(names)}")
    for c in pending:
        unknown = sorted(set(c.UPSTREAM) - set(names))
        if unknown:
            raise ValueError(f"stage {c.NAME!r} names upstream stage(s) {', '.join(unknown)} that are not declared")
    done: list[type[StageRecord]] = []
    while pending:
        ready = next((c for c in pending if set(c.UPSTREAM) <= {d.NAME for d in done}), None)
        if ready is None:
            raise ValueError(f"the stages {', '.join(c.NAME for c in pending)} name each other upstream (a cycle)")
        done.append(ready)
        pending.remove(ready)
    return tuple(done)


STAGES: tuple[type[StageRecord], ...] = upstream_first(
    (CorpusRecord, EmbedRecord, ClusterRecord, DedupRecord, PlanRecord, ReportRecord))
"""Every stage of a run directory, upstream first (plans: one stage per plan; the report, built from all, last).
The one declaration of the stages: the lists below are derived from it."""

PIPELINE: tuple[type[StageRecord], ...] = tuple(c for c in STAGES if c.IN_PIPELINE)
"""The stages ``clusterclip run`` builds, in order (the report names those that have not run)."""

GROWN: tuple[type[StageRecord], ...] = tuple(c for c in STAGES if c.GROWN)
"""The stages ``clusterclip add`` grows in place, in order (the dedup groups are extended when current; plans
and the report stay as built: behind, not stale)."""

SINGLE: tuple[type[StageRecord], ...] = tuple(c for c in STAGES if not c.MANY and c.NAME in ReportRecord.UPSTREAM)
"""The stages with one record per run directory that the report shows (plans are read one by one)."""


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
