"""The sampler's saved state: its format, its checks, and where loaders keep it.

A state is a plain dict (JSON- and ``torch.save``-friendly)::

    {"format": 2, "epoch": 3, "consumed": 480, "plan_length": 1013, "world_size": 2, "drop_last": False,
     "pad": 1, "dropped": 0, "counted": "consumed", "plan": "clusterclip-R4-...", "plan_identity": "9f0c..."}

``epoch``/``consumed``: the next sample is plan position ``consumed`` of epoch ``epoch`` (``consumed ==
plan_length``: that epoch is finished). ``pad``/``dropped``: positions the epoch in progress repeats from
the plan's start (or drops, ``drop_last``) so that every rank yields as many indices; ``counted``: whether
the position counts samples the training loop consumed or indices the sampler yielded (what torchdata's
``StatefulDataLoader`` snapshots when it hands the batch over). Format 1 states (no ``epoch``) are epoch 0.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from clusterclip.torch.plans import SamplerArgumentError, integer

__all__ = ["checked_state", "loader_driver", "sampler_state"]

STATE_FORMAT = 2
_INTS = ("consumed", "epoch", "plan_length", "world_size", "pad", "dropped")


def checked_state(state: Any) -> dict[str, Any]:
    """A sampler state with its types checked: ``consumed`` (int) required; ``epoch``, ``plan_length``,
    ``world_size`` (int), ``plan``, ``plan_identity`` (str) optional."""
    if not isinstance(state, Mapping):
        raise SamplerArgumentError(f"a sampler state is a mapping (from state_dict()), got {type(state).__name__}")
    if "consumed" not in state:
        raise SamplerArgumentError(f"sampler state has no 'consumed' (keys: {', '.join(map(str, state)) or 'none'}); "
                                   "pass the dict that ClusterClipSampler.state_dict() returned")
    out = dict(state)
    for key in _INTS:
        if key in out and (key == "consumed" or out[key] is not None):
            out[key] = integer(f"state[{key!r}]", out[key], 0)
    for key in ("plan", "plan_identity"):
        if out.get(key) is not None and not isinstance(out[key], str):
            raise SamplerArgumentError(f"state[{key!r}] must be a string, got {out[key]!r}")
    return out


def sampler_state(loader_state: Mapping[str, Any]) -> dict[str, Any]:
    """The ``ClusterClipSampler`` state inside a torchdata ``StatefulDataLoader.state_dict()``.

    Load it with ``sampler.load_state_dict(...)`` to resume with another world size, batch size or number of
    workers, which the loader's own ``load_state_dict`` does not allow (it asserts the same workers).
    """
    found = _find(loader_state)
    if found is None:
        raise SamplerArgumentError("no ClusterClipSampler state in this loader state; was the loader built with "
                                   "sampler=ClusterClipSampler(...)?")
    return found


def _find(obj: Any) -> dict[str, Any] | None:
    if isinstance(obj, Mapping):
        if "plan_identity" in obj and "consumed" in obj:
            return dict(obj)
        for value in obj.values():
            hit = _find(value)
            if hit is not None:
                return hit
    return None


def loader_driver(depth: int = 16) -> str | None:
    """Who is iterating the sampler: ``"stateful"`` (a torchdata ``StatefulDataLoader``, which snapshots the
    sampler's state when it hands a batch to the loop), ``"loader"`` (any other ``DataLoader``: it fetches
    ahead, so the sampler's own count runs ahead of training) or ``None`` (direct iteration)."""
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    frame = sys._getframe(1)
    for _ in range(depth):
        frame = frame.f_back  # type: ignore[assignment]
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        if isinstance(owner, _BaseDataLoaderIter):
            return "stateful" if type(owner).__module__.startswith("torchdata.") else "loader"
    return None
