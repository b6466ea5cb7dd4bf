"""The online mixer's records, typed and read strictly: ``online.json`` beside each continuation
(:class:`OnlineRecord`), the mixer's checkpoint state (:class:`MixerState`, what ``OnlineMixer.state_dict()``
returns) and the identity of the run both were built on (:class:`RunIdentity`).

``from_json`` accepts exactly the fields of its format (1: written before run identities were recorded; 2: this
version's): an unknown or missing field, a value of the wrong type or out of range is one
:class:`OnlineStateError` line naming the record and the field, never a ``KeyError``. What a state must agree
with in the run directory (its chain, its root, the labels, K, the documents) is checked by the mixer when it
loads one (:meth:`clusterclip.torch.mixer.OnlineMixer.load_state_dict`). Needs no PyTorch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from clusterclip.contract.cluster import LABELS, SIZES, ClusterRecord
from clusterclip.contract.online import ONLINE_RECORD, read_online
from clusterclip.contract.plan import PlanRecord, plan_stage_name
from clusterclip.errors import ClusterClipError
from clusterclip.online.controller import Controller
from clusterclip.settings import at_least, is_text
from clusterclip.store import RunDir, load_npy

STATE_FORMAT = 2
"""Version of the mixer state and ``online.json``: 2 adds the run's identity (``run``), and to ``online.json`` its
own plan's name (``plan``) and whether the update changed the weights (``changed``)."""
READ_FORMATS = (1, 2)

Check = Callable[[Any], "str | None"]


class OnlineStateError(ClusterClipError, ValueError):
    """A mixer state or ``online.json`` that is not what this clusterclip writes, or not of this run."""


def _numbers(nonnegative: bool = False) -> Check:
    def check(x: Any) -> str | None:
        ok = isinstance(x, (list, tuple)) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and (v >= 0 or not nonnegative)
            for v in x)
        return None if ok else f"must be a list of finite numbers{' >= 0' if nonnegative else ''}, got {_short(x)}"
    return check


def _mapping(x: Any) -> str | None:
    return None if isinstance(x, Mapping) else f"must be a JSON object, got {_short(x)}"


def _flag(x: Any) -> str | None:
    return None if isinstance(x, bool) else f"must be true or false, got {_short(x)}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def parse(obj: Any, where: str, fix: str, required: Mapping[str, Check],
          optional: Mapping[str, Check] | None = None) -> dict[str, Any]:
    """``obj``'s fields, each checked: unknown, missing or failing its check is one line naming ``where``, the
    field and ``fix``."""
    optional = optional or {}
    if not isinstance(obj, Mapping):
        raise OnlineStateError(f"{where}: not a JSON object, got {type(obj).__name__}; {fix}")
    unknown = sorted(str(n) for n in set(obj) - set(required) - set(optional))
    missing = [n for n in required if n not in obj]
    if unknown or missing:
        what = "; ".join(p for p in (unknown and f"unknown field(s) {', '.join(unknown)}",
                                     missing and f"missing field(s) {', '.join(missing)}") if p)
        raise OnlineStateError(f"{where}: {what}; {fix}")
    for name, check in {**required, **optional}.items():
        if name in obj and (problem := check(obj[name])):
            raise OnlineStateError(f"{where}: field {name!r} {problem}; {fix}")
    return dict(obj)


def _format(obj: Any, where: str, fix: str) -> int:
    version = obj.get("format") if isinstance(obj, Mapping) else None
    if version not in READ_FORMATS or isinstance(version, bool):
        raise OnlineStateError(f"{where}: format {version!r} is not one this clusterclip reads "
                               f"({', '.join(map(str, READ_FORMATS))}); {fix}")
    return int(version)


def _controller(obj: Any, where: str, fix: str) -> Controller:
    try:
        return Controller.from_json(obj, f"{where}: field 'controller'")
    except ClusterClipError as exc:
        raise OnlineStateError(f"{exc}; {fix}") from None


