"""How the report adapts to the size of a run: chart windows, one y scale for the repetition charts, lines that
coincide, the readable plan table, legends and tables of many groups, and the paths it shows."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from clusterclip.report import build_report, centroid_map, charts
from clusterclip.report.build import scan_run_corpus
from clusterclip.report.load import load_run
from clusterclip.report.model import page_model
from clusterclip.report.render import GROUP_ROWS
from clusterclip.report.scale import (
    MAX_WINDOWS,
    MIN_WINDOW_DRAWS,
    RepeatScale,
    charted,
    hide_paths,
    merge_factor,
    merge_rows,
    repeat_scale,
    shown_path,
)
from tests.report_runs import write_sized_run


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    """300 documents, 12 clusters, 10 plans (the planner's default window there is 3 draws)."""
    return write_sized_run(tmp_path_factory.mktemp("scale") / "run", 300, 12, 10, n_groups=40)


@pytest.mark.parametrize(("window", "rows", "factor"), [
    (3, 100, 10),          # 300 draws: 10 windows of 30 rather than 100 of 3
    (1000, 100, 1),        # 10^5 draws: the recorded windows already hold enough
    (10_000, 100, 1),      # 10^6 draws
    (10, 100_000, 500),    # --window 10 on 10^6 draws: at most MAX_WINDOWS points
    (1, 1, 1),
    (2, 1000, 25),
])
def test_merge_factor(window, rows, factor):
    assert merge_factor(window, rows) == factor
    merged = window * factor
    assert merged >= min(MIN_WINDOW_DRAWS, window * rows / 10) and -(-rows // factor) <= MAX_WINDOWS


def test_merge_rows_keeps_every_draw():
    m = np.arange(7 * 3).reshape(7, 3)
    merged = merge_rows(m, 3)
    assert merged.shape == (3, 3) and np.array_equal(merged.sum(axis=0), m.sum(axis=0))
    assert np.array_equal(merged[-1], m[6]) and merge_rows(m, 1) is m


def test_charts_of_a_short_plan_use_windows_of_tens_of_draws(small_run):
    for plan in load_run(small_run).plans:
        assert plan.window == 3 and len(plan.mixture) == 100  # what the planner recorded
        shown = charted(plan)
        assert shown.window == 30 and len(shown.mixture) == 10
        assert np.array_equal(shown.mixture.sum(axis=0), plan.mixture.sum(axis=0))


def test_repeat_scale_is_shared_and_log_when_any_plan_spans_decades(small_run):
    assert repeat_scale([np.array([0, 300]), np.array([100, 120, 80])]) == RepeatScale(top=300 * 1.08, log=False)
    log = repeat_scale([np.array([0, 300]), np.array([100, 120, 2])])
    assert log is not None and log.log and log.top == 600 and log.bottom == pytest.approx(1.2)
    assert repeat_scale([np.zeros(3, np.int64)]) is None
    run = load_run(small_run)
    page = page_model(run, scan_run_corpus(run, progress=False))
    scales = {id(spec.draw.keywords["scale"]) for spec in page.charts if spec.file.startswith("repeats-")}
    assert len(scales) == 1 and len([s for s in page.charts if s.file.startswith("repeats-")]) == 10


def _legend_of(monkeypatch, module) -> list[list[str]]:
    """Record the legend texts of the charts ``module`` saves."""
    seen: list[list[str]] = []
    save = module.save_chart

    def spy(fig, *args, **kwargs):
        seen.append([t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()])
        return save(fig, *args, **kwargs)

    monkeypatch.setattr(module, "save_chart", spy)
    return seen


def test_identical_lines_say_so_and_stay_visible(tmp_path, monkeypatch):
    seen = _legend_of(monkeypatch, charts)
    mixture = np.array([[5, 5, 5], [6, 4, 5], [9, 3, 3]])
    plans = {"uniform": (mixture, 15), "clusterclip": (mixture.copy(), 15), "random": (mixture[::-1], 15)}
    charts.plot_effective_clusters(plans, np.array([10, 10, 10]), tmp_path / "e.png")
    assert "clusterclip (same as uniform)" in seen[0] and "uniform" in seen[0] and "random" in seen[0]


def test_a_line_running_on_top_of_another_leaves_both_visible(tmp_path, monkeypatch):
    """Two plans with the same effective number of clusters for their first ten windows (then apart): along that
    stretch the rendered chart shows both plans' colours, where the second solid line covered the first."""
    drawn = []
    save = charts.save_chart

    def keep(fig, *args, **kwargs):
        fig.canvas.draw()
        points = fig.axes[0].transData.transform([(10, 3.0), (80, 3.0)])
        drawn.append((np.asarray(fig.canvas.buffer_rgba())[..., :3] / 255.0, points))
        return save(fig, *args, **kwargs)

    monkeypatch.setattr(charts, "save_chart", keep)
    even = np.tile([5, 5, 5, 0], (20, 1))
    drifting = np.vstack([even[:10], np.tile([12, 2, 1, 0], (10, 1))])
    charts.plot_effective_clusters({"a": (even, 10), "b": (drifting, 10)}, np.array([30, 5, 1, 1]), tmp_path / "e.png")
    image, ((x0, y), (x1, _)) = drawn[0]
    row = image.shape[0] - int(np.rint(y))
    band = image[row - 3 : row + 4, int(x0) : int(x1)].reshape(-1, 3)
    for colour in charts.CATEGORICAL[:2]:
        rgb = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)]) / 255.0
        seen = int((np.abs(band - rgb).max(axis=1) < 0.12).sum())
        assert seen >= 20, f"plan line {colour} hidden along the shared stretch ({seen} pixels)"


