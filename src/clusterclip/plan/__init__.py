"""ClusterClip Sampling as pure steps: settings, quotas, passes, order and statistics.

``build_plan(labels, PlanConfig(...))`` returns the ordered plan; it and the names below are the planner's
public API, loaded on first use (``from clusterclip.plan import PlanConfig`` loads the settings and the strategy
registry alone). The plan stage is :mod:`clusterclip.plan.stage`; what other stages and trainers read of a plan
(its files, record and readers) is :mod:`clusterclip.contract.plan`. The method and its guarantees are in
``docs/sampling.md``; the strategies are classes in :mod:`clusterclip.plan.strategies`.
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "DEFAULT_CHUNK": "build", "Plan": "build", "build_plan": "build",
    "STRATEGIES": "config", "PlanConfig": "config", "PlanConfigError": "config",
    "load_weights": "weights_file", "round_quotas": "quotas", "water_fill": "quotas", "reference_order": "reference",
    "N_WINDOWS": "stats",
}
"""Each public name and the module of this package that defines it."""
_BELOW = {"InfeasiblePlanError": "clusterclip.errors", "PLAN_FIELDS": "clusterclip.contract.plan"}
"""The public names defined below the planner: its error type and the recorded settings' names."""
__all__ = sorted([*_PUBLIC, *_BELOW])


def __getattr__(name: str) -> Any:
    if name in _BELOW:
        return getattr(importlib.import_module(_BELOW[name]), name)
    if name in _PUBLIC:
        return getattr(importlib.import_module(f"{__name__}.{_PUBLIC[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