@dataclasses.dataclass(frozen=True)
class RunIdentity:
    """What a mixer's plans and losses belong to: the SHA-256 of ``labels.npy`` as the cluster stage recorded it,
    the number of documents, K, and how many ``cluster --refit`` the cluster record lists."""

    labels: str
    documents: int
    k: int
    refits: int

    FIELDS: ClassVar[dict[str, Check]] = {
        "labels": is_text, "documents": at_least(1), "k": at_least(1), "refits": at_least(0)
    }

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, obj: Any, where: str, fix: str) -> RunIdentity:
        return cls(**parse(obj, f"{where}: field 'run'", fix, cls.FIELDS))

    def changed_by(self, now: RunIdentity) -> str | None:
        """What changed the run since this identity (the command, in words), or None when nothing did."""
        if now == self:
            return None
        if now.documents > self.documents:
            return f"`clusterclip add` grew it from {self.documents:,} to {now.documents:,} documents"
        if now.documents != self.documents:
            return f"its documents went from {self.documents:,} to {now.documents:,} (rebuilt from another corpus)"
        k = f" (K {self.k} -> {now.k})" if now.k != self.k else ""
        if now.refits != self.refits:
            return f"`clusterclip cluster --refit` re-clustered it{k}"
        return f"`clusterclip cluster` re-clustered it{k or ' (new labels)'}"


def run_identity(run: RunDir) -> RunIdentity:
    """The identity of ``run`` now: from the cluster record, the labels' header and ``sizes.npy``."""
    rec = ClusterRecord.require(run, verify=False)
    labels = load_npy(run.path(LABELS), mmap=True)
    sizes = run.path(SIZES)
    k = int(load_npy(sizes).shape[0]) if sizes.exists() else int(np.max(labels, initial=-1)) + 1
    return RunIdentity(rec.artifact_sha256(LABELS) or "unrecorded", int(labels.shape[0]), max(k, 1),
                       len(rec.refits or []))


def chain_start(run: RunDir, root: str, plan: str) -> int:
    """The position, counted from the start of plan ``root``, where plan ``plan`` starts (0 for the root itself):
    the switch positions of its chain after the root. Refused when ``plan`` does not continue ``root``."""
    if plan == root:
        return 0
    rec = PlanRecord.require(run, plan_stage_name(plan), verify=False)
    names = [str(a.get("name")) for a in rec.chain()]
    if root not in names:
        raise OnlineStateError(f"{run.root}: plan {plan!r} is not in the chain of root plan {root!r} (it continues "
                               f"{' -> '.join(names) or 'nothing'}); resume with a state of this root's online run")
    return sum(int(a["consumed"]) for a in rec.chain()[names.index(root):])


@dataclasses.dataclass(frozen=True)
class Window:
    """The losses reported since the last update: per cluster their sums and sample counts, and the steps."""

    sums: tuple[float, ...]
    counts: tuple[float, ...]
    steps: int

    FIELDS: ClassVar[dict[str, Check]] = {
        "sums": _numbers(), "counts": _numbers(nonnegative=True), "steps": at_least(0)
    }

    def to_json(self) -> dict[str, Any]:
        return {"sums": list(self.sums), "counts": list(self.counts), "steps": self.steps}

    @classmethod
    def of(cls, obj: Mapping[str, Any], k: int, where: str, fix: str) -> Window:
        window = cls(tuple(map(float, obj["sums"])), tuple(map(float, obj["counts"])), int(obj.get("steps", 0)))
        if len(window.sums) != k or len(window.counts) != k:
            raise OnlineStateError(f"{where}: the window holds {len(window.sums)} loss sums and {len(window.counts)} "
                                   f"counts for the controller's {k} clusters; {fix}")
        return window


MIXER_FIX = "resume from a checkpoint holding OnlineMixer.state_dict() as it returned it"


