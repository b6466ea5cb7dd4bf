"""PyTorch integration: replay a plan in a training loop, distributed and resumable.

``ClusterClipSampler`` yields each rank's share of the plan, epoch after epoch, and saves a state that
counts what the training loop consumed (``state_dict(consumed_batches=, batch_size=)``) or, under torchdata's
``StatefulDataLoader``, what was handed to it. ``clusterclip.torch.hf`` holds the Hugging Face ``Trainer``
integration (imported on its own: transformers is optional). torch is imported only by this package.
"""

from __future__ import annotations

from clusterclip.errors import install_command

try:
    import torch  # noqa: F401
except ModuleNotFoundError as exc:
    if exc.name != "torch":
        raise
    raise ModuleNotFoundError(f"clusterclip.torch needs PyTorch, not installed: {install_command('torch')}",
                              name="torch") from None

from clusterclip.contract.plan_locate import PlanIntegrityError, PlanNotFoundError, resolve_plan_path
from clusterclip.torch.collate import ExportRows, TokenCollator
from clusterclip.torch.plans import PlanInfo, SamplerArgumentError, load_plan, plan_info, reorder_dataset
from clusterclip.torch.sampler import ClusterClipSampler
from clusterclip.torch.state import sampler_state

__all__ = [
           "ClusterClipSampler",
           "ExportRows",
           "PlanInfo",
           "PlanIntegrityError",
           "PlanNotFoundError",
           "SamplerArgumentError",
           "TokenCollator",
           "load_plan",
           "plan_info",
           "reorder_dataset",
           "resolve_plan_path",
           "sampler_state",
]
