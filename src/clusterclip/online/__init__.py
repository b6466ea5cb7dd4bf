"""Online ClusterClip: the training run steers the cluster mixture as it learns.

Every ``every`` plan positions an :class:`~clusterclip.torch.mixer.OnlineMixer` turns the per-cluster losses the
loop reported into new weights (:mod:`clusterclip.online.controller`) and writes a continuation plan from the
current position under the root plan's cap, so the chain of plans is recorded, capped as a whole and resumable
(``docs/sampling.md``, "Online mixing"). Import :class:`OnlineMixer` from ``clusterclip.torch.mixer`` (it needs
PyTorch); the controller needs only NumPy.
"""

from __future__ import annotations

from clusterclip.online.controller import RULES, Controller, ControllerError

__all__ = ["RULES", "Controller", "ControllerError"]