@dataclasses.dataclass(frozen=True)
class MixerState:
    """``OnlineMixer.state_dict()``: the root plan, the cadence, the current plan and the position (from the
    root's start) where it started, the controller, this window's losses and the run's identity."""

    root: str
    every: int
    plan: str
    start: int
    controller: Controller
    window: Window
    run: RunIdentity | None = None

    FIELDS: ClassVar[dict[str, Check]] = {
        "format": lambda x: None, "root": is_text, "every": at_least(1), "plan": is_text,
        "start": at_least(0), "controller": _mapping, **Window.FIELDS}

    def to_json(self) -> dict[str, Any]:
        out = {"format": STATE_FORMAT, "root": self.root, "every": self.every, "plan": self.plan,
               "start": self.start, "controller": self.controller.to_json(), **self.window.to_json()}
        if self.run is not None:
            out["run"] = self.run.to_json()
        return out

    @classmethod
    def from_json(cls, obj: Any, where: str = "the mixer state", fix: str = MIXER_FIX) -> MixerState:
        version = _format(obj, where, fix)
        required = {k: v for k, v in cls.FIELDS.items() if k != "steps"}
        if version >= 2:
            required["run"] = _mapping
        fields = parse(obj, where, fix, required, {"steps": at_least(0)})
        controller = _controller(fields["controller"], where, fix)
        return cls(fields["root"], fields["every"], fields["plan"], fields["start"], controller,
                   Window.of(fields, len(controller.weights), where, fix),
                   RunIdentity.from_json(fields["run"], where, fix) if version >= 2 else None)


@dataclasses.dataclass(frozen=True)
class OnlineRecord:
    """``online.json``: the plan it is beside, its chain's root, the plan it continues (``parent``) and the
    position (from the root's start) of the switch, the cadence, the controller that chose its weights, the
    window behind them, whether they changed, and the run's identity (``plan``, ``changed`` and ``run`` are
    None in records of format 1)."""

    root: str
    parent: str
    position: int
    every: int
    controller: Controller
    window: Window
    plan: str | None = None
    changed: bool | None = None
    run: RunIdentity | None = None

    FIELDS: ClassVar[dict[str, Check]] = {
        "format": lambda x: None, "root": is_text, "parent": is_text, "position": at_least(0),
        "every": at_least(1), "controller": _mapping, "window": _mapping}

    def to_json(self) -> dict[str, Any]:
        out = {"format": STATE_FORMAT, "plan": self.plan, "root": self.root, "parent": self.parent,
               "position": self.position, "every": self.every, "changed": self.changed,
               "controller": self.controller.to_json(), "window": self.window.to_json(),
               "run": None if self.run is None else self.run.to_json()}
        return {k: v for k, v in out.items() if v is not None}

    @classmethod
    def from_json(cls, obj: Any, where: str, fix: str = "it is not what the mixer wrote") -> OnlineRecord:
        version = _format(obj, where, fix)
        required = dict(cls.FIELDS)
        if version >= 2:
            required.update(plan=is_text, changed=_flag, run=_mapping)
        fields = parse(obj, where, fix, required)
        controller = _controller(fields["controller"], where, fix)
        window = parse(fields["window"], f"{where}: field 'window'", fix, Window.FIELDS)
        return cls(fields["root"], fields["parent"], fields["position"], fields["every"], controller,
                   Window.of(window, len(controller.weights), where, fix), fields.get("plan"), fields.get("changed"),
                   RunIdentity.from_json(fields["run"], where, fix) if version >= 2 else None)


def read_online_record(run: RunDir, plan: str, folder: str) -> OnlineRecord | None:
    """The ``online.json`` of plan ``plan`` (its folder ``folder``, relative to the run) once it matches the checksum
    its ``mixer.json`` records (:func:`~clusterclip.contract.online.read_online`), read as an :class:`OnlineRecord`;
    None for a plan without one."""
    obj = read_online(run, plan, folder)
    return None if obj is None else OnlineRecord.from_json(obj, str(run.path(folder, ONLINE_RECORD)))