def test_the_centroid_map_names_at_most_a_dozen_groups(tmp_path, monkeypatch):
    seen = _legend_of(monkeypatch, centroid_map)
    k = 60
    groups = [f"group-{c % 30:02d}" for c in range(k - 1)] + [None]
    rng = np.random.default_rng(0)
    centroid_map.plot_centroid_map(rng.normal(size=(k, 4)), np.arange(k, 0, -1), tmp_path / "m.png", groups=groups)
    legend = seen[0]
    assert len(legend) == centroid_map.MAX_GROUPS + 2
    assert legend[-2:] == ["18 other groups", "no group"] and "group-00" in legend


def test_plan_table_is_readable_and_keeps_the_record_folded(small_run):
    text = build_report(small_run, progress=False).read_text()
    plans = text[text.index('<section id="plans">'):text.index('<section id="mixture">')]
    table, recorded = plans.split("<details>", 1)
    for header in ("repetition cap", "budget", "documents drawn", "repeats", "clusters exhausted"):
        assert f">{header}</th>" in table, header
    assert "temperature, τ = 0.5" in table and "300 docs" in table and ">none</td>" in table
    for internal in ("water_level", "seconds", "budget_unit", "max_repeat_observed"):
        assert internal not in table and internal in recorded, internal
    groups = re.findall(r"<tr><td>(group-\d+)</td><td class=\"num\" data-v=\"(\d+)\"", text)
    docs = [int(d) for _, d in groups]
    assert len(docs) > GROUP_ROWS and docs == sorted(docs, reverse=True)  # largest first: the smallest are cut
    assert f"Showing the first {GROUP_ROWS} of {len(docs)} groups" in text


def test_shown_path(tmp_path):
    inside = tmp_path / "work" / "runs" / "web"
    assert shown_path(inside, cwd=tmp_path / "work") == "runs/web"
    assert shown_path(tmp_path / "elsewhere" / "run", cwd=tmp_path / "work") == "run"
    assert shown_path("runs/web") == "runs/web" and shown_path(".") == "."
    text = f"{inside}/plans/x: missing; run `clusterclip plan {inside} --force`"
    assert str(tmp_path) not in hide_paths(text, inside)
