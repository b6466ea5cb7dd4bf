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

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Sampler

from clusterclip.errors import ClusterClipError

_BLOCK = 1 << 16


class PlanNotFoundError(ClusterClipError):
    """The plan given to the sampler cannot be located unambiguously."""


def resolve_plan_path(plan: str | os.PathLike[str], plan_name: str | None = None) -> Path:
    """Path of ``plan.npy`` given that file, its plan folder, or a run directory.

    A run directory must hold exactly one finished plan unless ``plan_name`` picks one.
    """
    from clusterclip import artifacts as A
    from clusterclip.plan import list_plans
    from clusterclip.rundir import RunDir

    p = Path(plan)
    if p.is_file():
        return p
    if not p.is_dir():
        raise PlanNotFoundError(f"{p}: no such plan file or directory")
    if plan_name is None and (p / A.PLAN_ORDER).is_file():
        return p / A.PLAN_ORDER
    names = list_plans(RunDir(p))
    if plan_name is not None:
        if plan_name not in names:
            raise PlanNotFoundError(f"{p}: no finished plan {plan_name!r}; plans here: {', '.join(names) or 'none'}")
        return p / A.plan_path(plan_name, A.PLAN_ORDER)
    if not names:
        raise PlanNotFoundError(f"{p}: no plan.npy and no finished plans/; run `clusterclip plan {p}` first")
    if len(names) > 1:
        raise PlanNotFoundError(f"{p} holds {len(names)} plans; choose one with plan_name=: {', '.join(names)}")
    return p / A.plan_path(names[0], A.PLAN_ORDER)


def load_plan(plan: Any, plan_name: str | None = None) -> np.ndarray:
    """The plan as a 1-D int64 array: an array (or ``Plan``) as is, a path memory-mapped read-only."""
    if hasattr(plan, "order") and not isinstance(plan, np.ndarray):
        plan = plan.order
    if isinstance(plan, (str, os.PathLike)):
        arr = np.load(resolve_plan_path(plan, plan_name), mmap_mode="r", allow_pickle=False)
    else:
        arr = np.asarray(plan)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise PlanNotFoundError(f"a plan is a 1-D integer array of document indices, got {arr.dtype} {arr.shape}")
    return arr


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
        from clusterclip.plan.identity import short

        return f"{self.name or 'unnamed plan'} ({short(identity or self.identity)})"


def plan_info(plan: Any, plan_name: str | None = None) -> PlanInfo:
    """The name, identity and parent of a plan given as ``load_plan`` takes it (read from ``plan.json``).

    A path without a record, or an array, has no name and its identity is computed from the order
    (``clusterclip.plan.identity_of``) when first needed.
    """
    from clusterclip import artifacts as A
    from clusterclip.plan.identity import record_identity

    if hasattr(plan, "order") and not isinstance(plan, np.ndarray):
        return PlanInfo(plan.config.name(), plan.identity or None)
    if not isinstance(plan, (str, os.PathLike)):
        return PlanInfo()
    path = resolve_plan_path(plan, plan_name)
    record = path.parent / A.PLAN_RECORD
    if not record.is_file():
        return PlanInfo()
    rec = json.loads(record.read_text(encoding="utf-8"))
    name = str(rec.get("name") or path.parent.name)
    return PlanInfo(name, record_identity(rec, A.plan_path(name, A.PLAN_ORDER)), rec.get("continues"))


def _dist_defaults(rank: int | None, world_size: int | None) -> tuple[int, int]:
    initialised = torch.distributed.is_available() and torch.distributed.is_initialized()
    if world_size is None:
        world_size = torch.distributed.get_world_size() if initialised else 1
    if rank is None:
        rank = torch.distributed.get_rank() if initialised else 0
    if world_size < 1:
        raise ClusterClipError(f"world_size must be >= 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ClusterClipError(f"rank must be in 0..{world_size - 1}, got {rank}")
    return int(rank), int(world_size)


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
    cheaply (e.g. into ``DataLoader`` workers).

    The state names the plan (``plan``, ``plan_identity``: a content hash of the order), and
    ``load_state_dict`` refuses a state from another plan, except the state of the plan this one
    continues (``clusterclip plan --continue``) taken at the switch position: training then continues at
    position 0 of this plan (see ``docs/workflows.md``).
    """

    def __init__(self, plan: Any, rank: int | None = None, world_size: int | None = None,
                 drop_last: bool = False, start: int = 0, plan_name: str | None = None) -> None:
        if isinstance(plan, (str, os.PathLike)):
            self._path: Path | None = resolve_plan_path(plan, plan_name)
            self._array: np.ndarray | None = None
            self.total = int(self._plan.shape[0])
        else:
            self._path = None
            self._array = load_plan(plan)
            self.total = int(self._array.shape[0])
        self.info = plan_info(plan, plan_name)
        self.rank, self.world_size = _dist_defaults(rank, world_size)
        self.drop_last = bool(drop_last)
        self._consumed = 0
        self.set_consumed(start)

    @property
    def _plan(self) -> np.ndarray:
        if self._array is None:
            self._array = load_plan(self._path)
        return self._array

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if self._path is not None:
            state["_array"] = None
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
            from clusterclip.plan.identity import identity_of

            self.info = PlanInfo(self.info.name, identity_of(self._plan), self.info.continues)
        assert self.info.identity is not None
        return self.info.identity

    @property
    def consumed(self) -> int:
        """Samples consumed globally (the position in the plan where the next iteration starts)."""
        return self._consumed

    def set_consumed(self, global_samples: int) -> None:
        """Resume at global position ``global_samples`` (e.g. step x global batch size)."""
        g = int(global_samples)
        if not 0 <= g <= self.total:
            raise ClusterClipError(f"consumed must be in 0..{self.total} (the plan length), got {global_samples}")
        self._consumed = g

    def state_dict(self) -> dict[str, Any]:
        return {"consumed": self._consumed, "plan_length": self.total, "world_size": self.world_size,
                "plan": self.info.name, "plan_identity": self.identity}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume where ``state`` was taken; refuses a state of another plan (see the class docstring).

        States without ``plan_identity`` (older versions) are checked by plan length only.
        """
        theirs = state.get("plan_identity")
        if theirs is not None and theirs != self.identity:
            self.set_consumed(self._switch_position(state))
            return
        length = state.get("plan_length")
        if length is not None and int(length) != self.total:
            raise ClusterClipError(
                f"state is for a plan of {length} samples but this plan has {self.total}; wrong plan?")
        self.set_consumed(int(state["consumed"]))

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
        plan = self._plan
        for i0 in range(0, count, _BLOCK):
            i1 = min(i0 + _BLOCK, count)
            pos = start + self.rank + ws * np.arange(i0, i1, dtype=np.int64)
            if total and pos[-1] >= total:
                pos %= total
            values = np.asarray(plan[pos]).tolist()
            for j, v in enumerate(values, start=i0 + 1):
                self._consumed = min(start + j * ws, total)
                yield v
        self._consumed = 0


def reorder_dataset(dataset: Any, plan: Any, plan_name: str | None = None) -> Any:
    """A Hugging Face ``datasets.Dataset`` in plan order (repeats expanded): ``dataset.select(plan)``.

    ``select`` stores an index mapping (8 bytes per planned sample), not copies of the rows.
    """
    order = load_plan(plan, plan_name)
    n = len(dataset)
    if order.size and (int(order.max()) >= n or int(order.min()) < 0):
        raise ClusterClipError(f"plan holds document index {int(order.max())} but the dataset has {n} rows; "
                               "was the plan built for this corpus?")
    return dataset.select(np.asarray(order))
