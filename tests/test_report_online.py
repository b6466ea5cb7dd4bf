"""The report's online mixing: a section per chain of continuations an ``OnlineMixer`` wrote (chart and table from
their ``online.json``), the weights of the online proxy runs of an experiment, bounded at large K, and no torch on
the report's import path."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from clusterclip.charts.online import WeightTrack, experiment_online
from clusterclip.contract.cluster import CLUSTER_STAGE, LABELS
from clusterclip.contract.plan import plan_path
from clusterclip.plan import PlanConfig
from clusterclip.plan.stage import plan_stage
from clusterclip.report import build_report
from clusterclip.report.load import load_run
from clusterclip.report.online import ONLINE_RECORD
from clusterclip.report.online import online_section as online_section_model
from clusterclip.store import RunDir, load_json, save_json, save_npy
from tests.records import write_record
from tests.test_layout import MODULES, _closure, _graph
from tests.test_online import CAP, _train, run_dir  # noqa: F401 (run_dir: the fixture of a run with a root plan)
from tests.test_report import png_ok, section_ids

ROOT_BUDGET = 200
EVERY = 40
ROOT_PLAN = PlanConfig(budget=ROOT_BUDGET, max_repeat=CAP).name()


def online_section(text: str) -> str:
    return text[text.index('<section id="online">'):].split("</section>")[0]


def chain_records(run: Path, leaf: str) -> list[dict]:
    """The ``online.json`` of the chain ending in ``leaf``, first update first."""
    records = []
    name = leaf
    while (path := run / plan_path(name, ONLINE_RECORD)).exists():
        records.append(load_json(path))
        name = records[-1]["parent"]
    return records[::-1]


def table_rows(section: str, table: int = 0) -> list[list[str]]:
    """The cells of each row of a chain's table: their sort key (the exact number shown) or else their HTML."""
    body = section[section.index(f'id="online-table-{table}"'):].split("</table>")[0]
    cells = [re.findall(r"<td([^>]*)>(.*?)</td>", row) for row in body.split("<tr>")[2:]]
    return [[inner if inner.startswith("#") or not (m := re.search(r'data-v="([^"]*)"', attrs)) else m.group(1)
             for attrs, inner in row] for row in cells]


@pytest.fixture()
def online_run(run_dir):  # noqa: F811
    _, last = _train(run_dir, batch_size=8, every=EVERY)
    return Path(run_dir), last["mixer"]["plan"]


def test_no_online_section_without_online_plans(run_dir):  # noqa: F811
    text = build_report(run_dir, progress=False).read_text()
    assert "online" not in section_ids(text) and 'href="#online"' not in text
    assert not list((Path(run_dir) / "report").glob("online-*.png"))


def test_the_section_shows_each_update_from_its_online_json(online_run):
    run, leaf = online_run
    text = build_report(run, progress=False).read_text()
    ids = section_ids(text)
    assert ids[ids.index("effective-clusters") + 1] == "online" and 'href="#online"' in text
    section = online_section(text)
    chart = re.findall(r'<img src="([^"]+)"', section)
    assert chart == [f"online-{leaf}.png"]
    png_ok(run / "report" / chart[0])
    records = chain_records(run, leaf)
    rows = table_rows(section)
    assert len(rows) == 1 + len(records) == 1 + (ROOT_BUDGET - 1) // EVERY
    assert rows[0][:2] == ["0", records[0]["root"]], "the controller's uniform start on the root plan"
    before = np.full(len(records[0]["controller"]["weights"]), 1 / len(records[0]["controller"]["weights"]))
    for row, rec in zip(rows[1:], records, strict=True):
        counts = rec["window"]["counts"]
        assert row[0] == str(rec["position"]) and row[2] == rec["controller"]["rule"]
        assert row[3] == str(rec["controller"]["step"])
        assert float(row[6]) == pytest.approx(sum(rec["window"]["sums"]) / sum(counts), rel=1e-12)
        assert float(row[7]) == sum(counts)
        after = np.asarray(rec["controller"]["weights"])
        if np.abs(after - before).max() > 0:
            assert row[4].startswith(f"#{int(np.argmax(after - before))} ")
            assert row[5].startswith(f"#{int(np.argmin(after - before))} ")
        before = after
    assert leaf in section and records[0]["root"] in section


def test_the_realised_mixture_is_compared_with_the_weights(online_run):
    run, leaf = online_run
    section = online_section(build_report(run, progress=False).read_text())
    tv = [float(row[9]) for row in table_rows(section)]
    assert len(tv) == 5 and all(0.0 <= v <= 1.0 for v in tv)
    draws = np.load(run / plan_path(leaf, "cluster_draws.npy"))
    weights = np.asarray(chain_records(run, leaf)[-1]["controller"]["weights"])
    assert tv[-1] == pytest.approx(0.5 * np.abs(draws / draws.sum() - weights).sum(), rel=1e-9), \
        "the last plan is trained whole: its draws against the weights that chose it"


