"""The plan stage's contract: its files, its record, and the readers of plans.

A plan is a folder ``plans/<name>/`` (:mod:`clusterclip.plan.files`): ``plan.npy`` (int64 document indices in
training order), ``blocks.npy`` (a CRC-32 per block of 2^20 entries), per-cluster statistics, the mixture
over training, the repetition histogram and ``plan.json``, its record. Trainers, exports and reports open
plans through this module (:func:`open_plan` checks size, record and block checksums in O(1), then each block
when it is first read), which imports only the storage floor and the plan's own pure readers.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, ClassVar

from clusterclip.errors import ClusterClipError
from clusterclip.plan.clip import clip_note
from clusterclip.plan.config import PLAN_FIELDS, PlanConfig
from clusterclip.plan.files import (
    PLAN_BLOCKS,
    PLAN_DRAWS,
    PLAN_EXHAUSTED_AT,
    PLAN_MAX_REPEAT,
    PLAN_MIXTURE,
    PLAN_ORDER,
    PLAN_PRIOR,
    PLAN_RECORD,
    PLAN_REPEAT_HIST,
    PLAN_STRATA,
    PLAN_TIER_MIXTURE,
    PLAN_TIERS,
    PLAN_TOKENS,
    PLAN_UNIQUE,
    PLANS_DIR,
    STRATA_COLUMNS,
    plan_path,
    plan_stage_name,
)
from clusterclip.plan.identity import identity_of, record_identity, short
from clusterclip.plan.integrity import BLOCK_ENTRIES, CHECKSUM, PlanReader, block_checksums, open_plan
from clusterclip.plan.locate import (
    PlanIntegrityError,
    PlanNotFoundError,
    list_plans,
    orphan_plans,
    plan_command,
    read_record,
    resolve_plan_path,
)
from clusterclip.store import RUN, RunDir
from clusterclip.store.record import StageRecord

__all__ = [
    "BLOCK_ENTRIES",
    "CHECKSUM",
    "PLANS_DIR",
    "PLAN_BLOCKS",
    "PLAN_DRAWS",
    "PLAN_EXHAUSTED_AT",
    "PLAN_FIELDS",
    "PLAN_FORMAT",
    "PLAN_MAX_REPEAT",
    "PLAN_MIXTURE",
    "PLAN_ORDER",
    "PLAN_PRIOR",
    "PLAN_RECORD",
    "PLAN_REPEAT_HIST",
    "PLAN_STRATA",
    "PLAN_TIERS",
    "PLAN_TIER_MIXTURE",
    "PLAN_TOKENS",
    "PLAN_UNIQUE",
    "STRATA_COLUMNS",
    "PlanConfig",
    "PlanIntegrityError",
    "PlanNotFoundError",
    "PlanReader",
    "PlanRecord",
    "block_checksums",
    "clip_note",
    "identity_of",
    "list_plans",
    "open_plan",
    "orphan_plans",
    "plan_command",
    "plan_path",
    "plan_records",
    "plan_stage_name",
    "read_record",
    "record_identity",
    "resolve_plan_path",
    "short",
]

PLAN_FORMAT = 2
"""Version of the plan bytes: 2 draws ``random`` as passes of one pseudo-cluster (1: its own epochs).
Part of the stage's input hash and record, so plans of another version are rebuilt rather than reused."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanRecord(StageRecord):
    """``plans/<name>/plan.json``. ``config`` is the plan's settings (``PlanConfig.to_json()``), ``identity`` the
    content hash of its order (what sampler states and exports carry), ``stats`` what the planner measured,
    ``blocks`` how ``blocks.npy`` checks ``plan.npy``. A continuation also records the plan it ``continues``
    (name, identity, position) and its ``ancestors``, root first. Plans of earlier formats lack ``identity``
    (derived from ``plan.npy``'s SHA-256, :meth:`order_identity`) or ``blocks`` (verified whole once)."""

    NAME: ClassVar[str] = PLANS_DIR
    FALLBACK: ClassVar[tuple[str, ...]] = ("clusterclip", "plan", RUN, "--strategy", "STRATEGY", "OPTIONS...")

    name: str
    stats: dict[str, Any]
    plan_format: int | None = None
    identity: str | None = None
    blocks: dict[str, Any] | None = None
    continues: dict[str, Any] | None = None
    ancestors: list[dict[str, Any]] | None = None

    @classmethod
    def instances(cls, run: RunDir) -> list[str]:
        """One stage per finished plan (``plans/<name>/plan``), by name."""
        return [plan_stage_name(name) for name in list_plans(run)]

    @classmethod
    def record_paths(cls, run: RunDir) -> list[Path]:
        """Every ``plans/*/plan.json`` that exists or is a link (a plans folder that is a link is not entered)."""
        plans = run.root / PLANS_DIR
        if not plans.is_dir() or plans.is_symlink():
            return []
        return [p / PLAN_RECORD for p in sorted(plans.iterdir())
                if (p / PLAN_RECORD).is_symlink() or (p / PLAN_RECORD).exists()]

    def plan_config(self) -> PlanConfig:
        """The plan's settings, as :class:`~clusterclip.plan.config.PlanConfig`."""
        return PlanConfig.from_json(self.config)

    @property
    def length(self) -> int:
        """Draws in the plan."""
        return int(self.stats["length"])

    def order_file(self) -> str:
        """``plan.npy`` of this plan, relative to the run directory."""
        return plan_path(self.name, PLAN_ORDER)

    def order_identity(self) -> str | None:
        """The identity of the plan's order: the recorded one, or one derived from ``plan.npy``'s SHA-256."""
        return record_identity(self.to_json(), self.order_file())

    def chain(self) -> list[dict[str, Any]]:
        """The plans this one continues, root first (``ancestors``, or ``continues`` for records written before
        chains); empty for a plan that continues nothing."""
        return list(self.ancestors or ([self.continues] if self.continues else []))


def plan_records(run: RunDir) -> dict[str, PlanRecord]:
    """The record of every finished plan of ``run``, by name (a corrupt one raises, naming its rebuild)."""
    return {name: PlanRecord.require(run, plan_stage_name(name), verify=False) for name in list_plans(run)}


def refuse_stranding_refit(run: RunDir) -> None:
    """Refuse a ``cluster --refit`` that would make current plans stale (a training job reading one could not
    resume it); asked by the command before it refits, unless ``--force`` (a continuation still builds after)."""
    plans = [s.split("/")[1] for s in PlanRecord.instances(run) if not run.stale_reason(s)]
    if plans:
        raise ClusterClipError(
            f"{run.root}: `cluster --refit` relabels every document and makes plan(s) {', '.join(plans)} stale, "
            "so the sampler refuses them; re-run with --force to refit anyway (a running plan then goes on with "
            "`clusterclip plan RUN --continue PLAN --consumed N`, built on the new clusters)")
