"""``clusterclip status``: which stages of a run directory are finished (and, with --verify, intact)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from clusterclip.cli.options import command
from clusterclip.contract.online import online_audit
from clusterclip.contract.plan import list_plans, plan_path
from clusterclip.contract.plan_reader import PlanReader
from clusterclip.contract.stages import audit as stage_audit
from clusterclip.contract.stages import record_paths
from clusterclip.errors import ClusterClipError
from clusterclip.plan.axes import where_in_data
from clusterclip.plan.seen import format_seen
from clusterclip.store import RunDir
from clusterclip.store.lineage import check_record_files
from clusterclip.summary import format_audit, format_summary, summarize


def add_status_parser(sub: Any) -> argparse.ArgumentParser:
    p = command(sub, "status", cmd_status, "which stages of a run directory are finished",
                "Which stages are finished, from their records.",
                ("clusterclip status runs/web",
                 "clusterclip status runs/web --verify --json    # also hash every artifact",
                 "clusterclip status runs/web --plan NAME --at-step 1200 --global-batch 512 --by cluster,source"),
                run_dir="run directory")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--verify", action="store_true",
                   help="also check every artifact of every stage against the SHA-256 in its record, and each "
                        "online continuation's online.json against its mixer.json (reads every artifact; plain "
                        "status reads only records); exit status 1 on a problem")
    g = p.add_argument_group("where a training run is in its data")
    g.add_argument("--at-step", type=int, default=None, metavar="N",
                   help="after N training steps of --global-batch positions, per cluster, tier and --by field: "
                        "documents seen, their share, full passes completed and the step that completed each")
    g.add_argument("--global-batch", type=int, default=None, metavar="B", help="plan positions per step (all ranks)")
    g.add_argument("--plan", default=None, metavar="NAME", help="the plan (default: the run's only plan)")
    g.add_argument("--by", default="cluster,tier", metavar="AXES",
                   help="comma-separated: cluster, tier (a plan over strata), group (the corpus' --group-field) or "
                        "a categorical field kept with --keep-fields")
    p.set_defaults(quiet=False, verbose=False)
    return p


def cmd_status(a: argparse.Namespace) -> int:
    if a.at_step is not None or a.global_batch is not None:
        return _at_step(a)
    run = RunDir(a.run_dir)
    if not run.root.is_dir():
        raise ClusterClipError(f"{run.root}: not a run directory")
    records = record_paths(run)
    if not any(p.exists() or p.is_symlink() for p in records):
        raise ClusterClipError(f"{run.root}: not a run directory, or none of its stages has finished yet (no "
                               "stage record in it)")
    check_record_files(records)
    summary = summarize(run)
    audit = stage_audit(run) if a.verify else None
    if audit is not None:
        audit.update(online_audit(run, {name: plan_path(name) for name in list_plans(run)}))
        audit.update({stage: found for stage, found in summary.get("problems", {}).items() if stage not in audit})
    if a.json:
        print(json.dumps(summary if audit is None else {**summary, "verify": audit}, indent=2, default=str))
    else:
        print(format_summary(summary) if audit is None else f"{format_summary(summary)}\n{format_audit(audit)}")
    return 1 if audit and any(audit.values()) else 0


def _at_step(a: argparse.Namespace) -> int:
    """``status --at-step N --global-batch B``: where a run that trained N steps is in its data."""
    if a.at_step is None or a.global_batch is None:
        raise ClusterClipError("--at-step N and --global-batch B go together: where a run is after N steps of B "
                               "positions")
    by = [x.strip() for x in a.by.split(",") if x.strip()]
    if "tier" in by and a.by == "cluster,tier":  # the default: tiers only where the plan has them
        by = _default_axes(a.run_dir, a.plan)
    result = where_in_data(a.run_dir, a.plan, a.at_step, a.global_batch, by)
    print(json.dumps(result, indent=2) if a.json else format_seen(result))
    return 0


def _default_axes(run_dir: str, plan: str | None) -> list[str]:
    reader = PlanReader.open(run_dir, plan)
    return ["cluster", "tier"] if reader.record is not None and reader.record.stats.get("strata") else ["cluster"]
