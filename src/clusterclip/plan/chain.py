"""The one rule of a chain of plans: a continuation keeps every constraint of the plan it continues.

A continuation (``plan --continue``, an online mixer's next plan, a tuned plan's next step) plans the rest of a
run under new settings, and its prefix's draws count against the cap (``prior``). What the run promised stays
promised: the per-document cap, the duplicate policy and its group caps, the strata with their tier weights and
tier caps, quality-weighted draws and the rehydration curve are taken from the parent (which took them from its
own parent, back to the root) unless the caller sets one explicitly; an explicit change is returned as an
*override* (``{setting: [parent's, new]}``) that the plan's record keeps and the command prints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import Any

from clusterclip.contract.dedup import DEDUP_STAGE
from clusterclip.contract.plan import PlanRecord
from clusterclip.plan.config import STRATA_FIELDS, PlanConfig
from clusterclip.store import RunDir, StaleArtifactError

INHERITED = ("max_repeat", "duplicates", *STRATA_FIELDS)
"""The settings a continuation inherits: what its root promised about repetition and what may be drawn."""


def inherit(parent: PlanConfig, child: PlanConfig,
            explicit: Collection[str] | None = None) -> tuple[PlanConfig, dict[str, list[Any]]]:
    """``child`` with every setting of :data:`INHERITED` taken from ``parent``, except those in ``explicit``
    (which keep ``child``'s value); returns it and the overrides: the explicit settings that differ.

    ``explicit`` None: the settings ``child`` sets to other than their declared default (so a constraint is
    never dropped by leaving it out; name it in ``explicit`` to turn it off).
    """
    if explicit is None:
        explicit = set_by(child)
    unknown = sorted(set(explicit) - set(INHERITED))
    if unknown:
        raise ValueError(f"explicit names settings a continuation does not inherit: {', '.join(unknown)}")
    values: dict[str, Any] = {}
    for name in INHERITED:
        if name not in explicit:
            values[name] = _value(parent, name)
    if "duplicates" in explicit and "rehydrate_curve" not in explicit and child.duplicates != "rehydrate":
        values["rehydrate_curve"] = None  # the curve belongs to the rehydration the caller turned off
    config = dataclasses.replace(child, **values)
    return config, overrides(parent, config)


def overrides(parent: PlanConfig, child: PlanConfig) -> dict[str, list[Any]]:
    """The inherited settings ``child`` changes, ``{name: [parent's, child's]}`` (for a continuation built by
    :func:`inherit`, exactly the explicit changes)."""
    return {name: [_value(parent, name), _value(child, name)] for name in INHERITED
            if _value(parent, name) != _value(child, name)}


def set_by(config: PlanConfig) -> list[str]:
    """The inherited settings that ``config`` sets to other than their declared default."""
    defaults = {f.name: f.default for f in dataclasses.fields(PlanConfig)}
    return [name for name in INHERITED if getattr(config, name) != defaults[name]]


def _value(config: PlanConfig, name: str) -> Any:
    """A setting as the plan applies it: the cap in force (the strategy's default resolved)."""
    if name == "max_repeat":
        return config.effective_max_repeat
    return getattr(config, name)


def overrides_note(overrides: dict[str, list[Any]]) -> str | None:
    """One line naming the inherited settings a continuation changed (None when it changed none)."""
    if not overrides:
        return None
    parts = [f"{name} {old!r} -> {new!r}" for name, (old, new) in overrides.items()]
    return "this continuation overrides what its parent promised: " + "; ".join(parts)


def same_groups(run: RunDir, rec: PlanRecord) -> None:
    """Refuse to continue a plan over duplicate groups that ``dedup`` rebuilt since: its caps were per group, and
    over other groups the chain's draws would no longer be counted against them. (A re-clustering is no reason:
    the cap counts documents, and a continuation on the new clusters is how a run follows a refit.)"""
    built_on = rec.upstream.get(DEDUP_STAGE)
    if built_on is None or rec.config.dedup == "none":
        return
    now = run.require(DEDUP_STAGE, verify=False)
    if built_on != run.output_hash(DEDUP_STAGE) and built_on not in now.get("grown_from", []):  # add extends them
        raise StaleArtifactError(
            f"{run.root}: plan {rec.name!r} was planned over duplicate groups that `clusterclip dedup` has rebuilt "
            "since, so a continuation cannot keep its caps per group over the chain; re-run `clusterclip dedup` "
            "with the settings the plan was built on, or plan a new root on the run as it is now")
