"""The HTML report of a run directory: charts, cluster descriptions and plan diagnostics.

``build_report(run_dir)`` writes ``RUN_DIR/report/report.html`` and its PNGs. matplotlib (the
``report`` extra) is imported only when a report is built, so the rest of clusterclip works without it.
"""

from __future__ import annotations

import os
from pathlib import Path

from clusterclip.errors import ClusterClipError

__all__ = ["build_report"]


def build_report(
    run_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None, progress: bool = True
) -> Path:
    """Write the HTML report of ``run_dir`` (to ``out_dir``, default ``RUN_DIR/report``); returns its path.

    See :func:`clusterclip.report.build.build_report` and ``docs/report.md``.
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise ClusterClipError("the report needs matplotlib: pip install 'clusterclip[report]'") from exc
    from clusterclip.report.build import build_report as _build

    return _build(run_dir, out_dir=out_dir, progress=progress)
