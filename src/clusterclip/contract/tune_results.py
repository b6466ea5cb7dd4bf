"""``OUT/tune/results.json``, typed: what :mod:`clusterclip.experiment.tune.search_stage` writes after every step of
a search (:data:`TUNE_VERSION`), what ``clusterclip tune`` prints of it and what the report's tune section shows."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from clusterclip.contract.json_record import JsonRecord

TUNE_VERSION = 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class TuneResults(JsonRecord):
    """A search: its inputs, settings (the proxies' ``config`` and the search's ``tune``), the grid's candidate
    names, the search pairs ``[split, seed]``, the halving's ``trajectory``, the ``budget`` it planned; once the
    search ran, the ``progress``, the ``objective``, the ``winner`` and the ``reason``, every ``candidates``' spec,
    status and assessment, the ``weight_search`` and the check on ``unseen`` splits when they ran, the chosen
    ``plan`` for the whole corpus and the ``check_command`` that checks the choice on unseen splits."""

    WHAT: ClassVar[str] = "the results of a tune search"
    VERSIONS: ClassVar[tuple[int, ...]] = (TUNE_VERSION,)
    FIX: ClassVar[str] = "run `clusterclip tune` again (it reuses the finished proxy runs)"

    version: int
    status: str
    inputs: list[str]
    config: dict[str, Any]
    tune: dict[str, Any]
    grid: list[str]
    pairs: list[list[int]]
    trajectory: list[dict[str, Any]]
    budget: dict[str, Any] | None = None
    weight_search: dict[str, Any] | None = None
    progress: dict[str, Any] | None = None
    updated_at: str | None = None
    objective: str | None = None
    winner: str | None = None
    reason: str | None = None
    candidates: dict[str, dict[str, Any]] | None = None
    unseen: dict[str, Any] | None = None
    plan: dict[str, Any] | None = None
    check_command: str | None = None

    def specs(self) -> dict[str, dict[str, Any]]:
        """Every candidate's spec by name ({} before the search decided)."""
        return {name: c["spec"] for name, c in (self.candidates or {}).items()}
