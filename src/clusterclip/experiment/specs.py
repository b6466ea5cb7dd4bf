"""What a proxy run trains on: a *spec* (a candidate's plan options and name) and the one conversion of a
spec to the :class:`~clusterclip.plan.PlanConfig` of a proxy run.

A spec is a small JSON-able dict: ``name``, ``strategy`` and the plan options that strategy needs (any
:class:`~clusterclip.plan.config.PlanConfig` setting but the budget and seed: ``tau``; ``max_repeat``, ``order`` and,
when not ``none``, ``duplicates`` for ClusterClip; ``weights``), and the experiment's own keys: ``shuffle`` (the
diagnostic), ``online`` (the controller's rule) and ``updates`` for an online run, which starts on ClusterClip's
plan, ``clusters`` and ``clusters_identity`` for a plan over another run's clusters (:mod:`.spec_grammar`).
``clusterclip tune`` stores it in its results and hashes it into the key of every proxy run, so its shape is
part of the on-disk format.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from clusterclip.plan.config import DEFAULT_ORDER, PlanConfig


def clusterclip_spec(max_repeat: int, order: str = DEFAULT_ORDER, shuffle: bool = False,
                     duplicates: str = "none") -> dict[str, Any]:
    """A ClusterClip candidate: ``clusterclip[-spread][-shuffled]-R<cap>[-drop|-groupcap]``; ``duplicates``
    (``drop``, ``group-cap``) plans over the training split's near-duplicate groups."""
    name = "clusterclip" + ("-spread" if order == "spread" else "") + ("-shuffled" if shuffle else "")
    spec = {"name": f"{name}-R{max_repeat}", "strategy": "clusterclip", "max_repeat": int(max_repeat),
            "order": order, "shuffle": shuffle}
    if duplicates != "none":
        spec.update(name=f"{spec['name']}-{duplicates.replace('-', '')}", duplicates=duplicates)
    return spec


ONLINE_RULES = {"online": "bandit", "online:bandit": "bandit", "online:odm": "odm", "online:gradient": "gradient"}
"""The experiment's online strategies (``online[:rule]``) and their controller rule; ``online`` is the default
rule, ODM's bandit with the default exploration (uniform for the first 5 % of the run); ``odm`` is the bandit with
ODM's own schedule (uniform for K ln K steps)."""
DEFAULT_ONLINE_UPDATES = 8


def online_spec(rule: str, max_repeat: int, updates: int = DEFAULT_ONLINE_UPDATES) -> dict[str, Any]:
    """An online candidate ``online-<rule>-R<cap>[-u<updates>]``: ClusterClip's plan at the cap to start, then
    ``updates`` continuations steered by the controller's ``rule`` (:mod:`clusterclip.experiment.online`)."""
    name = f"online-{rule}-R{max_repeat}" + ("" if updates == DEFAULT_ONLINE_UPDATES else f"-u{updates}")
    return {"name": name, "strategy": "clusterclip", "max_repeat": int(max_repeat), "order": DEFAULT_ORDER,
            "shuffle": False, "online": rule, "updates": int(updates)}


def temperature_spec(tau: float) -> dict[str, Any]:
    """A temperature candidate: ``temperature-<tau>``."""
    return {"name": f"temperature-{tau:g}", "strategy": "temperature", "tau": float(tau)}


def plain_spec(strategy: str) -> dict[str, Any]:
    """A strategy without options (random, uniform)."""
    return {"name": strategy, "strategy": strategy}


FIXED = ("strategy", "budget", "epochs", "budget_unit", "seed", "window")
""":class:`PlanConfig` settings a proxy run sets itself (a budget of ``passes`` over the training tokens, the run's
seed), never a spec's."""


def plan_fields() -> dict[str, dataclasses.Field]:
    """The plan options a spec may hold: every :class:`PlanConfig` setting but :data:`FIXED` (read at call time, so
    a setting added to the planner is a spec option at once)."""
    return {f.name: f for f in dataclasses.fields(PlanConfig) if f.name not in FIXED}


def plan_options(spec: dict[str, Any]) -> dict[str, Any]:
    """A spec's :class:`PlanConfig` settings: its strategy and plan options (its other keys are the experiment's:
    ``name``, ``shuffle``, ``online``, ``clusters``, ...)."""
    fields = plan_fields()
    return {"strategy": spec["strategy"], **{k: v for k, v in spec.items() if k in fields}}


def plan_config(spec: dict[str, Any], budget: int, seed: int, budget_unit: str = "tokens") -> PlanConfig:
    """The plan of a spec for a ``budget`` (tokens: what a proxy run trains on, and ``tune``'s chosen plan;
    ``group-cap`` takes documents)."""
    return PlanConfig(**plan_options(spec), budget=budget, budget_unit=budget_unit, seed=seed)
