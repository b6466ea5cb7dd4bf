"""``OnlineMixer``: the training loop's side of online mixing.

The loop reports each trained sample's cluster and loss (:meth:`OnlineMixer.report`, summed per cluster and
all-reduced over the ranks); every ``every`` positions :meth:`OnlineMixer.maybe_update` turns the window into new
weights and writes a continuation of the current plan from the current position (strategy ``weights``, the root
plan's cap, order, window and seed), and :meth:`OnlineMixer.sampler` gives the sampler on it, loaded with the
state at the switch. The controller's state that produced a plan is saved beside it (``online.json``); the
mixer's own state (:meth:`OnlineMixer.state_dict`) goes into the training checkpoint for an exact resume.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from clusterclip.contract.cluster import LABELS
from clusterclip.contract.online import ONLINE_RECORD, MixerRecord, mixer_stage_name
from clusterclip.contract.plan import PlanRecord, list_plans, plan_path, plan_records, plan_stage_name
from clusterclip.errors import ClusterClipError
from clusterclip.online.controller import SETTINGS, Controller, continuation_config, uniform_steps
from clusterclip.online.state import (
    STATE_FORMAT,
    MixerState,
    OnlineRecord,
    OnlineStateError,
    Window,
    chain_start,
    read_online_record,
    run_identity,
)
from clusterclip.plan.config import PlanConfig
from clusterclip.plan.stage import continuation, plan_stage
from clusterclip.settings import is_int
from clusterclip.stages import Built, Job, Stage, run_stage
from clusterclip.store import RunDir, config_hash, load_npy, save_json
from clusterclip.torch.sampler import ClusterClipSampler
from clusterclip.torch.state import checked_state

log = logging.getLogger(__name__)


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
    total length stays the root's). ``every``: plan positions (global samples) between updates. ``rule``
    (default ``"bandit"``) and the controller settings (``eta``, ``alpha``, ``floor``, ``smoothing``, ``seed``:
    default the root's, ``explore``, ``horizon``) are :class:`~clusterclip.online.controller.Controller`'s,
    each checked here. Under ``torch.distributed`` every rank keeps the same state (reports are all-reduced);
    rank 0 writes the plans, the others open them, and a rank that fails makes every rank raise instead of
    leaving them waiting. The run directory must not change under it: an update or a resume after ``clusterclip
    add`` or a re-clustering is refused, naming what changed.
    """

    def __init__(self, run_dir: str | os.PathLike[str], plan_name: str, every: int, rule: str | None = None,
                 **settings: Any) -> None:
        if not is_int(every) or every < 1:
            raise ClusterClipError(f"every must be an integer >= 1 (plan positions between updates), got {every!r}")
        if not isinstance(plan_name, str) or not plan_name:
            raise ClusterClipError(f"plan_name must be the name of the root plan, got {plan_name!r}")
        self.run = RunDir(run_dir)
        if not self.run.root.is_dir():
            raise ClusterClipError(f"{self.run.root}: not a run directory (no such folder)")
        root = PlanRecord.require(self.run, plan_stage_name(plan_name), verify=False, current=True)
        self.root, self.every, self.end = plan_name, int(every), root.length
        self.config = PlanConfig.from_recorded(root.config)
        self.identity = run_identity(self.run)
        built_on = (root.blocks or {}).get("index_range", [0, self.identity.documents])[1]
        if built_on != self.identity.documents:
            raise OnlineStateError(f"{self.run.root}: plan {plan_name!r} was planned over {built_on:,} documents but "
                                   f"the run now holds {self.identity.documents:,} (`clusterclip add` since): plan a "
                                   "root of the run as it is (`clusterclip plan`) and steer that one")
        self.labels = load_npy(self.run.path(LABELS), mmap=True)
        self.explicit = {"every": int(every), **({} if rule is None else {"rule": rule}), **settings}
        settings.setdefault("seed", self.config.seed)
        self.controller = Controller.start(self.identity.k, "bandit" if rule is None else rule, **settings)
        self.plan, self.start = plan_name, 0
        self._reset()

    def _reset(self) -> None:
        k = len(self.controller.weights)
        self.sums, self.counts, self.steps = np.zeros(k), np.zeros(k), 0

    def report(self, cluster_ids: Any, losses: Any) -> None:
        """Add trained samples: their clusters (``mixer.labels[documents]``, integers) and losses, one per
        sample. Every rank calls it for each step (the sums are all-reduced, so all ranks hold the same window)."""
        ids = _cluster_ids(cluster_ids)
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
        state = checked_state(state)
        if state.get("plan") != self.plan or state.get("epoch"):
            raise ClusterClipError(f"the sampler state is of plan {state.get('plan')!r} epoch {state.get('epoch', 0)}, "
                                   f"but the mixer is in plan {self.plan!r} epoch 0; give the current sampler's state")
        return self.start + int(state["consumed"])

    def maybe_update(self, position: int) -> str | None:
        """At global ``position``, when ``every`` positions have passed since the current plan started (and
        some of the run is left for every rank): new weights from the window and a continuation from here.
        Returns the new plan's name (now :attr:`plan`), else None."""
        rank, world = _distributed()
        if position - self.start < self.every or self.end - position < world:
            return None
        name = None
        try:
            self.check_run("at this update")
            controller = self._next(position)
            cfg, continues = continuation(self.run, continuation_config(controller, self.config), self.plan,
                                          position - self.start)
            name = self._write(cfg, continues, controller, position) if rank == 0 else None
        except BaseException:
            _agree(rank, world, failed=True)
            raise
        failed = _agree(rank, world, failed=False)
        if failed:
            raise ClusterClipError(self._failure(failed, position, name))
        if name is None:
            name = _find(self.run, cfg, continues)
        if controller.unchanged(self.controller):
            log.info("online update %d at position %d left the weights as they were%s", controller.step, position,
                     _why_unchanged(controller))
        self.plan, self.start, self.controller = name, position, controller
        self._reset()
        return name

    def _next(self, position: int) -> Controller:
        """The controller after this window; the run's horizon in training steps is fixed at the first update
        (the chain's positions over the positions per reported step so far)."""
        controller = self.controller
        if controller.horizon is None and self.steps:
            per_step = position / (controller.rounds + self.steps)
            controller = dataclasses.replace(controller, horizon=max(self.end / per_step, 1.0))
        return controller.update(self.sums, self.counts, max(self.steps, 1))

    def _failure(self, failed: list[int], position: int, name: str | None) -> str:
        """The message of a rank that did its part when others failed (only rank 0 writes)."""
        who = ", ".join(map(str, failed))
        if 0 in failed:
            what = f"rank 0 failed to write the continuation of plan {self.plan!r} at position {position}"
        else:
            wrote = f" ({name!r}, which rank 0 wrote)" if name else " (rank 0 wrote it)"
            what = (f"rank {who} failed to switch to the continuation of plan {self.plan!r} at position "
                    f"{position}{wrote}")
        return f"{self.run.root}: {what}; the error is in the log of rank {who}"

    def check_run(self, when: str) -> None:
        """Refuse to go on when the run directory changed since this mixer's plans and losses (``add``, a
        re-clustering): its continuations would draw documents or clusters that training does not have."""
        changed = self.identity.changed_by(run_identity(self.run))
        if changed:
            raise OnlineStateError(
                f"{self.run.root}: the run changed under this online run ({when}): {changed} after plan "
                f"{self.root!r} was steered on it, so a continuation would draw documents or clusters training "
                f"does not have; finish training on plan {self.plan!r} without the mixer, or plan a new root on the "
                "run as it is now (`clusterclip plan`) and start a new online run on it")

    def _write(self, cfg: PlanConfig, continues: dict[str, Any], controller: Controller, position: int) -> str:
        """Rank 0: the continuation, its ``online.json`` and the ``mixer.json`` that checksums it, written under
        the run-directory lock; the plan's name."""
        with self.run.lock(wait=True):
            name = plan_stage(self.run, cfg, continues=continues).name
            record = OnlineRecord(self.root, self.plan, position, self.every, controller,
                                  Window(tuple(self.sums.tolist()), tuple(self.counts.tolist()), self.steps), name,
                                  not controller.unchanged(self.controller), self.identity).to_json()
            folder = plan_path(name)

            def build(job: Job) -> Built:
                save_json(self.run.path(folder, ONLINE_RECORD), record)
                return Built([f"{folder}/{ONLINE_RECORD}"], {"plan": name, "root": self.root})

            run_stage(self.run, Stage(mixer_stage_name(folder), {"format": STATE_FORMAT}, config_hash(record), build,
                                      {plan_stage_name(name): []}, record=MixerRecord))
        return name

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
        """What a checkpoint needs to resume exactly (:class:`~clusterclip.online.state.MixerState`): the current
        plan, where it started, the controller, this window's sums (the same on every rank) and the run's
        identity."""
        window = Window(tuple(self.sums.tolist()), tuple(self.counts.tolist()), self.steps)
        return MixerState(self.root, self.every, self.plan, self.start, self.controller, window,
                          self.identity).to_json()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from :meth:`state_dict` (any world size), after checking it against this mixer and the run: its
        root, its settings against those given explicitly, its plan in the root's chain at its recorded start, the
        run's identity (labels, documents, K) and the window's size. Each refusal is one line naming the field."""
        where = f"{self.run.root}: the mixer state"
        st = MixerState.from_json(state, where)
        if st.root != self.root:
            raise OnlineStateError(f"{where} is of root plan {st.root!r}, but this mixer steers {self.root!r}; resume "
                                   "with OnlineMixer(run, <the state's root>, ...) or with a state of this root's run")
        self._same_settings(st)
        if st.run is not None and (changed := st.run.changed_by(self.identity)):
            raise OnlineStateError(f"{where} was saved before {changed}, so its plans and losses are of another "
                                   "run; plan a new root on the run as it is now and start a new online run on it")
        if len(st.controller.weights) != self.identity.k:
            raise OnlineStateError(f"{where}: field 'controller' holds {len(st.controller.weights)} weights, but "
                                   f"the run has K = {self.identity.k} clusters; resume with a state of this run")
        if st.plan not in list_plans(self.run):
            raise OnlineStateError(f"{where} continues plan {st.plan!r}, which is not in the run directory (deleted?); "
                                   "resume from an earlier checkpoint, whose plans are there")
        begins = chain_start(self.run, self.root, st.plan)
        if begins != st.start or st.start >= self.end:
            raise OnlineStateError(f"{where}: field 'start' is {st.start}, but plan {st.plan!r} starts at position "
                                   f"{begins} of the root's {self.end}; resume with the state the mixer saved")
        self.every, self.plan, self.start, self.controller = st.every, st.plan, st.start, st.controller
        self.sums, self.counts = np.asarray(st.window.sums), np.asarray(st.window.counts)
        self.steps = st.window.steps

    def _same_settings(self, st: MixerState) -> None:
        """Refuse a setting given to the constructor that differs from the checkpoint's (it would be replaced)."""
        theirs = {"every": st.every, "rule": st.controller.rule,
                  **{name: getattr(st.controller, name) for name in SETTINGS}}
        for name, mine in self.explicit.items():
            if mine != theirs[name]:
                raise OnlineStateError(
                    f"OnlineMixer(..., {name}={mine!r}) but the checkpoint's mixer state has {name}="
                    f"{theirs[name]!r}: an online run keeps its settings; pass {name}={theirs[name]!r} (or leave it "
                    "out) to resume it, or start a new online run from the root plan")


