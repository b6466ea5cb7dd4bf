"""The files of a plan (``plans/<name>/``): names only, shared by the plan stage and its readers."""

from __future__ import annotations

PLANS_DIR = "plans"
PLAN_ORDER = "plan.npy"
"""int64 ``[length]``: document indices in training order, repeats expanded."""
PLAN_RECORD = "plan.json"
PLAN_BLOCKS = "blocks.npy"
"""uint32 CRC-32 of each block of 2^20 entries of ``plan.npy``, verified by every reader (``plan.integrity``)."""
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


def plan_path(name: str, fname: str | None = None) -> str:
    """The folder of plan ``name``, or its file ``fname`` (one of the ``PLAN_*`` names)."""
    folder = f"{PLANS_DIR}/{name}"
    return f"{folder}/{fname}" if fname else folder


def plan_stage_name(name: str) -> str:
    """The stage name of plan ``name``: its record is ``plans/<name>/plan.json``."""
    return plan_path(name, PLAN_RECORD.removesuffix(".json"))
