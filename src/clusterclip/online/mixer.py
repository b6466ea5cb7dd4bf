"""``OnlineMixer``: the training loop's side of online mixing.

The loop reports each trained sample's cluster and loss (:meth:`OnlineMixer.report`, summed per cluster and
all-reduced over the ranks); every ``every`` positions :meth:`OnlineMixer.maybe_update` turns the window into new
weights and writes a continuation of the current plan from the current position (strategy ``weights``, the root
plan's cap, order, window and seed), and :meth:`OnlineMixer.sampler` gives the sampler on it, loaded with the
state at the switch. The controller's state that produced a plan is saved beside it (``online.json``); the
mixer's own state (:meth:`OnlineMixer.state_dict`) goes into the training checkpoint for an exact resume.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from clusterclip.cluster.contract import LABELS, SIZES
from clusterclip.errors import ClusterClipError
from clusterclip.online.contract import ONLINE_RECORD
from clusterclip.online.controller import Controller, continuation_config
from clusterclip.plan.config import PlanConfig
from clusterclip.plan.contract import PlanRecord, list_plans, plan_path, plan_records, plan_stage_name
from clusterclip.plan.stage import continuation, plan_stage
from clusterclip.store import RunDir, load_json, load_npy, save_json
from clusterclip.torch.sampler import ClusterClipSampler

MIXER_FORMAT = 1


def _distributed() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def _all_reduce(values: np.ndarray) -> np.ndarray:
    """``values`` summed over the ranks (as they are without a process group)."""
    if _distributed()[1] == 1:
        return values
    t = torch.from_numpy(np.ascontiguousarray(values, np.float64))
    if torch.distributed.get_backend() == "nccl":
        t = t.to(torch.device("cuda", torch.cuda.current_device()))
    torch.distributed.all_reduce(t)
    return t.cpu().numpy()


def _agree(rank: int, world: int, failed: bool) -> list[int]:
    """The ranks that failed to prepare or write (rank 0) a continuation: one collective that every rank enters
    in success and failure alike, where a barrier would leave the others waiting forever on a rank that raised."""
    if world == 1:
        return [rank] if failed else []
    flags = np.zeros(world)
    flags[rank] = float(failed)
    return np.flatnonzero(_all_reduce(flags)).tolist()


class OnlineMixer:
    """Steers the cluster mixture of a training run from its losses, one continuation plan per window.

    ``plan_name`` is the root plan (its cap, order, window and seed hold for every continuation; the chain's
    total length stays the root's). ``every``: plan positions (global samples) between updates. ``rule`` and
    the controller settings (``eta``, ``alpha``, ``floor``, ``smoothing``, ``seed``: default the root's) are
    :class:`~clusterclip.online.controller.Controller`'s. Under ``torch.distributed`` every rank keeps the same
    state (reports are all-reduced); rank 0 writes the plans, the others open them, and a rank that fails to
    write one makes every rank raise instead of leaving them waiting.
    """

    def __init__(self, run_dir: str | os.PathLike[str], plan_name: str, every: int, rule: str = "bandit",
                 **settings: Any) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ClusterClipError(f"every must be an integer >= 1 (plan positions between updates), got {every!r}")
        self.run = RunDir(run_dir)
        root = PlanRecord.require(self.run, plan_stage_name(plan_name), verify=False)
        self.root, self.every, self.end = plan_name, every, root.length
        self.config = root.plan_config()
        self.labels = load_npy(self.run.path(LABELS), mmap=True)
        sizes = self.run.path(SIZES)
        k = int(load_npy(sizes).shape[0]) if sizes.exists() else int(np.max(self.labels, initial=-1)) + 1
        settings.setdefault("seed", self.config.seed)
        self.controller = Controller.start(k, rule, **settings)
        self.plan, self.start = plan_name, 0
        self._reset()

    def _reset(self) -> None:
        k = len(self.controller.weights)
        self.sums, self.counts, self.steps = np.zeros(k), np.zeros(k), 0

    def report(self, cluster_ids: Any, losses: Any) -> None:
        """Add trained samples: their clusters (``mixer.labels[documents]``) and losses, one per sample. Every
        rank calls it for each step (the sums are all-reduced, so all ranks hold the same window)."""
        ids = np.asarray(cluster_ids, np.int64).reshape(-1)
        loss = np.asarray(losses.detach().cpu() if isinstance(losses, torch.Tensor) else losses,
                          np.float64).reshape(-1)
        k = self.sums.size
        if ids.shape != loss.shape or (ids.size and (ids.min() < 0 or ids.max() >= k)):
            raise ClusterClipError(f"report needs one cluster id in 0..{k - 1} per loss, got {ids.size} ids for "
                                   f"{loss.size} losses")
        window = np.concatenate([np.bincount(ids, loss, k), np.bincount(ids, minlength=k).astype(np.float64)])
        window = _all_reduce(window)
        self.sums += window[:k]
        self.counts += window[k:]
        self.steps += 1

    def position(self, state: Mapping[str, Any]) -> int:
        """The run's global position at a sampler ``state`` of the current plan."""
        if state.get("plan") != self.plan or state.get("epoch", 0):
            raise ClusterClipError(f"the sampler state is of plan {state.get('plan')!r} epoch {state.get('epoch')}, "
                                   f"but the mixer is in plan {self.plan!r} epoch 0; give the current sampler's state")
        return self.start + int(state["consumed"])

    def maybe_update(self, position: int) -> str | None:
        """At global ``position``, when ``every`` positions have passed since the current plan started (and
        some of the run is left for every rank): new weights from the window and a continuation from here.
        Returns the new plan's name (now :attr:`plan`), else None."""
        left = self.end - position
        if position - self.start < self.every or left < _distributed()[1]:
            return None
        controller = self.controller.update(self.sums, self.counts, max(self.steps, 1))
        rank, world = _distributed()
        try:
            cfg, continues = continuation(self.run, continuation_config(controller, self.config), self.plan,
                                          position - self.start)
            name = self._write(cfg, continues, controller, position) if rank == 0 else None
        except BaseException:
            _agree(rank, world, failed=True)
            raise
        failed = _agree(rank, world, failed=False)
        if failed:
            who = ", ".join(map(str, failed))
            raise ClusterClipError(f"{self.run.root}: rank {who} failed to write the continuation of plan "
                                   f"{self.plan!r} at position {position}; the error is in the log of rank {who}")
        if name is None:
            name = _find(self.run, cfg, continues)
        self.plan, self.start, self.controller = name, position, controller
        self._reset()
        return name

    def _write(self, cfg: PlanConfig, continues: dict[str, Any], controller: Controller, position: int) -> str:
        """Rank 0: the continuation and its record, written under the run-directory lock; the plan's name."""
        with self.run.lock(wait=True):
            name = plan_stage(self.run, cfg, continues=continues).name
        save_json(self.run.path(plan_path(name, ONLINE_RECORD)), self._record(controller, position))
        return name

    def _record(self, controller: Controller, position: int) -> dict[str, Any]:
        return {"format": MIXER_FORMAT, "root": self.root, "parent": self.plan, "position": position,
                "every": self.every, "controller": controller.to_json(),
                "window": {"sums": self.sums.tolist(), "counts": self.counts.tolist(), "steps": self.steps}}

    def sampler(self, state: Mapping[str, Any] | None = None, **options: Any) -> ClusterClipSampler:
        """A sampler on the current plan (``options``: the sampler's), loaded with ``state``: the parent's state
        at the switch position (right after an update) or the current plan's own (a resume)."""
        sampler = ClusterClipSampler(self.run.root, plan_name=self.plan, **options)
        if state is not None:
            sampler.load_state_dict(state)
        return sampler

    def maybe_switch(self, state: Mapping[str, Any], **options: Any) -> ClusterClipSampler | None:
        """:meth:`maybe_update` at the position of the current sampler's ``state`` (what was trained); on an
        update, the sampler that continues there on the new plan (:meth:`sampler`), else None."""
        return None if self.maybe_update(self.position(state)) is None else self.sampler(state, **options)

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint needs to resume exactly: the current plan, where it started, the controller and
        this window's sums (the same on every rank)."""
        return {"format": MIXER_FORMAT, "root": self.root, "every": self.every, "plan": self.plan,
                "start": self.start, "controller": self.controller.to_json(),
                "sums": self.sums.tolist(), "counts": self.counts.tolist(), "steps": self.steps}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from :meth:`state_dict` (any world size). The current plan must be in the run directory."""
        if state.get("format") != MIXER_FORMAT or state.get("root") != self.root:
            raise ClusterClipError(f"not a mixer state of root plan {self.root!r} (format {MIXER_FORMAT}): "
                                   f"root {state.get('root')!r}, format {state.get('format')!r}")
        if state["plan"] not in list_plans(self.run):
            raise ClusterClipError(f"{self.run.root}: the mixer state continues plan {state['plan']!r}, which is not "
                                   "in the run directory")
        self.every, self.plan, self.start = int(state["every"]), str(state["plan"]), int(state["start"])
        self.controller = Controller.from_json(state["controller"])
        self.sums = np.asarray(state["sums"], np.float64)
        self.counts = np.asarray(state["counts"], np.float64)
        self.steps = int(state.get("steps", 0))


def _find(run: RunDir, config: PlanConfig, continues: Mapping[str, Any]) -> str:
    """The name of the continuation rank 0 wrote for ``config`` and ``continues``."""
    want = config.to_json()
    for name, rec in plan_records(run).items():
        if rec.continues == dict(continues) and rec.config == want:
            return name
    raise ClusterClipError(f"{run.root}: rank 0 wrote no continuation of {continues['name']!r} at "
                           f"{continues['consumed']} (did it fail?)")


def online_record(run_dir: str | os.PathLike[str], plan_name: str) -> dict[str, Any] | None:
    """The controller state and window that chose a continuation's weights (None for a plan not written by a
    mixer)."""
    path = RunDir(run_dir).path(plan_path(plan_name, ONLINE_RECORD))
    return load_json(path) if path.exists() else None
