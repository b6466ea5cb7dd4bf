"""The plan stage: build ``plans/<name>/`` in a run directory from its labels (and token counts).

``plan.npy`` is the order; beside it ``blocks.npy`` (a CRC-32 per block of 2^20 entries, verified by
every reader: ``contract.plan_reader``), the per-cluster statistics, the mixture over training and the
repetition histogram, and ``plan.json`` the record (options, statistics, checksums).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np

from clusterclip.contract.cluster import CLUSTER_STAGE, LABELS, SIZES
from clusterclip.contract.corpus import CORPUS_STAGE, TOKENS, CorpusRecord, field_files, load_fields
from clusterclip.contract.dedup import DEDUP_STAGE, GROUP, KEPT, load_groups
from clusterclip.contract.embed import EMBED_STAGE
from clusterclip.contract.plan import (
    PLAN_BLOCKS,
    PLAN_DRAWS,
    PLAN_EXHAUSTED_AT,
    PLAN_FIELDS,
    PLAN_FORMAT,
    PLAN_MAX_REPEAT,
    PLAN_MIXTURE,
    PLAN_ORDER,
    PLAN_PRIOR,
    PLAN_REPEAT_HIST,
    PLAN_STRATA,
    PLAN_TIER_MIXTURE,
    PLAN_TIERS,
    PLAN_TOKENS,
    PLAN_UNIQUE,
    STRATA_COLUMNS,
    PlanRecord,
    list_plans,
    plan_path,
    plan_stage_name,
)
from clusterclip.contract.plan_identity import short
from clusterclip.contract.plan_reader import BLOCK_ENTRIES, CHECKSUM
from clusterclip.errors import disk_full_at
from clusterclip.plan.build import Plan, build_plan
from clusterclip.plan.chain import inherit, same_groups
from clusterclip.plan.chain import overrides as chain_overrides
from clusterclip.plan.config import MAX_BUDGET, PlanConfig, PlanConfigError
from clusterclip.plan.duplicates import GroupSide, grouped_plan
from clusterclip.plan.prior import prior_counts
from clusterclip.settings import command_flags
from clusterclip.stages import Built, Job, Stage, run_stage
from clusterclip.store import RUN, RunDir, StaleArtifactError, config_hash, load_npy, save_npy
from clusterclip.store.layout import record

TOKEN_FIT = 2
"""Version of how a token budget is met: 2 fits the plan's total to the budget within one document (1: each
cluster within one document, the total within one per cluster). In a token plan's input hash, so token plans of
version 1 are rebuilt."""
MAX_WINDOWS = 100_000
"""Most mixture windows a plan may have (the mixture is windows x clusters int64): a smaller ``--window``
on a long plan is refused with the smallest window allowed."""


def plan_stage(run: RunDir, config: PlanConfig, force: bool = False,
               continues: dict[str, Any] | None = None) -> PlanRecord:
    """Build ``plans/<config.name()>/`` from the run's labels (and tokens), unless it is fresh.

    Uses token counts whenever the corpus stage has written them (required for a token budget). The
    caller holds the run-directory lock. Returns the stage record (statistics under ``"stats"``, the
    order's content hash under ``"identity"``). ``continues`` (from :func:`continuation`) builds a
    continuation of a parent plan instead, named and recorded with its parent and switch position; its cap
    counts the draws of the whole chain of ancestors. It depends on the parent's files only while it is
    built (they are verified then), so re-planning or deleting the parent later leaves it usable.
    """
    use_tokens = _check_inputs(run, config)
    inputs, reads = _inputs(run, config, use_tokens, continues)
    name = config.name()
    if continues is not None:
        name = f"{name}-cont-{short(continues['identity'])[:8]}-at{continues['consumed']}"

    def build(job: Job) -> Built:
        labels = np.asarray(load_npy(run.path(LABELS), mmap=True))
        k = int(load_npy(run.path(SIZES)).shape[0]) if run.path(SIZES).exists() else None
        tokens = np.asarray(load_npy(run.path(TOKENS), mmap=True)) if use_tokens else None
        prior = None if continues is None else chain_prior(run, continues, labels.shape[0])
        side = GroupSide(prior, load_fields(run, config.field_names()) if config.field_names() else None)
        plan = _order(run, config, labels, tokens, run.path(plan_path(name, PLAN_ORDER)), k, side)
        arrays = {PLAN_BLOCKS: plan.checksums, PLAN_DRAWS: plan.per_cluster["draws"],
                  PLAN_UNIQUE: plan.per_cluster["unique"],
                  PLAN_MAX_REPEAT: plan.per_cluster["max_repeat"],
                  PLAN_EXHAUSTED_AT: plan.per_cluster["exhausted_at"], PLAN_MIXTURE: plan.mixture,
                  PLAN_REPEAT_HIST: plan.repeat_hist}
        if "tokens" in plan.per_cluster:
            arrays[PLAN_TOKENS] = plan.per_cluster["tokens"]
        arrays.update(strata_arrays(plan))
        fields = dict(name=name, plan_format=PLAN_FORMAT, identity=plan.identity, stats=plan.stats,
                      blocks={"file": PLAN_BLOCKS, "entries": BLOCK_ENTRIES, "checksum": CHECKSUM,
                              "index_range": [0, int(labels.shape[0])]})
        if continues is not None and prior is not None:
            arrays[PLAN_PRIOR] = prior.astype(np.min_scalar_type(int(prior.max(initial=0))))
            fields.update(_continuation_fields(run, config, continues, prior, plan))
        for fname, arr in arrays.items():
            save_npy(run.path(plan_path(name, fname)), arr)
        return Built([plan_path(name, f) for f in (PLAN_ORDER, *arrays)], fields)

    corpus = CorpusRecord.read(run)
    _check_windows(config, corpus.count if corpus is not None else None)
    with disk_full_at(run.path(plan_path(name)), kept="the temp files were removed"):
        return run_stage(run, Stage(plan_stage_name(name), config.to_json(), config_hash(inputs), build, reads,
                                    command=plan_argv(config, continues), record=PlanRecord), force)


def _inputs(run: RunDir, config: PlanConfig, use_tokens: bool,
            continues: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """What a plan is built from (its input hash's parts) and the upstream files it reads (verified first)."""
    inputs: dict[str, Any] = {"cluster": run.output_hash(CLUSTER_STAGE), "plan_format": PLAN_FORMAT}
    if config.budget_unit == "tokens":
        inputs["token_fit"] = TOKEN_FIT
    reads = {CLUSTER_STAGE: [LABELS, SIZES]}
    if use_tokens:
        inputs["corpus"] = run.output_hash(CORPUS_STAGE)
        reads[CORPUS_STAGE] = [TOKENS]
    if config.duplicates != "none":
        inputs["dedup"] = run.output_hash(DEDUP_STAGE)
        reads[DEDUP_STAGE] = [GROUP, KEPT]
    if config.field_names():
        inputs["corpus"] = run.output_hash(CORPUS_STAGE)
        reads.setdefault(CORPUS_STAGE, []).extend(rel for n in _kept_fields(run, config) for rel in field_files(n))
    if continues is not None:
        inputs["continues"] = continues
        inputs["parent_prior"] = _parent_prior_hash(run, continues["name"])
    return inputs, reads


def chain_prior(run: RunDir, continues: Mapping[str, Any], n_docs: int) -> np.ndarray:
    """Draws per document before a continuation's position 0: the parent's own prior (``prior.npy``, itself
    summed over its ancestors) plus the parent's first ``consumed`` draws. The parent's files are verified
    (checksums) and must hold the order ``continues`` names."""
    parent = plan_stage_name(continues["name"])
    rec = PlanRecord.require(run, parent, verify=False)
    if rec.order_identity() != continues["identity"]:
        raise StaleArtifactError(
            f"{run.root}: plan {continues['name']!r} was re-planned since this continuation was asked for (its "
            f"order is not {short(continues['identity'])}); continue the plan training reads")
    run.verify(parent, rec.to_json())
    prior = prior_counts(load_npy(run.path(plan_path(continues["name"], PLAN_ORDER)), mmap=True),
                         continues["consumed"], n_docs)
    if plan_path(continues["name"], PLAN_PRIOR) in rec.artifacts:
        before = load_npy(run.path(plan_path(continues["name"], PLAN_PRIOR))).astype(np.int64)
        prior[:before.shape[0]] += before
    return prior


def _parent_prior_hash(run: RunDir, parent: str) -> str | None:
    """The SHA-256 of the parent's ``prior.npy`` (None for a parent that continues nothing): part of a
    continuation's inputs, with the parent's identity."""
    rec = PlanRecord.read(run, plan_stage_name(parent))
    return None if rec is None else rec.artifact_sha256(plan_path(parent, PLAN_PRIOR))


def _continuation_fields(run: RunDir, config: PlanConfig, continues: dict[str, Any], prior: np.ndarray,
                         plan: Plan) -> dict[str, Any]:
    """A continuation's own record fields: its parent, its chain, and what the chain did to the cap (the most any
    document was drawn over the chain, those above the cap before the switch, the inherited settings it changed)."""
    over = 0 if config.max_repeat is None else int((prior > config.max_repeat).sum())
    parent = PlanConfig.from_recorded(PlanRecord.require(run, plan_stage_name(continues["name"]), verify=False).config)
    changed = chain_overrides(parent, config)
    return dict(continues=continues, ancestors=_ancestors(run, continues),
                stats={**plan.stats, "max_total_repeat": int(plan.per_cluster["max_total"].max()),
                       "over_cap_before": over, **({"overrides": changed} if changed else {})})


def _ancestors(run: RunDir, continues: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The chain a continuation continues, root first: the parent's ``ancestors`` (or its ``continues``, for
    records written before chains), then the parent itself."""
    rec = PlanRecord.read(run, plan_stage_name(continues["name"]))
    return [*(rec.chain() if rec is not None else []), dict(continues)]


def _check_windows(config: PlanConfig, n_docs: int | None) -> None:
    """Refuse a ``--window`` that would cut a plan of documents (``n_docs``: one epoch, when known) into more
    than :data:`MAX_WINDOWS` windows, before anything is written."""
    draws = config.budget if config.budget is not None else \
        config.budget_for(n_docs) if isinstance(n_docs, int) else None
    if config.window is None or config.budget_unit != "docs" or draws is None:
        return
    if -(-draws // config.window) > MAX_WINDOWS:
        raise PlanConfigError("window", f"{config.window} cuts {draws:,} draws into more than {MAX_WINDOWS:,} "
                              f"mixture windows; use --window {-(-draws // MAX_WINDOWS)} or more", type(config))


def _order(run: RunDir, config: PlanConfig, labels: np.ndarray, tokens: np.ndarray | None, out: Any,
           k: int | None, side: GroupSide) -> Plan:
    """The plan's order: over every document, or over the duplicate groups of ``clusterclip dedup``."""
    if config.duplicates == "none":
        return build_plan(labels, config, tokens=tokens, out=out, n_clusters=k, prior=side.prior, fields=side.fields)
    return grouped_plan(labels, config, load_groups(run), tokens=tokens, out=out, n_clusters=k, side=side)


def _kept_fields(run: RunDir, config: PlanConfig) -> list[str]:
    """The kept fields the plan's strata read (``--keep-fields`` of the corpus stage); refused when one is not."""
    names = config.field_names()
    rec = CorpusRecord.read(run)
    kept = (rec.fields if rec is not None else None) or {}
    missing = [n for n in names if n not in kept]
    if missing:
        param = "within" if missing[0] == config.within else "strata"
        raise PlanConfigError(param, f"names field {missing[0]!r}, which the corpus did not keep (fields kept: "
                              f"{', '.join(kept) or 'none'}); re-read the corpus with --keep-fields "
                              f"{','.join([*kept, *missing])}", type(config))
    return names


def strata_arrays(plan: Plan) -> dict[str, np.ndarray]:
    """A plan over strata's own files: each document's tier, one row per stratum, the tiers over the run."""
    if plan.per_stratum is None or plan.tiers is None or plan.tier_mixture is None:
        return {}
    per = plan.per_stratum
    rows = np.stack([per.get(c, np.full(per["cluster"].shape, -1, np.int64)) for c in STRATA_COLUMNS], axis=1)
    tiers = plan.tiers.astype(np.min_scalar_type(-max(int(plan.tiers.max(initial=0)), 1)))
    return {PLAN_TIERS: tiers, PLAN_STRATA: rows.astype(np.int64), PLAN_TIER_MIXTURE: plan.tier_mixture}


def plan_argv(config: PlanConfig, continues: Mapping[str, Any] | None = None) -> list[str]:
    """The ``clusterclip plan`` command line that builds this plan (``WEIGHTS_FILE`` stands for the
    weights, whose file is not kept)."""
    values = {k: v for k, v in config.to_json().items() if k != "weights"}
    if continues is None and config.budget is None:
        values["epochs"] = config.epochs or 1  # stated: the command line's default is not PlanConfig's one epoch
    default = PlanConfig(strategy=config.strategy, weights=config.weights).to_json()
    out = ["clusterclip", "plan", RUN, *command_flags(PlanConfig, values, PLAN_FIELDS, default,
                                                      always=("strategy",))]
    if config.weights is not None:
        out += ["--weights", "WEIGHTS_FILE"]
    if continues is not None:
        out += ["--continue", str(continues["name"]), "--consumed", str(continues["consumed"])]
    return out


def _check_inputs(run: RunDir, config: PlanConfig) -> bool:
    """Refuse what the plan cannot be built from (a zero budget, a stale clustering, token counts whose
    corpus record is gone); returns whether the plan uses token counts."""
    if config.budget == 0:
        raise PlanConfigError("budget", f"must be an integer in 1..{MAX_BUDGET} (or None: one epoch), got 0",
                              type(config))
    if run.record(EMBED_STAGE) is not None:
        run.require_current(CLUSTER_STAGE, EMBED_STAGE)
    corpus = CorpusRecord.read(run)
    if corpus is None and run.path(TOKENS).exists():
        raise StaleArtifactError(
            f"{run.root}: `{TOKENS}` is here but the corpus record `{record(CORPUS_STAGE)}` is gone, so the "
            f"token counts cannot be trusted; rebuild: `{run.rebuild_command(CORPUS_STAGE, None, force=True)}`")
    return config.budget_unit == "tokens" or (corpus is not None and (
        TOKENS in corpus.artifacts or run.path(TOKENS).exists()))


def continuation(run: RunDir, config: PlanConfig, parent: str, consumed: int,
                 explicit: Collection[str] | None = None) -> tuple[PlanConfig, dict[str, Any]]:
    """The settings and parent of a plan continuing ``parent`` after its first ``consumed`` positions.

    The budget is the continuation's own length; without one it is the parent's remaining length, so the
    run keeps the length it was scheduled for. Every constraint of the parent (:data:`~clusterclip.plan.chain.
    INHERITED`: its cap, duplicate policy, strata, tier weights and caps) holds for the continuation unless named
    in ``explicit`` (the settings the caller set; None: those ``config`` sets to other than their default); an
    explicit change is recorded in the plan's statistics (``overrides``). Returns ``(config, continues)`` for
    :func:`plan_stage`.
    """
    if parent not in list_plans(run):
        raise PlanConfigError("continue", f"names no finished plan {parent!r}; plans here: "
                              f"{', '.join(list_plans(run)) or 'none'}")
    rec = PlanRecord.require(run, plan_stage_name(parent), verify=False)
    same_groups(run, rec)
    length = rec.length
    if not 0 <= consumed <= length:
        raise PlanConfigError("consumed", f"must be in 0..{length} (the length of plan {parent!r}), got {consumed}")
    if config.epochs is not None:
        raise PlanConfigError("epochs", "does not apply to --continue: a continuation's budget is what remains of its "
                              "parent, or --budget", type(config))
    if config.budget is None:
        if consumed == length:
            raise PlanConfigError("consumed", f"is the whole of plan {parent!r} ({length:,} positions): nothing of it "
                                  "remains to continue; give --budget N for the draws of the continuation")
        config = dataclasses.replace(config, budget=length - consumed)
    config = inherit(PlanConfig.from_recorded(rec.config), config, explicit)[0]
    return config, {"name": parent, "identity": rec.order_identity(), "consumed": int(consumed)}