def _cluster_ids(values: Any) -> np.ndarray:
    """``values`` as int64 cluster ids, refusing values that are not whole numbers (never truncated)."""
    raw = np.asarray(values.detach().cpu() if isinstance(values, torch.Tensor) else values).reshape(-1)
    if raw.dtype.kind in "iu":
        return raw.astype(np.int64, copy=False)
    whole = raw.dtype.kind == "f" and bool(np.isfinite(raw).all()) and bool((raw == np.round(raw)).all())
    if raw.size and not whole:
        bad = raw[0] if raw.dtype.kind != "f" else raw[~np.isfinite(raw) | (raw != np.round(raw))][0]
        raise ClusterClipError(f"report needs integer cluster ids (mixer.labels[documents]), got {raw.dtype} values "
                               f"such as {bad.item()!r}")
    return raw.astype(np.int64)


def _why_unchanged(controller: Controller) -> str:
    """Why an update may leave the weights as they were: the bandit's uniform exploration, in steps."""
    if controller.rule != "bandit" or controller.exploration() < 1.0 / len(controller.weights):
        return ""
    steps = uniform_steps(len(controller.weights), controller.explore, controller.horizon)
    return f" (the bandit explores uniformly for its first {steps:,.0f} training steps: explore={controller.explore!r})"


def _find(run: RunDir, config: PlanConfig, continues: Mapping[str, Any]) -> str:
    """The name of the continuation rank 0 wrote for ``config`` and ``continues``."""
    want = config.to_json()
    for name, rec in plan_records(run).items():
        if rec.continues == dict(continues) and rec.config.to_json() == want:
            return name
    raise ClusterClipError(f"{run.root}: rank 0 wrote no continuation of {continues['name']!r} at "
                           f"{continues['consumed']} (did it fail?)")


def online_record(run_dir: str | os.PathLike[str], plan_name: str) -> OnlineRecord | None:
    """The controller state and window that chose a continuation's weights, checked against the checksum its
    ``mixer.json`` records (None for a plan not written by a mixer)."""
    return read_online_record(RunDir(run_dir), plan_name, plan_path(plan_name))
