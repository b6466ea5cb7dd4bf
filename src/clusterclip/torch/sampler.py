"""``ClusterClipSampler``: a distributed, resumable sampler that replays a plan, epoch after epoch.

A plan fixes the whole training stream in advance, so distribution and resumption reduce to arithmetic on
one position: epoch ``e``, plan position ``p``. Position ``p`` goes to rank ``p % world_size``; a run resumed
at ``(e, p)`` continues there whatever the number of ranks or the batch size.
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

from clusterclip.contract.export import planned_stream
from clusterclip.contract.plan_identity import identity_of
from clusterclip.contract.plan_reader import PlanReader, open_plan
from clusterclip.errors import ClusterClipError
from clusterclip.torch.plans import (
    PlanInfo,
    RowRange,
    SamplerArgumentError,
    integer,
    local_plan,
    open_checked,
    plan_file,
    plan_info,
)
from clusterclip.torch.state import STATE_FORMAT, checked_state, loader_driver

__all__ = ["ClusterClipSampler"]

_BLOCK = 1 << 16


def _dist_defaults(rank: int | None, world_size: int | None) -> tuple[int, int]:
    initialised = torch.distributed.is_available() and torch.distributed.is_initialized()
    if world_size is None:
        world_size = torch.distributed.get_world_size() if initialised else 1
    if rank is None:
        rank = torch.distributed.get_rank() if initialised else 0
    ws = integer("world_size", world_size, 1)
    return integer("rank", rank, 0, ws - 1), ws


@dataclass(frozen=True)
class _Pass:
    """One iteration over the sampler: the epoch, the plan position it started at and who drives it."""

    epoch: int
    start: int
    driver: str | None
    done: bool = False


class ClusterClipSampler(Sampler[int]):
    """Yields this rank's share of a precomputed plan, in order, resumable at any epoch and position.

    An **epoch** is one pass over the plan. The plan is already the whole schedule (its budget sets the
    draws, its cap how often a document repeats), so a run trains one epoch; epoch ``e > 0`` replays the
    same plan (repeats, and the cap, multiply). Global position ``p`` goes to rank ``p % world_size``.
    Without ``drop_last`` the end of an epoch is padded by wrapping to the plan's start so every rank yields
    as many indices (``pad`` positions, as ``DistributedSampler`` does); with it the last ``dropped < world_size``
    positions are skipped. A ``world_size`` above the plan's length is refused. ``endless=True`` streams
    epochs back to back with no pad and no end (``len()`` raises ``TypeError``), for loops counted in steps
    (the Hugging Face ``Trainer`` with ``max_steps``).

    Resuming: ``state_dict(consumed_batches=k, batch_size=b)`` is the state after the loop trained ``k``
    batches of ``b`` per rank in the current epoch (a ``DataLoader`` fetches ahead, so the sampler's own
    count runs ahead of training: a bare ``state_dict()`` under a plain ``DataLoader`` is refused). Under
    torchdata's ``StatefulDataLoader``, ``loader.state_dict()`` holds the bare ``state_dict()`` taken when each
    batch was handed over, which is exact. ``load_state_dict`` continues at the state's epoch and position
    with any world size; ``set_epoch(e)`` (DDP loops) starts epoch ``e`` unless the sampler is already in it.

    ``plan``: an int array, a ``Plan``, a ``plan.npy`` path, a plan folder or a run directory with exactly one
    plan (else ``plan_name``). Paths are memory-mapped lazily (the sampler pickles cheaply into workers) and
    each block is verified when first read (``PlanIntegrityError``). The state names the plan
    (``plan_identity``), and ``load_state_dict`` refuses another plan's state, except the parent's at the
    switch position of a continuation (``clusterclip plan --continue``; see ``docs/workflows.md``).
    """

    def __init__(self, plan: Any, rank: int | None = None, world_size: int | None = None,
                 drop_last: bool = False, start: int = 0, plan_name: str | None = None,
                 n_docs: int | None = None, endless: bool = False) -> None:
        if n_docs is not None:
            n_docs = integer("n_docs", n_docs, 1)
        for name, flag in (("drop_last", drop_last), ("endless", endless)):
            if not isinstance(flag, (bool, np.bool_)):
                raise SamplerArgumentError(f"{name} must be True or False, got {flag!r}")
        self._n_docs = n_docs
        rows = plan if isinstance(plan, RowRange) else None
        plan, plan_name = local_plan(plan, plan_name)
        self._path: Path | None = None if rows is not None else plan_file(plan, plan_name)
        self._reader_cache: PlanReader | RowRange | None = rows or open_checked(plan, plan_name, n_docs)
        self._n_docs = self._reader_cache.n_docs
        self.total = self._reader.length
        self.info = rows.info if rows is not None else plan_info(plan, plan_name)
        self.rank, self.world_size = _dist_defaults(rank, world_size)
        self.drop_last, self.endless = bool(drop_last), bool(endless)
        if self.world_size > self.total and not (self.endless and self.total):
            raise SamplerArgumentError(
                f"world_size {self.world_size} exceeds the plan's {self.total} draws: ranks would replay the plan's "
                "start beyond its repeat cap; use fewer ranks, a longer plan or endless=True")
        self._epoch, self._consumed, self._pass, self._pass_id = 0, 0, None, 0
        self._reposition(0, start)

    @classmethod
    def from_export(cls, folder: str | os.PathLike[str], rank: int | None = None, world_size: int | None = None,
                    drop_last: bool = False, endless: bool = False) -> ClusterClipSampler:
        """A sampler over the rows of an export (``clusterclip export``), which hold the plan's order already:
        it yields row positions ``0, 1, ...`` (this rank's share), with the same epochs, states and resume as
        over the corpus. Its identity is the export's stream identity: for an unpacked export, the plan's,
        so a state saved while reading the corpus through the plan resumes here and back; a state of another
        plan (or of a packed export of other settings) is refused by ``load_state_dict``. The folder's
        ``export.json`` is checked against the format's own metadata and the files' sizes, and a ``--blend``
        export (no planned stream) is refused (``clusterclip.contract.export.planned_stream``)."""
        info = planned_stream(folder)
        rows = RowRange(info.rows, PlanInfo(info.plan, info.stream_identity))
        return cls(rows, rank=rank, world_size=world_size, drop_last=drop_last, endless=endless)

    @property
    def _reader(self) -> PlanReader | RowRange:
        if self._reader_cache is None:
            self._reader_cache = open_plan(self._path, n_docs=self._n_docs)
        return self._reader_cache

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if self._path is not None:
            state["_reader_cache"] = None
        return state

    def __len__(self) -> int:
        if self.endless:
            raise TypeError("an endless ClusterClipSampler has no length (count training in steps)")
        return self._per_rank(self._consumed)

    def _per_rank(self, start: int) -> int:
        remaining = self.total - start
        return remaining // self.world_size if self.drop_last else -(-remaining // self.world_size)

    def _pads(self, start: int) -> tuple[int, int]:
        """(pad, dropped): positions an epoch continued from ``start`` repeats from the plan's start / skips."""
        if self.endless:
            return 0, 0
        rest = self.total - start
        return (0, rest % self.world_size) if self.drop_last else ((-rest) % self.world_size, 0)

    @property
    def pad(self) -> int:
        """Positions the rest of the current epoch repeats from the plan's start (0 with ``drop_last``)."""
        return self._pads(self._consumed)[0]

    @property
    def identity(self) -> str:
        """The plan's identity (content hash of its order; computed once from the order if unrecorded)."""
        if self.info.identity is None:
            self.info = PlanInfo(self.info.name, identity_of(self._reader.array), self.info.continues)
        assert self.info.identity is not None
        return self.info.identity

    @property
    def epoch(self) -> int:
        """The epoch the next iteration yields from."""
        return self._epoch

    @property
    def consumed(self) -> int:
        """The plan position (within ``epoch``) where the next iteration starts."""
        return self._consumed

    def _reposition(self, epoch: int, consumed: int) -> None:
        self._consumed = integer("consumed", consumed, 0, self.total)
        self._epoch, self._pass = epoch, None
        self._pass_id += 1  # an iterator still running no longer moves the position

    def set_consumed(self, position: int) -> None:
        """Continue the current epoch at plan position ``position``."""
        self._reposition(self._epoch, position)

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` at its first position, unless the sampler is already in it (a restored
        state, or the epoch a finished pass moved to). Going back is refused; ignored when ``endless``."""
        e = integer("epoch", epoch, 0)
        if self.endless or e == self._epoch:
            return
        if e < self._epoch:
            raise SamplerArgumentError(
                f"set_epoch({e}) but the sampler is in epoch {self._epoch} (restored or passed); epochs only move "
                "forward: start the epoch loop at sampler.epoch")
        self._reposition(e, 0)

    def state_dict(self, consumed_batches: int | None = None, batch_size: int | None = None) -> dict[str, Any]:
        """The state to save (format in ``clusterclip.torch.state``).

        With ``consumed_batches`` and ``batch_size`` (per rank): after the loop trained that many batches of
        the current epoch, whatever the loader fetched ahead. Bare: where the sampler's own iteration stands;
        refused while a plain ``DataLoader`` iterates it, exact under ``StatefulDataLoader``.
        """
        if (consumed_batches is None) != (batch_size is None):
            raise SamplerArgumentError("pass consumed_batches and batch_size together (batches trained in this "
                                       "epoch by this rank, and their size)")
        if consumed_batches is not None:
            epoch, consumed = self._after(consumed_batches, batch_size)
            return self._state(epoch, consumed, "consumed")
        if self._pass is not None and self._pass.driver == "loader":
            raise SamplerArgumentError(
                "state_dict() while a DataLoader iterates the sampler counts fetched, not trained, samples; "
                "call state_dict(consumed_batches=..., batch_size=...) or use torchdata's StatefulDataLoader")
        return self._state(self._epoch, self._consumed, "yielded")

    def _after(self, batches: Any, size: Any) -> tuple[int, int]:
        """(epoch, position) after ``batches`` batches of ``size`` per rank of the current pass."""
        k, b = integer("consumed_batches", batches, 0), integer("batch_size", size, 1)
        at = self._pass
        if at is None or (k == 0 and at.done):  # nothing trained of the epoch the sampler is in now
            at = _Pass(self._epoch, self._consumed, None)
        taken = k * b
        if self.endless:
            e, p = divmod(at.epoch * self.total + at.start + taken * self.world_size, self.total)
            return e, p
        per_rank = self._per_rank(at.start)
        if k and (k - 1) * b >= per_rank:
            raise SamplerArgumentError(
                f"consumed_batches={k} of {b} exceeds the {per_rank} samples of this rank's epoch {at.epoch} "
                f"(from plan position {at.start}); count the batches of the current epoch only")
        return at.epoch, self.total if taken >= per_rank else at.start + taken * self.world_size

    def state_at(self, epoch: int, consumed: int) -> dict[str, Any]:
        """The state at plan position ``consumed`` of epoch ``epoch``, counted by the caller (the Trainer)."""
        return self._state(integer("epoch", epoch, 0), integer("consumed", consumed, 0, self.total), "consumed")

    def _state(self, epoch: int, consumed: int, counted: str) -> dict[str, Any]:
        start = self._pass.start if self._pass is not None and self._pass.epoch == epoch else consumed
        pad, dropped = self._pads(start)
        return {"format": STATE_FORMAT, "epoch": epoch, "consumed": consumed, "plan_length": self.total,
                "world_size": self.world_size, "drop_last": self.drop_last, "pad": pad, "dropped": dropped,
                "counted": counted, "plan": self.info.name, "plan_identity": self.identity}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume at the state's epoch and position; refuses a state of another plan (see the class docstring).

        States without ``plan_identity`` (older versions) are checked by plan length only, without ``epoch``
        they are epoch 0. A state that is not a mapping, lacks ``consumed`` or holds a wrong type is refused.
        """
        state = checked_state(state)
        epoch = state.get("epoch") or 0
        theirs = state.get("plan_identity")
        if theirs is not None and theirs != self.identity:
            self._reposition(epoch, self._switch_position(state))
            return
        length = state.get("plan_length")
        if length is not None and length != self.total:
            raise ClusterClipError(
                f"state is for a plan of {length} samples but this plan has {self.total}; wrong plan?")
        self._reposition(epoch, state["consumed"])

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
        return self._replay(loader_driver())

    def _replay(self, driver: str | None) -> Iterator[int]:
        self._pass_id += 1
        me, epoch, start, ws, total = self._pass_id, self._epoch, self._consumed, self.world_size, self.total
        self._pass = _Pass(epoch, start, driver)
        count = None if self.endless else self._per_rank(start)
        base, reader, i0 = epoch * total + start, self._reader, 0
        while count is None or i0 < count:
            i1 = i0 + _BLOCK if count is None else min(i0 + _BLOCK, count)
            pos = (start + self.rank + ws * np.arange(i0, i1, dtype=np.int64)) % total
            for j, v in enumerate(reader.take(pos).tolist(), start=i0 + 1):
                if self._pass_id == me:
                    if self.endless:
                        self._epoch, self._consumed = divmod(base + j * ws, total)
                    else:
                        self._consumed = min(start + j * ws, total)
                yield v
            i0 = i1
        if self._pass_id == me:
            self._epoch, self._consumed = epoch + 1, 0
            self._pass = _Pass(epoch, start, driver, done=True)


