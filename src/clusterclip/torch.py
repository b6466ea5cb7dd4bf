"""PyTorch and Hugging Face integration: a distributed, resumable sampler that replays a plan.

A plan fixes the whole training stream in advance, so distribution and resumption reduce to
arithmetic on one global position: global position ``p`` goes to rank ``p % world_size``, and a run
resumed after ``G`` samples (``G = step * global batch size``) continues at ``G`` whatever the number
of ranks. torch is an optional dependency: it is imported here only.

Hugging Face ``Trainer`` (accelerate shards each batch across processes itself, so give the
Trainer the *global* plan with ``world_size=1``)::

    class PlanTrainer(Trainer):
        def _get_train_sampler(self, train_dataset=None):
            return ClusterClipSampler(RUN_DIR, rank=0, world_size=1)
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Sampler

from clusterclip.errors import ClusterClipError
from clusterclip.plan.identity import identity_of, record_identity, short
from clusterclip.plan.integrity import (
    PlanIntegrityError,
    PlanNotFoundError,
    PlanReader,
    open_plan,
    read_record,
    resolve_plan_path,
)
from clusterclip.settings import is_int
from clusterclip.store import layout as A

__all__ = ["ClusterClipSampler", "PlanInfo", "PlanIntegrityError", "PlanNotFoundError", "SamplerArgumentError",
           "load_plan", "plan_info", "reorder_dataset", "resolve_plan_path"]

_BLOCK = 1 << 16


class SamplerArgumentError(ClusterClipError, ValueError):
    """A sampler argument or state of the wrong type or out of range (never truncated or coerced)."""


def _integer(name: str, value: Any, lo: int, hi: int | None = None) -> int:
    """``value`` as an int in ``lo..hi``; refuses bools, floats (also 7.0), strings, None, NaN."""
    span = f"{lo}..{hi}" if hi is not None else f">= {lo}"
    if not is_int(value):
        raise SamplerArgumentError(f"{name} must be an integer {span}, got {value!r} ({type(value).__name__})")
    v = int(value)
    if v < lo or (hi is not None and v > hi):
        raise SamplerArgumentError(f"{name} must be in {span}, got {v}")
    return v


def load_plan(plan: Any, plan_name: str | None = None, n_docs: int | None = None) -> np.ndarray:
    """The plan as a verified 1-D int64 array: an array (or ``Plan``) as is, a path memory-mapped read-only.

    Every block is checked (its checksum, indices in ``[0, n_docs)``; see ``clusterclip.plan.integrity``)
    before the array is returned, so this reads a file plan once; the sampler instead verifies each block
    when it first reads it.
    """
    return open_plan(plan, plan_name, n_docs).verified()


@dataclass(frozen=True)
class PlanInfo:
    """Who a plan is: its ``name`` (folder under ``plans/``), ``identity`` (content hash of the order;
    ``None`` when it must be computed from the order) and, for a continuation, ``continues``: the parent's
    ``name``, ``identity`` and the position ``consumed`` where training switches."""

    name: str | None = None
    identity: str | None = None
    continues: Mapping[str, Any] | None = None

    def describe(self, identity: str | None = None) -> str:
        """``name (hash)`` for messages."""
        return f"{self.name or 'unnamed plan'} ({short(identity or self.identity)})"


def plan_info(plan: Any, plan_name: str | None = None) -> PlanInfo:
    """The name, identity and parent of a plan given as ``load_plan`` takes it (read from ``plan.json``).

    A path without a record, or an array, has no name and its identity is computed from the order
    (``clusterclip.plan.identity_of``) when first needed.
    """
    if hasattr(plan, "order") and not isinstance(plan, np.ndarray):
        return PlanInfo(plan.config.name(), plan.identity or None)
    if not isinstance(plan, (str, os.PathLike)):
        return PlanInfo()
    path = resolve_plan_path(plan, plan_name)
    rec = read_record(path)
    if rec is None:
        return PlanInfo()
    name = str(rec.get("name") or path.parent.name)
    return PlanInfo(name, record_identity(rec, A.plan_path(name, A.PLAN_ORDER)), rec.get("continues"))


def _dist_defaults(rank: int | None, world_size: int | None) -> tuple[int, int]:
    initialised = torch.distributed.is_available() and torch.distributed.is_initialized()
    if world_size is None:
        world_size = torch.distributed.get_world_size() if initialised else 1
    if rank is None:
        rank = torch.distributed.get_rank() if initialised else 0
    ws = _integer("world_size", world_size, 1)
    return _integer("rank", rank, 0, ws - 1), ws


class ClusterClipSampler(Sampler[int]):
    """Yields this rank's share of a precomputed plan, in order, resumable at any global position.

    Global position ``p`` goes to rank ``p % world_size``. Without ``drop_last`` the tail is padded by
    wrapping to the start of the plan so every rank yields the same number of indices (as
    ``DistributedSampler`` does); with it the last ``< world_size`` positions are dropped. The state is
    the number of samples consumed *globally* (``start``, ``set_consumed``, ``load_state_dict``), so a
    resumed run yields exactly the remaining positions, also with a different world size.

    ``state_dict()`` counts what this iterator has yielded (times ``world_size``). A ``DataLoader``
    fetches indices ahead of the training step (prefetching, ``num_workers``), so for an exact resume
    prefer ``set_consumed(step * global_batch_size)``. After a full pass the position returns to 0,
    so a further epoch replays the plan from its start.

    ``plan``: an int array, a ``Plan``, a ``plan.npy`` path, a plan folder or a run directory with
    exactly one plan (else pass ``plan_name``). Paths are memory-mapped lazily, so the sampler pickles
    cheaply (e.g. into ``DataLoader`` workers). Each block of the plan is verified the first time it is
    read (checksum, indices in ``[0, n_docs)``): a modified, truncated or foreign plan raises
    ``PlanIntegrityError`` naming the block and the command that rebuilds it. ``n_docs``: the corpus
    size, to range-check an array plan (a recorded plan knows its own).

    The state names the plan (``plan``, ``plan_identity``: a content hash of the order), and
    ``load_state_dict`` refuses a state from another plan, except the state of the plan this one
    continues (``clusterclip plan --continue``) taken at the switch position: training then continues at
    position 0 of this plan (see ``docs/workflows.md``).
    """

    def __init__(self, plan: Any, rank: int | None = None, world_size: int | None = None,
                 drop_last: bool = False, start: int = 0, plan_name: str | None = None,
                 n_docs: int | None = None) -> None:
        if n_docs is not None:
            n_docs = _integer("n_docs", n_docs, 1)
        if not isinstance(drop_last, (bool, np.bool_)):
            raise SamplerArgumentError(f"drop_last must be True or False, got {drop_last!r}")
        self._n_docs = n_docs
        if isinstance(plan, (str, os.PathLike)):
            self._path: Path | None = resolve_plan_path(plan, plan_name)
            self._reader_cache: PlanReader | None = None
        else:
            self._path = None
            self._reader_cache = open_plan(plan, n_docs=n_docs)
        self.total = self._reader.length
        self.info = plan_info(plan, plan_name)
        self.rank, self.world_size = _dist_defaults(rank, world_size)
        self.drop_last = bool(drop_last)
        self._consumed = 0
        self.set_consumed(start)

    @property
    def _reader(self) -> PlanReader:
        if self._reader_cache is None:
            self._reader_cache = open_plan(self._path, n_docs=self._n_docs)
        return self._reader_cache

    @property
    def _plan(self) -> np.ndarray:
        return self._reader.array

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if self._path is not None:
            state["_reader_cache"] = None
        return state

    def __len__(self) -> int:
        remaining = self.total - self._consumed
        if self.drop_last:
            return remaining // self.world_size
        return -(-remaining // self.world_size)

    @property
    def identity(self) -> str:
        """The plan's identity (content hash of its order; computed once from the order if unrecorded)."""
        if self.info.identity is None:
            self.info = PlanInfo(self.info.name, identity_of(self._plan), self.info.continues)
        assert self.info.identity is not None
        return self.info.identity

    @property
    def consumed(self) -> int:
        """Samples consumed globally (the position in the plan where the next iteration starts)."""
        return self._consumed

    def set_consumed(self, global_samples: int) -> None:
        """Resume at global position ``global_samples`` (e.g. step x global batch size)."""
        self._consumed = _integer("consumed", global_samples, 0, self.total)

    def state_dict(self) -> dict[str, Any]:
        return {"consumed": self._consumed, "plan_length": self.total, "world_size": self.world_size,
                "plan": self.info.name, "plan_identity": self.identity}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume where ``state`` was taken; refuses a state of another plan (see the class docstring).

        States without ``plan_identity`` (older versions) are checked by plan length only. A state that is
        not a mapping, lacks ``consumed`` or holds a value of the wrong type is refused.
        """
        state = _checked_state(state)
        theirs = state.get("plan_identity")
        if theirs is not None and theirs != self.identity:
            self.set_consumed(self._switch_position(state))
            return
        length = state.get("plan_length")
        if length is not None and length != self.total:
            raise ClusterClipError(
                f"state is for a plan of {length} samples but this plan has {self.total}; wrong plan?")
        self.set_consumed(state["consumed"])

    def _switch_position(self, state: Mapping[str, Any]) -> int:
        """0 when ``state`` is the parent's at the switch position; otherwise the refusal."""
        parent = self.info.continues
        other = PlanInfo(state.get("plan")).describe(state["plan_identity"])
        mine = self.info.describe(self.identity)
        if parent is None or parent.get("identity") != state["plan_identity"]:
            raise ClusterClipError(f"state is from plan {other}, but this sampler replays plan {mine}; load the "
                                   "state into the plan it was saved from (or a plan that continues it)")
        at, consumed = int(parent["consumed"]), int(state["consumed"])
        if consumed != at:
            raise ClusterClipError(
                f"state is from plan {other} at position {consumed}, but this plan {mine} continues it at position "
                f"{at}; resume the parent plan until position {at}, or build a continuation with --consumed {consumed}")
        return 0

    def __iter__(self) -> Iterator[int]:
        start, ws, total = self._consumed, self.world_size, self.total
        count = len(self)
        reader = self._reader
        plan = reader.array
        for i0 in range(0, count, _BLOCK):
            i1 = min(i0 + _BLOCK, count)
            pos = start + self.rank + ws * np.arange(i0, i1, dtype=np.int64)
            first, last = int(pos[0]), int(pos[-1])
            if last >= total:
                pos %= total
                reader.check(first, total)
                reader.check(0, total if last - total >= first else last - total + 1)
            else:
                reader.check(first, last + 1)
            values = np.asarray(plan[pos]).tolist()
            for j, v in enumerate(values, start=i0 + 1):
                self._consumed = min(start + j * ws, total)
                yield v
        self._consumed = 0


