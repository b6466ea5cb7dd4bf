"""The report in a real browser: headless Chromium renders it, its script runs without errors, sorting works.

Skipped when Chromium is not installed (``scripts/install-chromium.sh`` installs it on Debian as root).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest

from clusterclip.report import build_report
from tests.test_report import SIZES, write_fake_run


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "/usr/bin/chromium"):
        path = shutil.which(name)
        if path:
            return path
    return None


CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium not installed (run scripts/install-chromium.sh as root to install it)"
)


def chromium(url: str, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium offline on ``url`` with console messages logged to stderr."""
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=5000",
        f"--user-data-dir={tmp / 'profile'}",
        *args,
        url,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def page_errors(stderr: str) -> list[str]:
    """Every console message and uncaught exception of the page: the report's script logs nothing.

    Chromium's own noise (dbus, GPU, sandbox warnings) does not come from a ``file://`` source.
    """
    return [
        line
        for line in stderr.splitlines()
        if "Uncaught" in line or ("CONSOLE" in line and "file://" in line) or "Failed to load" in line
    ]


def test_page_errors_detects_script_errors(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text('<html><body><script>console.error("boom"); undefinedFn();</script></body></html>')
    errors = page_errors(chromium(bad.as_uri(), tmp_path, "--dump-dom").stderr)
    assert any("boom" in e for e in errors) and any("Uncaught ReferenceError" in e for e in errors)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    run = write_fake_run(tmp_path_factory.mktemp("browser") / "run", with_experiment=True)
    return build_report(run, progress=False)


def screenshot(url: str, tmp: Path, width: int, height: int) -> np.ndarray:
    """A screenshot of ``url`` in a ``width`` x ``height`` window, checked: not blank, no page errors."""
    shot = tmp / f"shot-{width}x{height}.png"
    proc = chromium(url, tmp, f"--screenshot={shot}", f"--window-size={width},{height}")
    assert shot.exists(), proc.stderr[-2000:]
    img = mpimg.imread(shot)
    assert img.shape[:2] == (height, width)
    rgb = img[..., :3]
    assert float(rgb.std()) > 0.05, "screenshot is (nearly) blank"
    assert len(np.unique((rgb[::8, ::8] * 255).astype(np.uint8).reshape(-1, 3), axis=0)) > 50
    assert page_errors(proc.stderr) == []
    return img


def test_screenshot_is_not_blank(report, tmp_path):
    screenshot(report.as_uri(), tmp_path, 1280, 2000)


def test_script_runs_and_every_chart_loads(report, tmp_path):
    proc = chromium(report.as_uri(), tmp_path, "--dump-dom")
    dom = proc.stdout
    assert re.search(r'<body[^>]*data-ready="1"', dom), "the page script did not run"
    assert re.search(r'<body[^>]*data-broken-images="0"', dom), "a chart failed to load"
    assert page_errors(proc.stderr) == []


def test_missing_chart_is_reported_on_the_page(report, tmp_path):
    copy = tmp_path / "moved" / "report.html"
    copy.parent.mkdir()
    shutil.copy(report, copy)
    dom = chromium(copy.as_uri(), tmp_path, "--dump-dom").stdout
    assert re.search(r'<body[^>]*data-broken-images="[1-9]', dom)
    assert "Chart not found: sizes.png" in dom


HARNESS = """
<script>
document.addEventListener("DOMContentLoaded", function () {
  var table = document.getElementById("cluster-table");
  var docs = table.tHead.rows[0].cells[1];
  function first() { return table.tBodies[0].rows[0].id; }
  var seen = [first()];
  docs.click(); seen.push(first());
  docs.click(); seen.push(first());
  table.tHead.rows[0].cells[0].click(); seen.push(first());
  var input = document.querySelector("input[data-filter=cluster-table]");
  input.value = "WORD";
  input.dispatchEvent(new Event("input"));
  var visible = Array.prototype.filter.call(table.tBodies[0].rows, function (r) { return !r.hidden; }).length;
  document.body.setAttribute("data-order", seen.join(","));
  document.body.setAttribute("data-visible", String(visible));
});
</script>
</body>"""


def test_sorting_and_filtering(report, tmp_path):
    page = tmp_path / "harness.html"
    page.write_text(report.read_text().replace("</body>", HARNESS.replace("WORD", "abbword")))
    proc = chromium(page.as_uri(), tmp_path, "--dump-dom")
    order = re.search(r'data-order="([^"]*)"', proc.stdout)
    assert order, proc.stderr[-2000:]
    largest, smallest = int(np.argmax(SIZES)), int(np.argmin(SIZES))
    assert (largest, smallest) == (0, 7)
    assert order.group(1).split(",") == ["cluster-0", "cluster-0", "cluster-7", "cluster-0"]
    assert re.search(r'data-visible="1"', proc.stdout)
    assert page_errors(proc.stderr) == []
