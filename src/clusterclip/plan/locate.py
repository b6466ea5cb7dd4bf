"""Where a plan is and how it is rebuilt: ``plan.npy`` from a path, its record, the ``clusterclip plan`` command.

Shared by the readers of plans (``plan.integrity``, the sampler, ``export``), so every message that asks
for a rebuild names the same runnable command, rebuilt from the plan's recorded settings.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clusterclip.errors import ClusterClipError, one_line
from clusterclip.plan.files import PLAN_ORDER, PLAN_RECORD, PLANS_DIR, plan_path, plan_stage_name
from clusterclip.store import RunDir


class PlanIntegrityError(ClusterClipError, ValueError):
    """A plan that cannot be trusted: truncated, modified, or holding indices outside the corpus."""


class PlanNotFoundError(ClusterClipError):
    """The plan given to the sampler cannot be located unambiguously."""


def plan_command(run_root: str | os.PathLike[str], record: Mapping[str, Any]) -> str:
    """The ``clusterclip plan ... --force`` command that rebuilds the plan of ``record`` (its settings):
    :meth:`RunDir.rebuild_command <clusterclip.store.RunDir.rebuild_command>`, the one renderer of
    rebuild commands."""
    name = str(record.get("name") or "")
    return RunDir(run_root).rebuild_command(plan_stage_name(name), record, force=True)


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
                                 f"`{plan_command(run_root, read_record(path) or {'name': name})}`")
    return path


def read_record(path: Path) -> dict[str, Any] | None:
    """The ``plan.json`` beside ``plan.npy``, or None; a corrupt record is a :class:`PlanIntegrityError`."""

    rec_path = path.parent / PLAN_RECORD
    if not rec_path.is_file():
        return None
    try:
        rec = json.loads(rec_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        run_root = shlex.quote(str(path.parent.parent.parent))
        raise PlanIntegrityError(f"{rec_path}: corrupt plan record ({one_line(exc)}); rebuild "
                                 "the plan with `clusterclip "
                                 f"plan {run_root} --force` and its options") from exc
    if not isinstance(rec, dict):
        raise PlanIntegrityError(f"{rec_path}: corrupt plan record (not a JSON object)")
    return rec


def list_plans(run: RunDir) -> list[str]:
    """Names of the finished plans in the run directory (those with a ``plan.json`` record)."""
    root = run.path(PLANS_DIR)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / PLAN_RECORD).is_file())


def orphan_plans(root: Path) -> list[str]:
    """Plan folders that hold files but no record (``plan.json`` deleted): not finished, yet not empty."""
    plans = root / PLANS_DIR
    if not plans.is_dir() or plans.is_symlink():
        return []
    return [p.name for p in sorted(plans.iterdir()) if p.is_dir() and not p.is_symlink()
            and not (p / PLAN_RECORD).exists() and any(p.iterdir())]
