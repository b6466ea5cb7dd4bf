"""``clusterclip report``: the HTML report of a run directory."""

from __future__ import annotations

import argparse
from typing import Any

from clusterclip.cli.options import add_common, command


def add_report_parser(sub: Any) -> argparse.ArgumentParser:
    p = command(sub, "report", cmd_report, "HTML report with plots",
                "Write RUN_DIR/report/report.html and its PNGs; prints the path.",
                run_dir="run directory with clusters (and plans)")
    add_common(p)
    return p


def cmd_report(a: argparse.Namespace) -> int:
    from clusterclip.report import build_report

    print(build_report(a.run_dir, progress=not a.quiet))
    return 0
