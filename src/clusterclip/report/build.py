"""Build the HTML report of a run directory: load, model, charts, render, write.

The report only reads: every stage is optional, and a missing piece (no plans, no ground-truth
group, no experiment, even no clustering) removes or annotates its section instead of failing. Cost is
one streamed pass over the corpus parquet (keywords, example snippets, ground-truth counts) plus a few
small charts, so a 16k-document, K≈100 run builds in seconds.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from pathlib import Path

from clusterclip.charts.style import Chart
from clusterclip.contract.corpus import corpus_parts
from clusterclip.contract.report import REPORT_DIR, REPORT_HTML, REPORT_STAGE
from clusterclip.contract.stages import finished_stages
from clusterclip.progress import progress_bar
from clusterclip.report.keywords import CorpusScan, scan_corpus
from clusterclip.report.load import RunView, load_run
from clusterclip.report.model import OWN_CHART, ChartSpec, page_model
from clusterclip.report.render import render_page
from clusterclip.stages import Built, Job, Stage, run_stage
from clusterclip.store import RUN, RunDir, StaleArtifactError, atomic_write, config_hash


def build_report(
    run_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None, progress: bool = True
) -> Path:
    """Write ``report.html`` and its PNG charts for a run directory; returns the HTML path.

    ``out_dir`` defaults to ``RUN_DIR/report``. The page is self-contained (no network): the charts are
    PNG files beside it, referenced relatively, so the folder can be copied or served as is. Charts a
    previous build wrote that this build no longer produces (e.g. of a deleted plan) are removed. A
    ``report`` folder (or ``report.html``) that is a symbolic link is refused: nothing is written or
    deleted through it. What the report reads is verified first (see :func:`clusterclip.report.load.check_recorded`).
    ``progress`` shows tqdm bars on stderr for the corpus pass and the charts.
    """
    if out_dir is not None:
        return _build(run_dir, Path(out_dir), progress)[0]
    rd = RunDir(run_dir)
    if not rd.root.is_dir():
        return _build(run_dir, rd.root, progress)[0]  # load_run says it is not a run directory
    upstream = _upstream(rd)
    built: list[Path] = []

    def build(job: Job) -> Built:
        page, plan_notes = _build(run_dir, rd.path(REPORT_DIR), progress)
        built.append(page)
        files = [page, *sorted(p for p in page.parent.glob("*.png") if OWN_CHART.match(p.name))]
        return Built([p.relative_to(rd.root).as_posix() for p in files], {"plan_notes": list(plan_notes)})

    # Rebuilt every time: the page also shows experiment and tune results, which live in other run directories.
    run_stage(rd, Stage(REPORT_STAGE, {}, config_hash(upstream), build, reads=dict.fromkeys(upstream, ()),
                        command=("clusterclip", "report", RUN)), force=True)
    return built[0]


def _build(run_dir: str | os.PathLike[str], out: Path, progress: bool) -> tuple[Path, tuple[str, ...]]:
    """The page and its charts in ``out``; returns its path and the notes on the plans it left out."""
    t0 = time.perf_counter()
    run = load_run(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    page = page_model(run, scan_run_corpus(run, progress))
    made = draw_charts(page.charts, out, progress)
    text = render_page(page, made, time.perf_counter() - t0)
    html_path = RunDir(out).path(REPORT_HTML)
    with atomic_write(html_path, "w") as fh:
        fh.write(text)
    _remove_stale_charts(out, keep=set(made))
    return html_path, run.plan_notes


def _upstream(rd: RunDir) -> dict[str, str]:
    """The output hashes of the stages the report is built from; recorded (``report.json``), so that
    rebuilding any of them makes the report stale (``clusterclip status`` says so)."""
    upstream = {}
    for stage in finished_stages(rd):
        if stage != REPORT_STAGE:
            with contextlib.suppress(StaleArtifactError):
                upstream[stage] = rd.output_hash(stage)
    return upstream


def scan_run_corpus(run: RunView, progress: bool) -> CorpusScan | None:
    """Keywords, examples and group counts from one pass over the corpus (None without text or labels)."""
    parts = corpus_parts(RunDir(run.root))
    if not parts or run.labels is None or not run.k:
        return None
    return scan_corpus(parts, run.labels, run.k, scores=run.scores, progress=progress)


def draw_charts(specs: Sequence[ChartSpec], out: Path, progress: bool) -> dict[str, Chart]:
    """Draw every chart into ``out``; returns them by file name."""
    made = {}
    with progress_bar("report: charts", "chart", len(specs), progress, leave=False) as bar:
        for spec in specs:
            made[spec.file] = spec.draw(out / spec.file)
            bar.update(1)
    return made


def _remove_stale_charts(out: Path, keep: set[str]) -> None:
    """Delete the report's own PNGs that this build did not draw (e.g. of a deleted plan)."""
    for png in out.glob("*.png"):
        if OWN_CHART.match(png.name) and png.name not in keep:
            with contextlib.suppress(OSError):
                png.unlink()
