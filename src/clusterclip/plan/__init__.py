"""ClusterClip Sampling as pure steps: settings, quotas, passes, order, statistics, and the run stage.

``build_plan(labels, PlanConfig(...))`` returns the ordered plan; ``plan_stage`` builds it in a run
directory. The method and its guarantees are specified in ``docs/sampling.md``.
"""

from clusterclip.errors import InfeasiblePlanError
from clusterclip.plan.build import DEFAULT_CHUNK, Plan, build_plan
from clusterclip.plan.config import PLAN_FIELDS, STRATEGIES, PlanConfig, PlanConfigError, load_weights
from clusterclip.plan.identity import identity_of
from clusterclip.plan.integrity import BLOCK_ENTRIES, PlanIntegrityError, PlanReader, block_checksums, open_plan
from clusterclip.plan.quotas import round_quotas, water_fill
from clusterclip.plan.reference import reference_order
from clusterclip.plan.stage import PLAN_FORMAT, continuation, list_plans, plan_stage
from clusterclip.plan.stats import N_WINDOWS

__all__ = [
    "BLOCK_ENTRIES", "DEFAULT_CHUNK", "N_WINDOWS", "PLAN_FIELDS",
    "PLAN_FORMAT", "STRATEGIES",
    "InfeasiblePlanError", "Plan", "PlanConfig", "PlanConfigError", "PlanIntegrityError", "PlanReader",
    "block_checksums", "build_plan", "continuation", "identity_of", "list_plans", "load_weights", "open_plan",
    "plan_command",
    "plan_stage", "reference_order", "round_quotas", "water_fill",
]
