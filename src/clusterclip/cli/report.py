"""``clusterclip report``: the HTML report of a run directory."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from clusterclip.cli.options import add_common, command
from clusterclip.contract.cluster import CLUSTER_STAGE
from clusterclip.contract.report import ReportRecord
from clusterclip.contract.stages import record_paths
from clusterclip.errors import ClusterClipError
from clusterclip.store import RunDir
from clusterclip.store import layout as A
from clusterclip.store.lineage import check_record_files


def add_report_parser(sub: Any) -> argparse.ArgumentParser:
    p = command(sub, "report", cmd_report, "HTML report with plots",
                "Write RUN_DIR/report/report.html and its PNGs; prints the path, and on stderr a note for each plan "
                "the page leaves out (a stale plan: rebuild it with the command the note names) or shows in part.",
                ("clusterclip report runs/web                 # prints runs/web/report/report.html",),
                run_dir="run directory with clusters (and plans)")
    add_common(p)
    return p


def cmd_report(a: argparse.Namespace) -> int:
    from clusterclip.report import build_report

    run = RunDir(a.run_dir)
    check_record_files(record_paths(run))
    if not run.record_path(CLUSTER_STAGE).is_file():
        raise ClusterClipError(f"{run.root}: not a run directory with clusters (no {A.record(CLUSTER_STAGE)}); "
                               f"nothing was written: build one with `clusterclip run INPUT... --out {run.root}`")
    page = build_report(a.run_dir, progress=not a.quiet)
    for note in ReportRecord.require(run, verify=False).plan_notes or ():
        print(f"clusterclip: note: the report leaves out or cuts a plan: {note}", file=sys.stderr)
    print(page)
    return 0