def test_an_unreadable_online_record_is_named_in_the_notes(online_run):
    run, leaf = online_run
    broken = chain_records(run, leaf)[2]["parent"]
    (run / plan_path(broken, ONLINE_RECORD)).write_text("{not json")
    text = build_report(run, progress=False).read_text()
    notes = text[text.index('<section id="notes">'):]
    assert "left out of online mixing" in notes and f"plan {broken} has no {ONLINE_RECORD}" in notes
    assert len(re.findall(r'<img src="online-', online_section(text))) == 2, "the chain before it and after it"


def test_the_report_path_imports_no_torch(online_run):
    reached = _closure(_graph(), {m for m in MODULES if m.startswith("clusterclip.report")})
    assert not [m for m in reached if m.startswith("clusterclip.torch")]
    from clusterclip.torch.mixer import ONLINE_RECORD as MIXER_RECORD

    assert ONLINE_RECORD == MIXER_RECORD
    run, _ = online_run
    script = ("import sys; sys.modules['torch'] = None\n"  # any `import torch` now fails
              "import pkgutil, importlib, clusterclip.report as r\n"
              "[importlib.import_module(m.name) for m in pkgutil.iter_modules(r.__path__, 'clusterclip.report.')]\n"
              f"text = r.build_report({str(run)!r}, progress=False).read_text()\n"
              "assert '<section id=\"online\">' in text\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_two_thousand_clusters_stay_bounded(tmp_path):
    k = 2000
    run = RunDir(tmp_path / "big")
    labels = np.random.default_rng(1).integers(0, k, 3 * k).astype(np.int32)
    save_npy(run.path(LABELS), labels)
    write_record(run, CLUSTER_STAGE, {"k": k}, "x", [LABELS], 0.0)
    plan_stage(run, PlanConfig(budget=ROOT_BUDGET, max_repeat=CAP))
    _, last = _train(run.root, batch_size=8, every=EVERY)
    section = online_section(build_report(run.root, progress=False).read_text())
    assert len(section) < 20_000, "a few named clusters per update, not one cell per cluster"
    assert max(row[4].count("<br>") for row in table_rows(section)) <= 2, "at most 3 clusters named per cell"
    chart = run.root / "report" / f"online-{last['mixer']['plan']}.png"
    png_ok(chart)
    assert chart.stat().st_size < 250_000
    track = _track(run.root, last["mixer"]["plan"])
    assert track.k == k and track.top.shape[1] == 8 and track.band.shape[0] == 3
    assert track.by_rank and track.stack.shape[0] == 4, "the stack groups clusters by weight rank"
    assert np.allclose(track.stack.sum(axis=0), 1.0) and np.allclose(track.stack[:, 0], [0.01, 0.09, 0.4, 0.5])


def _track(run: Path, leaf: str) -> WeightTrack:
    """The weights a chain's chart draws, as the section's model hands them over."""
    chain = online_section_model(load_run(run)).chains[0]
    assert chain.leaf == leaf
    return chain.track


def _experiment_results(k: int = 6) -> dict:
    """Proxy runs as ``clusterclip experiment`` records them: an online strategy on two seeds and two splits,
    and a static one without an ``online`` record."""
    rng = np.random.default_rng(2)

    def online(seed: int) -> dict:
        weights = rng.dirichlet(np.ones(k), 3) + seed
        weights /= weights.sum(axis=1, keepdims=True)
        return {"rule": "bandit", "every_steps": 10,
                "updates": [{"step": 10 * (i + 1), "position": 80 * (i + 1), "tokens": 8192 * (i + 1),
                             "weights": w.tolist(), "losses": [None] + [3.0] * (k - 1)} for i, w in enumerate(weights)]}

    runs = {"random/0": {"strategy": "random", "seed": 0}}
    for seed in (1, 0):
        runs[f"online-bandit/{seed}"] = {"strategy": "online-bandit", "seed": seed, "online": online(seed)}
        runs[f"online-bandit/{seed}/split-1"] = {"strategy": "online-bandit", "seed": seed, "online": online(seed)}
    return {"data": {"steps": 40}, "runs": runs, "summary": {"random": {"runs": 1, "val_loss": 3.2}}}


def test_the_experiment_draws_the_online_weights_of_the_first_split_and_seed(tmp_path):
    results = _experiment_results()
    tracks = experiment_online(results)
    assert list(tracks) == ["online-bandit"]
    track, rule = tracks["online-bandit"]
    first = np.asarray([u["weights"] for u in results["runs"]["online-bandit/0"]["online"]["updates"]])
    assert rule == "bandit" and track.end == 40 and list(track.starts) == [0, 10, 20, 30]
    assert np.allclose(track.top[1:], first[:, track.clusters]) and np.allclose(track.top[0], 1 / 6)
    run = tmp_path / "r"
    save_json(run / "experiment" / "results.json", results)
    text = build_report(run, progress=False).read_text()
    experiment = text[text.index('<section id="experiment">'):].split("</section>")[0]
    assert re.findall(r'<img src="([^"]+)"', experiment) == ["experiment-online-online-bandit.png"]
    png_ok(run / "report" / "experiment-online-online-bandit.png")


def test_experiment_runs_without_online_render_as_before(tmp_path):
    results = _experiment_results()
    results["runs"] = {k: {key: v for key, v in r.items() if key != "online"} for k, r in results["runs"].items()}
    assert experiment_online(results) == {}
    save_json(tmp_path / "r" / "experiment" / "results.json", results)
    text = build_report(tmp_path / "r", progress=False).read_text()
    assert "<img" not in text[text.index('<section id="experiment">'):].split("</section>")[0]
    assert not list((tmp_path / "r" / "report").glob("experiment-online-*.png"))


def test_the_experiment_plots_include_the_online_weights_at_large_k(tmp_path):
    from clusterclip.experiment.plots import write_plots

    results = _experiment_results(k=2000)
    written = write_plots(json.loads(json.dumps(results)), tmp_path)
    assert written == ["online-online-bandit.png"]
    png_ok(tmp_path / written[0])
    assert (tmp_path / written[0]).stat().st_size < 250_000
    del results["runs"]["online-bandit/0"]["online"]["updates"][1]["weights"][5]
    assert experiment_online(results) == {}, "a run whose record is malformed is left out"


def test_an_online_json_edited_by_hand_is_not_drawn(online_run):
    run, leaf = online_run
    path = run / plan_path(leaf, ONLINE_RECORD)
    record = load_json(path)
    record["controller"]["weights"] = [0.6, 0.1, 0.1, 0.1, 0.1]  # well formed, but no plan was built with them
    save_json(path, record)
    text = build_report(run, progress=False).read_text()
    notes = text[text.index('<section id="notes">'):]
    assert "does not match the size and SHA-256 its mixer recorded" in notes and f"plan {leaf} left out" in notes
    assert "60 %" not in online_section(text), "the edited weights are drawn nowhere"
    chains = online_section_model(load_run(run)).chains
    assert all(leaf != c.leaf and leaf not in [u.plan for u in c.updates] for c in chains)


def test_the_effective_clusters_chart_draws_each_continuation_from_its_switch(online_run, monkeypatch):
    from clusterclip.report import charts
    from clusterclip.report.model import EFFECTIVE_CHART, page_model

    run, leaf = online_run
    drawn: dict[str, np.ndarray] = {}
    line = charts._plan_line
    monkeypatch.setattr(charts, "_plan_line", lambda ax, x, y, name, *a: (drawn.update({name: x}),
                                                                            line(ax, x, y, name, *a)))
    spec = next(c for c in page_model(load_run(run), None).charts if c.file == EFFECTIVE_CHART)
    spec.draw(run / "effective.png")
    starts = {rec["plan"]: rec["position"] for rec in chain_records(run, leaf)}
    assert len(starts) == 4 and set(starts) <= set(drawn)
    for plan, position in starts.items():
        assert drawn[plan][0] == position, f"{plan} starts at its switch position {position}"


def test_updates_that_left_the_weights_unchanged_are_said_so(run_dir):  # noqa: F811
    """ODM's schedule keeps the weights uniform for K ln K = 8 steps at K = 5: the first update (after 5 steps)
    changes nothing, and the chain's facts say so and why."""
    from clusterclip.torch.mixer import OnlineMixer

    labels = np.load(Path(run_dir) / LABELS)
    mixer = OnlineMixer(run_dir, ROOT_PLAN, every=EVERY, explore="odm")
    for step in range(1, 11):  # steps of 8 samples with losses by cluster (which documents does not matter here)
        ids = labels[np.arange(8 * step - 8, 8 * step) % labels.size]
        mixer.report(ids, (1.0 + ids) / 4)
        mixer.maybe_update(8 * step)
    records = chain_records(Path(run_dir), mixer.plan)
    assert [r["changed"] for r in records] == [False, True]
    section = online_section(build_report(run_dir, progress=False).read_text())
    assert "weights left unchanged by" in section
    assert "1 of 2: the bandit keeps them uniform for its first 8 training steps (explore=&#x27;odm&#x27;)" in section
    assert table_rows(section)[1][4] == "unchanged"