def _checked_state(state: Any) -> dict[str, Any]:
    """A sampler state with its types checked: ``consumed`` (int) required; ``plan_length``, ``world_size``
    (int), ``plan``, ``plan_identity`` (str) optional."""
    if not isinstance(state, Mapping):
        raise SamplerArgumentError(f"a sampler state is a mapping (from state_dict()), got {type(state).__name__}")
    if "consumed" not in state:
        raise SamplerArgumentError(f"sampler state has no 'consumed' (keys: {', '.join(map(str, state)) or 'none'}); "
                                   "pass the dict that ClusterClipSampler.state_dict() returned")
    out = dict(state)
    for key in ("consumed", "plan_length", "world_size"):
        if key in out and (key == "consumed" or out[key] is not None):
            out[key] = _integer(f"state[{key!r}]", out[key], 0)
    for key in ("plan", "plan_identity"):
        if out.get(key) is not None and not isinstance(out[key], str):
            raise SamplerArgumentError(f"state[{key!r}] must be a string, got {out[key]!r}")
    return out


def reorder_dataset(dataset: Any, plan: Any, plan_name: str | None = None) -> Any:
    """A Hugging Face ``datasets.Dataset`` in plan order (repeats expanded): ``dataset.select(plan)``.

    ``select`` stores an index mapping (8 bytes per planned sample), not copies of the rows. The whole
    plan is verified first (checksums, index range), and must index rows of ``dataset``.
    """
    order = load_plan(plan, plan_name)
    n = len(dataset)
    if order.size and (int(order.max()) >= n or int(order.min()) < 0):
        raise ClusterClipError(f"plan holds document index {int(order.max())} but the dataset has {n} rows; "
                               "was the plan built for this corpus?")
    return dataset.select(np.asarray(order))
