"""The report at 300 and 10^5 documents, with 1 plan and with 10, in headless Chromium: screenshots at two widths,
no horizontal overflow, every chart loads, long tables cut to their first rows, no absolute local path.

Skipped when Chromium is not installed (``scripts/install-chromium.sh``). The run directories are synthetic
(:mod:`tests.report_runs`: stage artifacts written directly, plans built by the real plan stage).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from clusterclip.report import build_report
from clusterclip.report.render import CLUSTER_ROWS, GROUP_ROWS
from tests.report_runs import write_sized_run
from tests.test_report_browser import CHROMIUM, chromium, page_errors, screenshot

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium not installed (run scripts/install-chromium.sh as root to install it)"
)

SIZES = {"300": (300, 12, 6), "1e5": (100_000, 200, 150)}
"""Documents, K and ground-truth groups of each run size."""
WIDTHS = (1280, 600)

PROBE = """<script>
window.addEventListener("load", function () {
  var root = document.documentElement, width = root.clientWidth, spill = [], boxed = 0;
  function inBox(e) {
    for (var p = e.parentElement; p; p = p.parentElement) { if (p.classList.contains("scroll")) { return true; } }
    return false;
  }
  Array.prototype.forEach.call(document.querySelectorAll("body *"), function (e) {
    var r = e.getBoundingClientRect();
    if (r.width === 0 || r.right <= width + 1) { return; }
    if (inBox(e)) { boxed += 1; } else if (spill.length < 5) { spill.push(e.tagName + "#" + e.id + "." + e.className); }
  });
  var images = Array.prototype.slice.call(document.images);
  var tables = {};
  Array.prototype.forEach.call(document.querySelectorAll("table[data-limit]"), function (t) {
    var rows = Array.prototype.slice.call(t.tBodies[0].rows);
    tables[t.id] = [rows.length, rows.filter(function (r) { return !r.hidden; }).length];
  });
  document.body.setAttribute("data-probe", JSON.stringify({
    scroll: root.scrollWidth, width: width, spill: spill, boxed: boxed, tables: tables,
    images: images.length, loaded: images.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length,
    wideImages: images.filter(function (i) { return i.getBoundingClientRect().right > width + 1; }).length
  }));
});
</script>
</body>"""


@pytest.fixture(scope="module", params=[("300", 1), ("300", 10), ("1e5", 1), ("1e5", 10)],
                ids=["300-docs-1-plan", "300-docs-10-plans", "1e5-docs-1-plan", "1e5-docs-10-plans"])
def report(request, tmp_path_factory) -> Path:
    size, plans = request.param
    n_docs, k, groups = SIZES[size]
    run = write_sized_run(tmp_path_factory.mktemp(f"sizes-{size}-{plans}") / "run", n_docs, k, plans, groups)
    return build_report(run, progress=False)


def probe(report: Path, width: int, tmp: Path, harness: str = PROBE, fragment: str = "") -> dict:
    """What the probe script measured once the page (and its charts) loaded in a window ``width`` pixels wide."""
    page = report.with_name(f"probe-{width}.html")
    page.write_text(report.read_text().replace("</body>", harness))
    proc = chromium(page.as_uri() + fragment, tmp, "--dump-dom", f"--window-size={width},1600")
    found = re.search(r'data-probe="([^"]*)"', proc.stdout)
    assert found, proc.stderr[-2000:]
    assert page_errors(proc.stderr) == []
    return json.loads(found.group(1).replace("&quot;", '"'))


@pytest.fixture(scope="module")
def measured(report, tmp_path_factory) -> dict[int, dict]:
    """The probe's measures of the page at each width."""
    tmp = tmp_path_factory.mktemp("probe")
    return {width: probe(report, width, tmp) for width in WIDTHS}


@pytest.mark.parametrize("width", WIDTHS)
def test_no_horizontal_overflow_and_every_chart_loads(report, measured, width):
    seen = measured[width]
    assert seen["scroll"] <= seen["width"], seen
    assert seen["spill"] == [], f"wider than the window outside a scrolling box: {seen['spill']}"
    if width >= 1280:
        assert seen["boxed"] == 0, "a table is wider than its box at 1280 px"
    expected = report.read_text().count("<img ")
    assert expected >= 5 and seen["images"] == seen["loaded"] == expected, seen
    assert seen["wideImages"] == 0


def test_long_tables_show_their_first_rows(report, measured):
    tables = measured[WIDTHS[0]]["tables"]
    text = report.read_text()
    k = len(re.findall(r'<tr id="cluster-', text))
    if k > CLUSTER_ROWS:
        assert tables["cluster-table"] == [k, CLUSTER_ROWS]
        assert f"Showing the first {CLUSTER_ROWS} of {k} clusters ({k - CLUSTER_ROWS} more" in text
    else:
        assert "cluster-table" not in tables and 'data-more="cluster-table"' not in text
    if "group-table" in tables:
        assert tables["group-table"] == [150, GROUP_ROWS]
        assert f"Showing the first {GROUP_ROWS} of 150 groups" in text


@pytest.mark.parametrize("width", WIDTHS)
def test_screenshot(report, width, tmp_path):
    screenshot(report.as_uri(), tmp_path, width, 1600)


