"""The plan stage's contract: its files, its record, and where finished plans are.

A plan is a folder ``plans/<name>/``: ``plan.npy`` (int64 document indices in training order), ``blocks.npy``
(a CRC-32 per block of 2^20 entries), per-cluster statistics, the mixture over training, the repetition
histogram and ``plan.json``, its record (:class:`PlanRecord`). Trainers, exports and reports open plans through
:mod:`clusterclip.contract.plan_reader` (:func:`~clusterclip.contract.plan_reader.open_plan` checks size, record
and block checksums in O(1), then each block when it is first read); this module imports only the storage floor
and the plan identity.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, ClassVar

from clusterclip.contract.plan_identity import LEGACY_PREFIX
from clusterclip.errors import ClusterClipError
from clusterclip.store import RUN, RunDir
from clusterclip.store.record import RecordedConfig, StageRecord

PLANS_DIR = "plans"
PLAN_ORDER = "plan.npy"
"""int64 ``[length]``: document indices in training order, repeats expanded."""
PLAN_RECORD = "plan.json"
PLAN_BLOCKS = "blocks.npy"
"""uint32 CRC-32 of each block of 2^20 entries of ``plan.npy``, verified by every reader (``contract.plan_reader``)."""
PLAN_DRAWS = "cluster_draws.npy"
PLAN_UNIQUE = "cluster_unique.npy"
PLAN_MAX_REPEAT = "cluster_max_repeat.npy"
PLAN_EXHAUSTED_AT = "cluster_exhausted_at.npy"
PLAN_TOKENS = "cluster_tokens.npy"
PLAN_MIXTURE = "mixture.npy"
PLAN_REPEAT_HIST = "repeat_hist.npy"
PLAN_PRIOR = "prior.npy"
"""A continuation's draws before its position 0, per document, summed over every ancestor's consumed
prefix (the smallest unsigned dtype that holds them): what its cap counted, and what a continuation of it
adds to, so no ancestor's files are needed once it is built."""
PLAN_TIERS = "tiers.npy"
"""A plan over strata: the tier of each document (smallest signed dtype; ``stats["strata"]["tiers"]`` names them)."""
PLAN_STRATA = "strata.npy"
"""A plan over strata: int64 ``[S, len(STRATA_COLUMNS)]``, one row per stratum (cluster x tier holding documents)."""
STRATA_COLUMNS = ("cluster", "tier", "size", "quota", "draws", "unique", "tokens")
"""The columns of ``strata.npy`` (``tokens`` is -1 in a run without token counts)."""
PLAN_TIER_MIXTURE = "tier_mixture.npy"
"""A plan over strata: int64 ``[windows, tiers]``, the draws of each tier in each mixture window."""
PLAN_FIELDS = ("strategy", "budget", "epochs", "budget_unit", "max_repeat", "tau", "order", "seed", "window",
               "duplicates", "rehydrate_curve", "strata", "tier_weights", "tier_caps", "within", "quality_mix")
"""The settings of the plan's ``config`` that are command-line options, in the order help and commands show them
(:class:`clusterclip.plan.config.PlanConfig` declares them)."""


def plan_path(name: str, fname: str | None = None) -> str:
    """The folder of plan ``name``, or its file ``fname`` (one of the ``PLAN_*`` names)."""
    folder = f"{PLANS_DIR}/{name}"
    return f"{folder}/{fname}" if fname else folder


def plan_stage_name(name: str) -> str:
    """The stage name of plan ``name``: its record is ``plans/<name>/plan.json``."""
    return plan_path(name, PLAN_RECORD.removesuffix(".json"))


PLAN_FORMAT = 2
"""Version of the plan bytes: 2 draws ``random`` as passes of one pseudo-cluster (1: its own epochs).
Part of the stage's input hash and record, so plans of another version are rebuilt rather than reused."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanSettings(RecordedConfig):
    """``plan.json``'s ``config``: a plan's settings as :meth:`clusterclip.plan.config.PlanConfig.to_json` writes them
    (defaults resolved: ``max_repeat`` is the cap in force, ``tau`` None for a strategy without one; ``epochs``,
    ``duplicates`` and the strata settings only when set). The planner's ``PlanConfig.from_recorded`` validates it
    against the strategy registry, which stands above this floor."""

    WHAT: ClassVar[str] = "the plan settings"

    strategy: str
    budget: int | None
    budget_unit: str
    max_repeat: int | None
    tau: float | None
    weights: list[list[float]] | None
    seed: int
    window: int | None
    order: str
    epochs: int | None = None
    duplicates: str | None = None
    strata: str | None = None
    tier_weights: str | None = None
    tier_caps: str | None = None
    within: str | None = None
    quality_mix: float | None = None
    rehydrate_curve: str | None = None

    @property
    def dedup(self) -> str:
        """How the plan treats the dedup stage's groups (``none`` when it ignores them)."""
        return self.duplicates or "none"


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanRecord(StageRecord):
    """``plans/<name>/plan.json``. ``config`` is the plan's settings (:class:`PlanSettings`), ``identity`` the
    content hash of its order (what sampler states and exports carry), ``stats`` what the planner measured,
    ``blocks`` how ``blocks.npy`` checks ``plan.npy``. A continuation also records the plan it ``continues``
    (name, identity, position) and its ``ancestors``, root first. Plans of earlier formats lack ``identity``
    (derived from ``plan.npy``'s SHA-256, :meth:`order_identity`) or ``blocks`` (verified whole once). The settings
    validated: ``PlanConfig.from_recorded(record.config)`` (the planner's, above this floor)."""

    NAME: ClassVar[str] = PLANS_DIR
    FALLBACK: ClassVar[tuple[str, ...]] = ("clusterclip", "plan", RUN, "--strategy", "STRATEGY", "OPTIONS...")
    UPSTREAM: ClassVar[tuple[str, ...]] = ("corpus", "cluster", "dedup")
    IN_PIPELINE: ClassVar[bool] = True
    MANY: ClassVar[bool] = True

    config: PlanSettings
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

    @property
    def length(self) -> int:
        """Draws in the plan."""
        return int(self.stats["length"])

    def order_file(self) -> str:
        """``plan.npy`` of this plan, relative to the run directory."""
        return plan_path(self.name, PLAN_ORDER)

    def order_identity(self) -> str | None:
        """The identity of the plan's order: the recorded one, or one derived from ``plan.npy``'s SHA-256."""
        if self.identity:
            return self.identity
        sha = self.artifact_sha256(self.order_file())
        return f"{LEGACY_PREFIX}{sha}" if sha else None

    def chain(self) -> list[dict[str, Any]]:
        """The plans this one continues, root first (``ancestors``, or ``continues`` for records written before
        chains); empty for a plan that continues nothing."""
        return list(self.ancestors or ([self.continues] if self.continues else []))


def list_plans(run: RunDir) -> list[str]:
    """Names of the finished plans in the run directory (those with a ``plan.json`` record)."""
    root = run.path(PLANS_DIR)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / PLAN_RECORD).is_file())


def orphan_plans(root: Path) -> list[str]:
    """Plan folders that hold files but no record (``plan.json`` deleted): not finished, yet not empty."""
    plans = root / PLANS_DIR
    if not plans.is_dir() or plans.is_symlink():
        return []
    return [p.name for p in sorted(plans.iterdir()) if p.is_dir() and not p.is_symlink()
            and not (p / PLAN_RECORD).exists() and any(p.iterdir())]


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
