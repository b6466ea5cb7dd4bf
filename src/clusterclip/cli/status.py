"""``clusterclip status``: which stages of a run directory are finished (and, with --verify, intact)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from clusterclip.cli.options import command
from clusterclip.contracts import audit as stage_audit
from clusterclip.contracts import record_paths
from clusterclip.errors import ClusterClipError
from clusterclip.online.contract import online_audit
from clusterclip.plan.contract import list_plans, plan_path
from clusterclip.store import RunDir
from clusterclip.store.lineage import check_record_files
from clusterclip.summary import format_audit, format_summary, summarize


def add_status_parser(sub: Any) -> argparse.ArgumentParser:
    p = command(sub, "status", cmd_status, "which stages of a run directory are finished",
                "Which stages are finished, from their records.",
                ("clusterclip status runs/web",
                 "clusterclip status runs/web --verify --json    # also hash every artifact"),
                run_dir="run directory")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--verify", action="store_true",
                   help="also check every artifact of every stage against the SHA-256 in its record, and each "
                        "online continuation's online.json against its mixer.json (reads every artifact; plain "
                        "status reads only records); exit status 1 on a problem")
    p.set_defaults(quiet=False, verbose=False)
    return p


def cmd_status(a: argparse.Namespace) -> int:
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
