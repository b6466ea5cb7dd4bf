"""Compatibility name for :mod:`clusterclip.plan` (the planner's home since the plan package).

``from clusterclip.sampling import PlanConfig, build_plan, plan_stage`` keeps working.
"""

from clusterclip.plan import *  # noqa: F403
from clusterclip.plan import __all__  # noqa: F401
