"""The report stage's contract: its files and record. ``report/report.html`` and its PNG charts are written
into the run directory by ``clusterclip report``; ``report.json`` records the output hash of every stage the
page was built from, so rebuilding any of them makes the report stale."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from clusterclip.store.record import RecordedConfig, StageRecord

REPORT_STAGE = "report"
REPORT_DIR = "report"
REPORT_HTML = "report.html"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReportSettings(RecordedConfig):
    """``report.json``'s ``config``: the report has no settings (``{}``); what it shows is its ``upstream``."""

    WHAT: ClassVar[str] = "the report settings"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReportRecord(StageRecord):
    """``report.json``: the page and its charts (``artifacts``), the stages they show (``upstream``) and what the
    page says of the plans it left out or shows in part (``plan_notes``: a stale plan, a damaged record)."""

    NAME: ClassVar[str] = REPORT_STAGE
    UPSTREAM: ClassVar[tuple[str, ...]] = ("corpus", "embed", "cluster", "dedup", "plans")

    config: ReportSettings
    plan_notes: list[str] | None = None
