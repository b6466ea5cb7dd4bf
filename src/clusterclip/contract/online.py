"""The online mixer's files in a run directory, named once for the writer (:mod:`clusterclip.torch.mixer`, which
needs PyTorch) and the readers that must not import it (the report, ``clusterclip status --verify``).

Beside a continuation's ``plan.json`` a mixer writes ``online.json`` (the controller state that chose its weights
and the window behind it, :class:`clusterclip.online.state.OnlineRecord`) and ``mixer.json``, the stage record
that lists ``online.json`` with its size and SHA-256 (:class:`MixerRecord`), so ``status --verify`` and the
report see an ``online.json`` edited by hand. This module imports only the storage floor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from clusterclip.errors import ClusterClipError
from clusterclip.store import RunDir, file_digest, load_json
from clusterclip.store.record import RecordedConfig, StageRecord

ONLINE_RECORD = "online.json"
"""Beside a continuation's ``plan.json``: the controller state that chose its weights and the window behind it."""
MIXER_RECORD = "mixer.json"
"""Beside it: the stage record of ``online.json`` (its size and SHA-256)."""
MIXER_STAGE = "mixer"


def mixer_stage_name(plan_folder: str) -> str:
    """The stage of the mixer's record in a plan folder (``plans/<name>`` -> ``plans/<name>/mixer``)."""
    return f"{plan_folder}/{MIXER_STAGE}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class MixerSettings(RecordedConfig):
    """``mixer.json``'s ``config``: the format of the ``online.json`` it lists."""

    WHAT: ClassVar[str] = "the mixer settings"

    format: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class MixerRecord(StageRecord):
    """``plans/<name>/mixer.json``: ``artifacts`` lists ``online.json``; ``plan`` is the continuation it belongs
    to, ``root`` the chain's root plan."""

    NAME: ClassVar[str] = MIXER_STAGE

    config: MixerSettings
    plan: str
    root: str


def online_problem(run: RunDir, plan: str, folder: str) -> str | None:
    """What is wrong with the ``online.json`` of plan ``plan`` (its folder ``folder``, relative to the run): not
    listed by a ``mixer.json`` record, another size or SHA-256 than it records, or a record of another plan;
    None when it matches (or the plan has neither file)."""
    rel, stage = f"{folder}/{ONLINE_RECORD}", mixer_stage_name(folder)
    path, record = run.root / rel, run.root / f"{stage}.json"
    if not path.exists() and not record.exists():
        return None
    fix = (f"restore it from a copy, or delete {run.root / folder} and resume training from a checkpoint taken "
           "before this plan's switch (the mixer writes both files again)")
    try:
        rec = MixerRecord.from_json(load_json(record), str(record), fix) if record.exists() else None
    except (ClusterClipError, OSError) as exc:
        return f"{exc}"
    if rec is None:
        return f"{path}: not recorded with a checksum ({record.name} is missing), so nothing shows it is what the " \
               f"mixer wrote; {fix}"
    meta = rec.artifacts.get(rel)
    if rec.plan != plan or not isinstance(meta, Mapping):
        return f"{record}: the mixer record of plan {rec.plan!r}, not of {plan!r} (copied from another plan?); {fix}"
    if not path.is_file():
        return f"{path}: missing (its {record.name} is there); {fix}"
    if path.stat().st_size != meta.get("size") or file_digest(path) != meta.get("sha256"):
        return f"{path}: does not match the size and SHA-256 its mixer recorded in {record.name} (edited by hand?), " \
               f"so the weights it holds may be none the plan was built with; {fix}"
    return None


def online_audit(run: RunDir, plans: Mapping[str, str]) -> dict[str, list[str]]:
    """The check of every plan's ``online.json`` (``plans``: name -> folder relative to the run), as
    :meth:`RunDir.audit <clusterclip.store.RunDir.audit>` reports stages: ``{plans/<name>/mixer: problems}`` for
    each plan with a mixer's files."""
    found: dict[str, list[str]] = {}
    for plan, folder in plans.items():
        if (run.root / folder / ONLINE_RECORD).exists() or (run.root / folder / MIXER_RECORD).exists():
            problem = online_problem(run, plan, folder)
            found[mixer_stage_name(folder)] = [problem] if problem else []
    return found


def read_online(run: RunDir, plan: str, folder: str) -> Any:
    """The parsed ``online.json`` of plan ``plan`` once it matches its record (:func:`online_problem`), else a
    :class:`ClusterClipError` naming what is wrong; None for a plan without one."""
    problem = online_problem(run, plan, folder)
    if problem is not None:
        raise ClusterClipError(problem)
    path = Path(run.root, folder, ONLINE_RECORD)
    return load_json(path) if path.exists() else None