def test_no_absolute_local_path(report, tmp_path_factory):
    text = report.read_text()
    run = report.parent.parent
    for local in (str(run.resolve()), str(tmp_path_factory.getbasetemp().resolve()), str(Path.cwd())):
        assert local not in text
    assert not re.search(r"(?<![\w.:/])/(tmp|home|root|Users|work|private|var)/", text)
    assert f"run directory <code>{run.name}</code>" in text


INTERACT = """<script>
window.addEventListener("load", function () {
  var table = document.getElementById("cluster-table");
  function rows() { return Array.prototype.slice.call(table.tBodies[0].rows); }
  function visible() { return rows().filter(function (r) { return !r.hidden; }).length; }
  function shown(cls) { return getComputedStyle(table.querySelector("th." + cls)).display !== "none"; }
  function docs(r) { return parseFloat(r.cells[1].getAttribute("data-v") || r.cells[1].textContent.replace(/,/g, "")); }
  var out = {atHash: visible(), target: !document.getElementById("cluster-199").hidden};
  var button = document.querySelector('[data-more="cluster-table"] button');
  button.click(); out.afterToggle = visible();
  table.tHead.rows[0].cells[1].click(); table.tHead.rows[0].cells[1].click();
  out.sorted = visible();
  out.firstIsSmallest = docs(rows()[0]) === Math.min.apply(null, rows().map(docs));
  button.click(); out.again = visible();
  var select = document.querySelector("select[data-pick=cluster-table]");
  out.before = [shown("pick-0"), shown("pick-3")];
  select.value = "3"; select.dispatchEvent(new Event("change"));
  out.after = [shown("pick-0"), shown("pick-3")];
  document.body.setAttribute("data-probe", JSON.stringify(out));
});
</script>
</body>"""


def test_show_all_sorting_links_and_the_plan_menu(report, tmp_path):
    text = report.read_text()
    if 'data-pick="cluster-table"' not in text or 'data-more="cluster-table"' not in text:
        pytest.skip("the plan menu and the cut clusters table are both on the page at 10^5 documents with 10 plans")
    seen = probe(report, 1280, tmp_path, INTERACT, "#cluster-199")
    assert seen["target"] and seen["atHash"] == 200  # a link to a cut row shows every row
    assert seen["afterToggle"] == CLUSTER_ROWS
    assert seen["sorted"] == CLUSTER_ROWS and seen["firstIsSmallest"]  # the first rows of the new order
    assert seen["again"] == 200
    assert seen["before"] == [True, False] and seen["after"] == [False, True]


NARROW = """<script>
window.addEventListener("load", function () {
  var root = document.documentElement, table = document.getElementById("cluster-table");
  var line = parseFloat(getComputedStyle(table).fontSize) * 1.3;
  function edge(sel) { return Math.round(table.querySelector(sel).getBoundingClientRect().right); }
  var heads = Array.prototype.filter.call(table.tHead.rows[0].cells, function (c) {
    return (c.getAttribute("title") || "").indexOf("share of the draws of plan") === 0 && c.offsetWidth > 0;
  });
  var out = {page: [root.scrollWidth, root.clientWidth], keywords: edge("td.kw"), examples: edge("td.examples"),
    stacked: table.classList.contains("stacked")};
  var input = document.querySelector('input[data-filter="cluster-table"]');
  input.value = table.querySelector("td.kw").textContent.split(",")[0]; input.dispatchEvent(new Event("input"));
  out.filtered = Array.prototype.filter.call(table.tBodies[0].rows, function (r) { return r.offsetHeight > 0; }).length;
  document.body.setAttribute("data-probe", JSON.stringify(Object.assign(out, {
    drawHeads: heads.map(function (c) {
      var pad = parseFloat(getComputedStyle(c).paddingTop) + parseFloat(getComputedStyle(c).paddingBottom);
      return [c.textContent, Math.round((c.getBoundingClientRect().height - pad) / line)];
    })
  })));
});
</script>
</body>"""


@pytest.mark.parametrize("plans", [1, 3, 10])
def test_at_800_px_keywords_and_examples_are_on_screen_and_plan_headers_short(tmp_path_factory, tmp_path, plans):
    """A laptop window: the page does not scroll sideways, the clusters table's keywords and examples end inside the
    window (with one plan, three, and ten shown one at a time), and each "% draws" header with its plan's name
    (clusterclip-R2-docs-Bepoch-s0, ...) takes at most three short lines, where it wrapped into six to eight."""
    run = write_sized_run(tmp_path_factory.mktemp("narrow") / "run", 300, 12, plans, 6)
    seen = probe(build_report(run, progress=False), 800, tmp_path, NARROW)
    width = seen["page"][1]
    assert seen["page"][0] <= width + 1, seen
    assert seen["keywords"] <= width + 1 and seen["examples"] <= width + 1, f"off-screen at 800 px: {seen}"
    assert seen["stacked"] and seen["filtered"] == 1, seen  # the stacked rows still filter
    assert len(seen["drawHeads"]) == (plans if plans <= 3 else 1), seen
    assert max(lines for _, lines in seen["drawHeads"]) <= 3, seen


def test_a_wide_window_keeps_one_line_per_cluster(tmp_path_factory, tmp_path):
    """The clusters table stacks only where its columns would scroll sideways: at 1500 px one plan's table fits."""
    run = write_sized_run(tmp_path_factory.mktemp("wide") / "run", 300, 12, 1, 6)
    seen = probe(build_report(run, progress=False), 1500, tmp_path, NARROW)
    assert not seen["stacked"] and seen["filtered"] == 1 and seen["examples"] <= seen["page"][1], seen
