"""Where a plan is and how it is rebuilt: ``plan.npy`` from a path, its record, the ``clusterclip plan`` command.

Shared by the readers of plans (:mod:`clusterclip.contract.plan_reader`, the sampler, ``export``), so every message
that asks for a rebuild names the same runnable command, rebuilt from the plan's recorded settings.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from clusterclip.contract.plan import PLAN_ORDER, PLAN_RECORD, PlanRecord, list_plans, plan_path, plan_stage_name
from clusterclip.errors import ClusterClipError, one_line
from clusterclip.store import RunDir
from clusterclip.store.record import RecordError


class PlanIntegrityError(ClusterClipError, ValueError):
    """A plan that cannot be trusted: truncated, modified, or holding indices outside the corpus."""


class PlanNotFoundError(ClusterClipError):
    """The plan given to the sampler cannot be located unambiguously."""


def plan_command(run_root: str | os.PathLike[str], name: str, record: PlanRecord | None = None) -> str:
    """The ``clusterclip plan ... --force`` command that rebuilds plan ``name`` (the command ``record`` holds, else
    the run's ``commands.json``): :meth:`RunDir.rebuild_command <clusterclip.store.RunDir.rebuild_command>`, the one
    renderer of rebuild commands."""
    return RunDir(run_root).rebuild_command(plan_stage_name(name), record and record.to_json(), force=True)


def resolve_plan_path(plan: str | os.PathLike[str], plan_name: str | None = None) -> Path:
    """Path of ``plan.npy`` given that file, its plan folder, or a run directory.

    A run directory must hold exactly one finished plan unless ``plan_name`` picks one.
    """
    p = Path(plan)
    if p.is_file():
        return p
    if not p.is_dir():
        raise PlanNotFoundError(f"{p}: no such plan file or directory")
    if plan_name is None and (p / PLAN_ORDER).is_file():
        return p / PLAN_ORDER
    names = list_plans(RunDir(p))
    if plan_name is not None:
        if plan_name not in names:
            raise PlanNotFoundError(f"{p}: no finished plan {plan_name!r}; plans here: {', '.join(names) or 'none'}")
        return _existing(p, plan_name)
    if not names:
        raise PlanNotFoundError(f"{p}: no plan.npy and no finished plans/; run `clusterclip plan {p}` first")
    if len(names) > 1:
        raise PlanNotFoundError(f"{p} holds {len(names)} plans; choose one with --plan NAME (in Python, plan_name=): "
                                f"{', '.join(names)}")
    return _existing(p, names[0])


def _existing(run_root: Path, name: str) -> Path:
    """``plan.npy`` of finished plan ``name``; one line naming it and its rebuild command when it is gone."""
    path = run_root / plan_path(name, PLAN_ORDER)
    if not path.is_file():
        raise PlanIntegrityError(f"{path}: missing (its record {PLAN_RECORD} is there); rebuild it: "
                                 f"`{plan_command(run_root, name, read_record(path))}`")
    return path


def read_record(path: Path) -> PlanRecord | None:
    """The ``plan.json`` beside ``plan.npy`` as its :class:`~clusterclip.contract.plan.PlanRecord`, or None; a
    corrupt record, or one that is not a plan record of this clusterclip, is a :class:`PlanIntegrityError`."""
    rec_path = path.parent / PLAN_RECORD
    if not rec_path.is_file():
        return None
    fix = f"the plan with `clusterclip plan {shlex.quote(str(path.parent.parent.parent))} --force` and its options"
    try:
        rec = json.loads(rec_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PlanIntegrityError(f"{rec_path}: corrupt plan record ({one_line(exc)}); rebuild {fix}") from exc
    if not isinstance(rec, dict):
        raise PlanIntegrityError(f"{rec_path}: corrupt plan record (not a JSON object)")
    try:
        return PlanRecord.from_json(rec, str(rec_path), f"rebuild {fix}")
    except RecordError as exc:
        raise PlanIntegrityError(str(exc)) from None

