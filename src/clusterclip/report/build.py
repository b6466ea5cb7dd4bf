"""Build the HTML report of a run directory from the artifacts its stages left there.

The report only reads: every stage is optional, and a missing piece (no plans, no ground-truth
group, no experiment, even no clustering) removes or annotates its section instead of failing. Cost is
one streamed pass over the corpus parquet (keywords, example snippets, ground-truth counts) plus a few
small charts, so a 16k-document, K≈100 run builds in seconds.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip import __version__
from clusterclip.corpus import corpus_parts
from clusterclip.errors import ClusterClipError
from clusterclip.report import charts
from clusterclip.report import html as h
from clusterclip.report.keywords import CorpusScan, scan_corpus
from clusterclip.report.metrics import effective_number, nmi_from_table, purity_from_table, top_share
from clusterclip.rundir import RunDir, StaleArtifactError, atomic_write, load_json, load_npy

OWN_PNG = re.compile(r"^(sizes|effective-clusters|centroid-map|(mixture|repeats|experiment)-.+)\.png$")
TOP_IN_MIXTURE = 8
MAX_EXPERIMENT_CHARTS = 6


@dataclass
class Plan:
    """One plan's record and arrays (any array may be missing: None)."""

    name: str
    slug: str
    record: dict[str, Any]
    n_draws: int | None = None
    cluster_draws: np.ndarray | None = None
    mixture: np.ndarray | None = None
    repeat_hist: np.ndarray | None = None
    exhausted_at: np.ndarray | None = None
    window: int = 0

    @property
    def config(self) -> dict[str, Any]:
        return self.record.get("config") or {}


@dataclass
class Run:
    """Everything the report reads from a run directory; missing artifacts are None."""

    root: Path
    corpus: dict[str, Any] | None = None
    embed: dict[str, Any] | None = None
    cluster: dict[str, Any] | None = None
    tokens: np.ndarray | None = None
    labels: np.ndarray | None = None
    scores: np.ndarray | None = None
    sizes: np.ndarray | None = None
    centroids: np.ndarray | None = None
    plans: list[Plan] = field(default_factory=list)
    experiment: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def k(self) -> int:
        return 0 if self.sizes is None else len(self.sizes)

    @property
    def n_docs(self) -> int | None:
        for v in ((self.corpus or {}).get("count"), self.tokens, self.labels):
            if isinstance(v, np.ndarray):
                return len(v)
            if v is not None:
                return int(v)
        return None


def _record(rd: RunDir, stage: str, notes: list[str]) -> dict[str, Any] | None:
    try:
        return rd.record(stage)
    except StaleArtifactError as exc:
        notes.append(str(exc))
        return None


def _array(path: Path, notes: list[str], mmap: bool = False) -> np.ndarray | None:
    if not path.exists():
        return None
    try:
        return load_npy(path, mmap=mmap)
    except StaleArtifactError as exc:
        notes.append(str(exc))
        return None


def _slug(name: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "plan"
    slug, i = base, 2
    while slug in taken:
        slug, i = f"{base}-{i}", i + 1
    taken.add(slug)
    return slug


def load_run(run_dir: str | os.PathLike[str]) -> Run:
    """Read the records and arrays of a run directory that the report uses."""
    rd = RunDir(run_dir)
    if not rd.root.is_dir():
        raise ClusterClipError(f"{rd.root}: not a run directory (it does not exist)")
    run = Run(root=rd.root)
    run.corpus = _record(rd, "corpus", run.notes)
    run.embed = _record(rd, "embed", run.notes)
    run.cluster = _record(rd, "cluster", run.notes)
    run.tokens = _array(rd.path("tokens.npy"), run.notes)
    run.labels = _array(rd.path("labels.npy"), run.notes)
    run.scores = _array(rd.path("scores.npy"), run.notes)
    run.sizes = _array(rd.path("sizes.npy"), run.notes)
    run.centroids = _array(rd.path("centroids.npy"), run.notes)
    if run.labels is not None:
        run.labels = np.asarray(run.labels, dtype=np.int64)
        k = int(run.labels.max(initial=-1)) + 1
        if run.sizes is None:
            run.sizes = np.bincount(run.labels[run.labels >= 0], minlength=k)
        elif k > len(run.sizes):
            run.notes.append(f"labels.npy names cluster {k - 1} but sizes.npy has only {len(run.sizes)} clusters")
            run.labels = None
    if run.scores is not None and run.labels is not None and len(run.scores) != len(run.labels):
        run.notes.append("scores.npy and labels.npy differ in length; scores ignored")
        run.scores = None
    if run.tokens is not None and run.labels is not None and len(run.tokens) != len(run.labels):
        run.notes.append("tokens.npy and labels.npy differ in length; token shares per cluster omitted")
    taken: set[str] = set()
    for rec_path in sorted(rd.path("plans").glob("*/plan.json")):
        try:
            rec = load_json(rec_path)
        except (OSError, ValueError) as exc:
            run.notes.append(f"{rec_path}: unreadable plan record ({exc}); plan skipped")
            continue
        run.plans.append(_load_plan(rec_path.parent, rec, run, _slug(rec_path.parent.name, taken)))
    exp_path = rd.path("experiment", "results.json")
    if exp_path.exists():
        try:
            run.experiment = load_json(exp_path)
        except (OSError, ValueError) as exc:
            run.notes.append(f"{exp_path}: unreadable ({exc}); experiment section omitted")
    return run


def _load_plan(folder: Path, rec: dict[str, Any], run: Run, slug: str) -> Plan:
    """A plan's arrays; per-cluster draws, mixture and repetition histogram are recomputed from
    ``plan.npy`` and the labels when the planner did not write them."""
    plan = Plan(name=folder.name, slug=slug, record=rec if isinstance(rec, dict) else {})
    order = _array(folder / "plan.npy", run.notes, mmap=True)
    plan.n_draws = len(order) if order is not None else (plan.record.get("stats") or {}).get("draws")
    plan.cluster_draws = _array(folder / "cluster_draws.npy", run.notes)
    plan.mixture = _array(folder / "mixture.npy", run.notes)
    plan.repeat_hist = _array(folder / "repeat_hist.npy", run.notes)
    plan.exhausted_at = _array(folder / "cluster_exhausted_at.npy", run.notes)
    window = plan.config.get("window") or (plan.record.get("stats") or {}).get("window")
    k = run.k
    labels = run.labels
    if not window and plan.mixture is not None and plan.n_draws and len(plan.mixture):
        window = math.ceil(plan.n_draws / len(plan.mixture))
    plan.window = int(window or max(1, (plan.n_draws or 1) // 100))
    if order is not None and labels is not None and len(order):
        valid = bool(order.min() >= 0 and order.max() < len(labels))
        if plan.cluster_draws is None and valid:
            plan.cluster_draws = np.bincount(labels[order], minlength=k)
        if plan.mixture is None and valid and k:
            win = np.arange(len(order)) // plan.window
            plan.mixture = np.bincount(win * k + labels[order], minlength=(int(win[-1]) + 1) * k).reshape(-1, k)
        if plan.repeat_hist is None and order.max() < len(labels):
            plan.repeat_hist = np.bincount(np.bincount(order, minlength=len(labels)))
    if plan.mixture is not None and (plan.mixture.ndim != 2 or (k and plan.mixture.shape[1] != k)):
        run.notes.append(f"plan {plan.name}: mixture.npy has shape {plan.mixture.shape}, expected [W, {k}]")
        plan.mixture = None
    if plan.cluster_draws is not None and k and len(plan.cluster_draws) != k:
        run.notes.append(f"plan {plan.name}: cluster_draws.npy has {len(plan.cluster_draws)} entries, expected {k}")
        plan.cluster_draws = None
    return plan


def build_report(
    run_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None, progress: bool = True
) -> Path:
    """Write ``report.html`` and its PNG charts for a run directory; returns the HTML path.

    ``out_dir`` defaults to ``RUN_DIR/report``. The page is self-contained (no network): the charts are
    PNG files beside it, referenced relatively, so the folder can be copied or served as is. Charts a
    previous build wrote that this build no longer produces (e.g. of a deleted plan) are removed.
    ``progress`` shows tqdm bars on stderr for the corpus pass and the charts.
    """
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    run = load_run(run_dir)
    out = Path(out_dir) if out_dir is not None else run.root / "report"
    out.mkdir(parents=True, exist_ok=True)

    scan: CorpusScan | None = None
    parts = corpus_parts(RunDir(run.root))
    if parts and run.labels is not None and run.k:
        scan = scan_corpus(parts, run.labels, run.k, scores=run.scores, progress=progress)

    jobs: list[tuple[str, Callable[[], charts.Chart]]] = []
    if run.k:
        jobs.append(("sizes", partial(charts.plot_sizes, run.sizes, out / "sizes.png")))
    for p in run.plans:
        if p.mixture is not None and run.k:
            png = out / f"mixture-{p.slug}.png"
            jobs.append(
                (
                    png.stem,
                    partial(
                        charts.plot_mixture, p.mixture, run.sizes, p.window, png, p.name, TOP_IN_MIXTURE, p.exhausted_at
                    ),
                )
            )
        if p.repeat_hist is not None:
            png = out / f"repeats-{p.slug}.png"
            jobs.append((png.stem, partial(charts.plot_repeats, p.repeat_hist, png, p.name)))
    with_mixture = {p.name: (p.mixture, p.window) for p in run.plans if p.mixture is not None}
    if with_mixture and run.k:
        png = out / "effective-clusters.png"
        jobs.append((png.stem, partial(charts.plot_effective_clusters, with_mixture, run.sizes, png)))
    majority = _majority_groups(scan)
    if run.centroids is not None and run.k and len(run.centroids) == run.k:
        png = out / "centroid-map.png"
        jobs.append((png.stem, partial(charts.plot_centroid_map, run.centroids, run.sizes, png, groups=majority)))
    jobs.extend(_experiment_chart_jobs(run.experiment, out))

    made: dict[str, charts.Chart] = {}
    for name, job in tqdm(jobs, desc="report: charts", unit="chart", disable=not progress, leave=False):
        made[name] = job()

    elapsed = time.perf_counter() - t0
    text = _render(run, scan, made, majority, elapsed)
    html_path = out / "report.html"
    with atomic_write(html_path, "w") as fh:
        fh.write(text)
    keep = {c.path.name for c in made.values()}
    for png in out.glob("*.png"):
        if OWN_PNG.match(png.name) and png.name not in keep:
            with contextlib.suppress(OSError):
                png.unlink()
    return html_path


def _majority_groups(scan: CorpusScan | None) -> list[str | None] | None:
    if scan is None or scan.contingency is None:
        return None
    t = scan.contingency
    return [scan.groups[int(t[c].argmax())] if t[c].sum() else None for c in range(len(t))]


# --------------------------------------------------------------------------------------------- sections


def _render(
    run: Run, scan: CorpusScan | None, made: dict[str, charts.Chart], majority: list[str | None] | None, elapsed: float
) -> str:
    sections = [
        ("summary", "Summary", _summary(run, elapsed)),
        ("sizes", "Cluster sizes", _sizes(run, made)),
        ("clusters", "Clusters", _clusters(run, scan)),
        ("plans", "Plans", _plans(run)),
        ("mixture", "Mixture over training", _mixture(run, made)),
        ("repetition", "Repetition", _repetition(run, made)),
        ("effective-clusters", "Effective clusters", _effective(run, made)),
        ("centroid-map", "Centroid map", _centroid_map(run, made, majority)),
        ("ground-truth", "Ground truth", _ground_truth(run, scan)),
    ]
    if run.experiment is not None:
        sections.append(("experiment", "Experiment", _experiment(run, made)))
    if run.notes:
        sections.append(
            (
                "notes",
                "Notes",
                h.section(
                    "notes",
                    "Notes",
                    "<ul>" + "".join(f"<li>{h.esc(n)}</li>" for n in run.notes) + "</ul>",
                    "Problems met while reading the run directory; the affected parts are omitted.",
                ),
            )
        )
    meta = (
        f"run directory <code>{h.esc(run.root.resolve())}</code> · generated "
        f"{h.esc(time.strftime('%Y-%m-%d %H:%M:%S'))}"
    )
    footer = f"clusterclip {h.esc(__version__)} · report built in {h.esc(h.fmt_seconds(elapsed))}"
    return h.page(f"clusterclip report: {run.root.resolve().name}", meta, sections, footer)


def _get(rec: dict[str, Any] | None, *keys: str) -> Any:
    cur: Any = rec or {}
    for k in keys:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(k)
    return cur


def _summary(run: Run, elapsed: float) -> str:
    n = run.n_docs
    tokens = _get(run.corpus, "tokens")
    if tokens is None and run.tokens is not None:
        tokens = int(np.asarray(run.tokens).sum())
    model = _get(run.embed, "model") or _get(run.embed, "embedder") or _get(run.embed, "config", "embedder", "name")
    model = model if isinstance(model, str) else None
    dim = _get(run.embed, "dim")
    objective = _get(run.cluster, "objective")
    big = [
        ("documents", h.fmt_num(n) if n is not None else "–"),
        ("tokens", h.fmt_num(int(tokens)) if tokens is not None else "–"),
        ("clusters (K)", h.fmt_num(run.k) if run.k else "–"),
        ("embedder", str(model) if model else "–"),
        ("objective (mean cosine)", f"{objective:.4f}" if isinstance(objective, (int, float)) else "–"),
        ("plans", str(len(run.plans))),
    ]
    details: list[tuple[str, object]] = []
    inputs = _get(run.corpus, "config", "inputs")
    if inputs:
        details.append(("inputs", ", ".join(map(str, inputs)) if isinstance(inputs, list) else inputs))
    if _get(run.corpus, "skipped") is not None:
        details.append(("records skipped", _get(run.corpus, "skipped")))
    if n and tokens:
        details.append(("mean tokens per document", float(tokens) / n))
    if dim:
        details.append(("embedding dimension", dim))
    option = _get(run.embed, "config", "embedder")
    if isinstance(option, dict):
        option = ", ".join(f"{k}={v}" for k, v in option.items())
    if option and option != model:
        details.append(("embedder settings", option if len(str(option)) <= 240 else str(option)[:240] + "…"))
    for key in ("seed", "niter", "nredo", "init", "points_per_centroid"):
        if _get(run.cluster, "config", key) is not None:
            details.append((f"k-means {key}", _get(run.cluster, "config", key)))
    if _get(run.cluster, "iterations") is not None:
        details.append(("k-means iterations", _get(run.cluster, "iterations")))
    if _get(run.cluster, "sample_size") is not None:
        details.append(("k-means training sample", _get(run.cluster, "sample_size")))
    timing = [
        (stage, rec.get("seconds"))
        for stage, rec in (("corpus", run.corpus), ("embed", run.embed), ("cluster", run.cluster))
        if rec
    ]
    timing += [(f"plan {p.name}", p.record.get("seconds")) for p in run.plans]
    timing.append(("report (this page)", elapsed))
    time_table = h.table(
        [h.Column("stage"), h.Column("time", numeric=True)],
        [(s, h.Cell(h.esc(h.fmt_seconds(t)), sort=t, numeric=True)) for s, t in timing],
    )
    missing = [s for s, rec in (("corpus", run.corpus), ("embed", run.embed), ("cluster", run.cluster)) if not rec]
    warn = h.note("Stages not finished in this run directory: " + ", ".join(missing)) if missing else ""
    body = (
        h.cards(big)
        + warn
        + '<div class="grid"><div>'
        + "<h3>Details</h3>"
        + h.key_values(details)
        + "</div><div><h3>Time per stage</h3>"
        + time_table
        + "</div></div>"
    )
    return h.section("summary", "Corpus and clustering", body)


def _sizes(run: Run, made: dict[str, charts.Chart]) -> str:
    title = "Cluster size distribution"
    if not run.k or "sizes" not in made:
        return h.section("sizes", title, h.note("No clustering in this run directory."))
    s = np.asarray(run.sizes)
    k1, share1 = top_share(s, 0.01)
    k10, share10 = top_share(s, 0.10)
    nat = float(effective_number(s))
    items = [
        ("largest 1% of clusters", f"{share1:.1%} of docs ({k1} cl.)"),
        ("largest 10% of clusters", f"{share10:.1%} of docs ({k10} cl.)"),
        ("largest / median / smallest", f"{int(s.max()):,} / {int(np.median(s)):,} / {int(s.min()):,}"),
        ("empty clusters", str(int((s == 0).sum()))),
        ("effective number of clusters", f"{nat:.1f} of {len(s)}"),
    ]
    intro = (
        "Clusters sorted from largest to smallest, log scale. Random sampling gives each cluster a share "
        "of training equal to its share of the corpus, so a steep head means a few topics dominate."
    )
    return h.section("sizes", title, h.cards(items) + h.figure(made["sizes"], "sizes.png"), intro)


def _clusters(run: Run, scan: CorpusScan | None) -> str:
    title = "Clusters"
    if not run.k:
        return h.section("clusters", title, h.note("No clustering in this run directory."))
    k = run.k
    sizes = np.asarray(run.sizes, dtype=np.int64)
    n = max(int(sizes.sum()), 1)
    labels = run.labels
    mean_cos = tok_share = None
    if labels is not None and run.scores is not None:
        cnt = np.bincount(labels, minlength=k)
        mean_cos = np.bincount(labels, weights=run.scores, minlength=k) / np.maximum(cnt, 1)
        mean_cos[cnt == 0] = np.nan
    if labels is not None and run.tokens is not None and len(run.tokens) == len(labels):
        tok = np.bincount(labels, weights=np.asarray(run.tokens, dtype=np.float64), minlength=k)
        tok_share = tok / max(tok.sum(), 1.0)
    plan_shares = [
        (p.name, p.cluster_draws / max(p.cluster_draws.sum(), 1)) for p in run.plans if p.cluster_draws is not None
    ]
    groups = scan is not None and scan.contingency is not None

    cols = [
        h.Column("cluster", numeric=True, ascending_first=True),
        h.Column("docs", numeric=True),
        h.Column("% corpus", numeric=True, tip="share of the corpus's documents"),
    ]
    if tok_share is not None:
        cols.append(h.Column("% tokens", numeric=True, tip="share of the corpus's tokens"))
    if mean_cos is not None:
        cols.append(h.Column("mean cos", numeric=True, tip="mean cosine similarity of the documents to the centroid"))
    cols += [
        h.Column(f"% draws {name}", numeric=True, tip=f"share of the draws of plan {name}") for name, _ in plan_shares
    ]
    if groups:
        cols.append(h.Column("majority group", tip="most frequent ground-truth group and its share of the cluster"))
    cols += [h.Column("keywords"), h.Column("examples (closest to centroid)")]

    order = np.argsort(-sizes, kind="stable")
    n_badge = min(5, max(1, k // 10))
    largest = set(order[:n_badge].tolist())
    smallest = set(order[::-1][:n_badge].tolist()) - largest
    rows = []
    for c in order:
        c = int(c)
        badge = (
            '<span class="badge large">largest</span>'
            if c in largest
            else '<span class="badge small">smallest</span>'
            if c in smallest
            else ""
        )
        row: list[object] = [
            h.Cell(f"{c}{badge}", sort=c, numeric=True),
            int(sizes[c]),
            h.Cell(f"{100 * sizes[c] / n:.2f}", sort=float(sizes[c] / n), numeric=True),
        ]
        if tok_share is not None:
            row.append(h.Cell(f"{100 * tok_share[c]:.2f}", sort=float(tok_share[c]), numeric=True))
        if mean_cos is not None:
            v = float(mean_cos[c])
            row.append(h.Cell("–" if math.isnan(v) else f"{v:.3f}", sort=v, numeric=True))
        for _, share in plan_shares:
            row.append(h.Cell(f"{100 * share[c]:.2f}", sort=float(share[c]), numeric=True))
        if groups:
            t = scan.contingency[c]
            if t.sum():
                g = int(t.argmax())
                row.append(h.Cell(f"{h.esc(scan.groups[g])} ({t[g] / t.sum():.0%})", sort=scan.groups[g]))
            else:
                row.append("–")
        kws = scan.keywords[c] if scan is not None else []
        row.append(h.Cell(h.esc(", ".join(w for w, _ in kws)) if kws else "–", cls="kw"))
        row.append(
            h.Cell(_examples_html(scan.examples.get(c, []) if scan is not None else []), sort="", cls="examples")
        )
        rows.append(row)

    quick = (
        '<div class="quick">Largest: '
        + "".join(f'<a href="#cluster-{int(c)}">#{int(c)} ({int(sizes[c]):,})</a>' for c in order[:5])
        + " · Smallest: "
        + "".join(f'<a href="#cluster-{int(c)}">#{int(c)} ({int(sizes[c]):,})</a>' for c in order[::-1][:5])
        + "</div>"
    )
    toolbar = (
        '<div class="toolbar"><input type="search" placeholder="filter clusters (keyword, group, text)"'
        ' data-filter="cluster-table" aria-label="filter clusters">' + quick + "</div>"
    )
    table = h.table(cols, rows, table_id="cluster-table", sortable=True, row_ids=[f"cluster-{int(c)}" for c in order])
    notes = ""
    if scan is None:
        notes = h.note("No corpus text (corpus/part-*.parquet) or labels: keywords and examples omitted.")
    intro = (
        "One row per cluster, largest first; click a header to sort, type to filter. Keywords are "
        "class-based TF-IDF (words frequent in this cluster and rare in others, English stopwords "
        "removed); examples are the documents closest to the centroid. "
        "<b>% draws</b> is the share of each plan's training draws that comes from the cluster."
    )
    return h.section("clusters", title, notes + toolbar + f'<div class="scroll">{table}</div>', intro)


def _examples_html(snippets: list[str]) -> str:
    if not snippets:
        return "–"
    head = snippets[0] if len(snippets[0]) <= 90 else snippets[0][:90].rstrip() + "…"
    items = "".join(f"<li>{h.esc(s)}</li>" for s in snippets)
    return f"<details><summary>{h.esc(head)}</summary><ol>{items}</ol></details>"


def _plans(run: Run) -> str:
    title = "Plans"
    if not run.plans:
        return h.section("plans", title, h.note("No plans in this run directory (plans/*/plan.json)."))
    cfg_keys = ["strategy", "budget", "budget_unit", "max_repeat", "tau", "weights", "seed", "window"]
    fields: list[str] = [*cfg_keys, "draws", "clusters exhausted"]
    for p in run.plans:
        for key, v in (p.record.get("stats") or {}).items():
            if _scalar(v) and key not in fields and key not in ("name", "clusters_exhausted", "n_windows"):
                fields.append(key)
    rows = []
    for f in fields:
        row: list[object] = [h.Cell(f"<b>{h.esc(f)}</b>")]
        for p in run.plans:
            stats = p.record.get("stats") or {}
            if f in cfg_keys:
                v = p.config.get(f)
                v = stats.get(f) if v is None else v
                v = p.window if f == "window" and v is None else v
            elif f == "draws":
                v = p.n_draws
            elif f == "clusters exhausted":
                v = stats.get("clusters_exhausted")
                if v is None and p.exhausted_at is not None:
                    v = int((np.asarray(p.exhausted_at) >= 0).sum())
            else:
                v = stats.get(f)
            row.append(_plain(v))
        rows.append(row)
    intro = (
        "Each plan is one ordered list of document indices for the whole training run. Strategy "
        "<i>random</i> follows the corpus's natural mixture, <i>uniform</i> balances clusters, "
        "<i>clusterclip</i> balances them with a per-document repetition cap (max_repeat). "
        "Options first, then the statistics recorded by the planner."
    )
    table = h.table([h.Column("")] + [h.Column(p.name) for p in run.plans], rows, "plan-table")
    return h.section("plans", title, f'<div class="scroll">{table}</div>', intro)


def _scalar(v: object) -> bool:
    return isinstance(v, (int, float, str, bool)) or v is None


def _plain(v: object) -> object:
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return int(v)
    if isinstance(v, (dict, list)):
        return "custom" if v else "–"
    return v


def _mixture(run: Run, made: dict[str, charts.Chart]) -> str:
    title = "Mixture over training"
    figs = [
        h.figure(made[f"mixture-{p.slug}"], f"mixture-{p.slug}.png") for p in run.plans if f"mixture-{p.slug}" in made
    ]
    if not figs:
        return h.section("mixture", title, h.note("No plan with a mixture (plans/*/mixture.npy)."))
    intro = (
        f"Share of each window of draws taken by the {TOP_IN_MIXTURE} largest clusters (the rest in grey). "
        "Random stays on the dashed line (the natural share of those clusters); uniform stays near the "
        "dotted line (their balanced share); ClusterClip starts balanced and drifts towards natural as "
        "small clusters are exhausted (red ticks on the top edge)."
    )
    return h.section("mixture", title, "".join(figs), intro)


def _repetition(run: Run, made: dict[str, charts.Chart]) -> str:
    title = "Repetition"
    figs = [
        h.figure(made[f"repeats-{p.slug}"], f"repeats-{p.slug}.png") for p in run.plans if f"repeats-{p.slug}" in made
    ]
    if not figs:
        return h.section("repetition", title, h.note("No plan with a repetition histogram."))
    intro = (
        "Number of documents each plan draws 0, 1, 2, ... times. Uniform sampling repeats the documents "
        "of small clusters many times; ClusterClip caps every document at max_repeat."
    )
    return h.section("repetition", title, f'<div class="grid">{"".join(figs)}</div>', intro)


def _effective(run: Run, made: dict[str, charts.Chart]) -> str:
    title = "Effective number of clusters over training"
    if "effective-clusters" not in made:
        return h.section("effective-clusters", title, h.note("No plan with a mixture."))
    intro = (
        "exp(entropy) of the cluster shares in each window: K when every cluster is drawn equally "
        "often, the dashed line for the corpus's natural mixture. Higher means more diverse training "
        "at that point."
    )
    return h.section("effective-clusters", title, h.figure(made["effective-clusters"], "effective-clusters.png"), intro)


def _centroid_map(run: Run, made: dict[str, charts.Chart], majority: list[str | None] | None) -> str:
    title = "Map of the clusters"
    if "centroid-map" not in made:
        return h.section("centroid-map", title, h.note("No centroids (centroids.npy) in this run directory."))
    colour = ", coloured by their majority ground-truth group" if majority is not None else ""
    intro = (
        f"Centroids projected on their first two principal components, area proportional to size{colour}. "
        "Nearby points are clusters of similar content; two principal components only show part of "
        "the geometry (see the variance shares on the axes)."
    )
    return h.section("centroid-map", title, h.figure(made["centroid-map"], "centroid-map.png"), intro)


def _ground_truth(run: Run, scan: CorpusScan | None) -> str:
    title = "Agreement with ground truth"
    if scan is None or scan.contingency is None:
        return h.section(
            "ground-truth",
            title,
            h.note("The corpus has no ground-truth group (group column empty), so agreement is not measured."),
        )
    t = scan.contingency
    labelled = int(t.sum())
    n = run.n_docs or labelled
    nmi = nmi_from_table(t)
    pur = purity_from_table(t)
    items = [
        ("NMI", f"{nmi:.3f}"),
        ("purity", f"{pur:.3f}"),
        ("groups", str(len(scan.groups))),
        ("documents with a group", f"{labelled:,} ({labelled / max(n, 1):.0%})"),
    ]
    lead = np.where(t.sum(axis=1) > 0, t.argmax(axis=1), -1)
    rows = []
    for g, name in enumerate(scan.groups):
        col = t[:, g]
        docs = int(col.sum())
        major = np.flatnonzero(lead == g)
        top = int(col.argmax())
        rows.append(
            [
                name,
                docs,
                h.Cell(f"{docs / max(labelled, 1):.1%}", sort=docs, numeric=True),
                int((col > 0).sum()),
                len(major),
                h.Cell(
                    f"{col[major].sum() / max(docs, 1):.1%}", sort=float(col[major].sum() / max(docs, 1)), numeric=True
                ),
                h.Cell(f"#{top} ({col[top] / max(docs, 1):.0%})", sort=float(col[top] / max(docs, 1)), numeric=True),
            ]
        )
    cols = [
        h.Column("group"),
        h.Column("docs", numeric=True),
        h.Column("% docs", numeric=True),
        h.Column("clusters holding it", numeric=True),
        h.Column("clusters it leads", numeric=True, tip="clusters where it is the majority group"),
        h.Column("% in clusters it leads", numeric=True),
        h.Column("largest cluster", numeric=True, tip="the cluster with most of its documents"),
    ]
    intro = (
        "How well clusters recover the known groups (e.g. domains). NMI: normalised mutual information "
        "between cluster and group (1 = same partition, 0 = independent). Purity: share of documents "
        "whose cluster's majority group is their own. With K much larger than the number of groups, "
        "purity is the more telling number; NMI is capped by splitting groups into many clusters."
    )
    return h.section("ground-truth", title, h.cards(items) + h.table(cols, rows, "group-table", True), intro)


# ------------------------------------------------------------------------------------------ experiment


_X_KEYS = ("step", "steps", "x", "tokens", "tokens_seen", "position", "epoch")


def _numeric_list(v: object, gaps: bool = False) -> bool:
    """A non-empty list of numbers; with ``gaps`` None entries (missing points) are allowed too."""
    if not isinstance(v, list) or not v:
        return False
    ok = [isinstance(x, (int, float)) and not isinstance(x, bool) for x in v]
    return all(ok) or (gaps and any(ok) and all(o or x is None for o, x in zip(ok, v, strict=True)))


def _floats(v: list[Any]) -> np.ndarray:
    return np.array([np.nan if x is None else x for x in v], dtype=float)


def experiment_curves(results: dict[str, Any]) -> dict[str, tuple[str, dict[str, tuple[np.ndarray, np.ndarray]]]]:
    """Curves of an experiment's ``results.json`` as {metric: (x label, {series: (x, y)})}.

    Accepts ``curves`` as {name: [y...]}, {name: [[x, y], ...]}, {name: {x_key: [...], metric: [...]}}
    or a list of such dicts carrying a ``name``/``strategy``; ``null`` y values are gaps; anything else
    is ignored.
    """
    curves = results.get("curves") if isinstance(results, dict) else None
    if isinstance(curves, list):
        curves = {str(c.get("name") or c.get("strategy") or i): c for i, c in enumerate(curves) if isinstance(c, dict)}
    out: dict[str, tuple[str, dict[str, tuple[np.ndarray, np.ndarray]]]] = {}
    if not isinstance(curves, dict):
        return out
    for name, v in curves.items():
        if _numeric_list(v, gaps=True):
            out.setdefault("loss", ("step", {}))[1][str(name)] = (np.arange(len(v)), _floats(v))
        elif isinstance(v, list) and v and all(isinstance(p, list) and len(p) == 2 and _numeric_list(p) for p in v):
            a = np.asarray(v, dtype=float)
            out.setdefault("loss", ("step", {}))[1][str(name)] = (a[:, 0], a[:, 1])
        elif isinstance(v, dict):
            xkey = next((k for k in _X_KEYS if _numeric_list(v.get(k))), None)
            for metric, ys in v.items():
                if metric == xkey or not _numeric_list(ys, gaps=True):
                    continue
                if xkey and len(v[xkey]) == len(ys):
                    x, xlabel = np.asarray(v[xkey], dtype=float), xkey
                else:
                    x, xlabel = np.arange(len(ys)), "index"
                out.setdefault(str(metric), (xlabel, {}))[1][str(name)] = (x, _floats(ys))
    return out


def _experiment_chart_jobs(results: dict[str, Any] | None, out: Path) -> list[tuple[str, Callable[[], charts.Chart]]]:
    if not isinstance(results, dict):
        return []
    curves = list(experiment_curves(results).items())[:MAX_EXPERIMENT_CHARTS]
    return [
        (
            f"experiment-{i}",
            partial(
                charts.plot_curves,
                series,
                out / f"experiment-{i}.png",
                f"Experiment: {metric}",
                xlabel=xlabel,
                ylabel=metric,
            ),
        )
        for i, (metric, (xlabel, series)) in enumerate(curves)
    ]


def _summary_rows(summary: object) -> tuple[list[str], list[list[object]]]:
    """Rows of an experiment summary given as a list of dicts, a dict of dicts or a dict of scalars."""
    if isinstance(summary, dict) and summary and all(isinstance(v, dict) for v in summary.values()):
        summary = [{"name": k, **v} for k, v in summary.items()]
    if isinstance(summary, list) and summary and all(isinstance(r, dict) for r in summary):
        cols: list[str] = []
        for r in summary:
            cols += [k for k, v in r.items() if _scalar(v) and k not in cols]
        return cols, [[_plain(r.get(c)) for c in cols] for r in summary]
    if isinstance(summary, dict):
        return ["metric", "value"], [[k, _plain(v)] for k, v in summary.items() if _scalar(v)]
    return [], []


def _experiment(run: Run, made: dict[str, charts.Chart]) -> str:
    res = run.experiment
    body = ""
    if isinstance(res, dict):
        cols, rows = _summary_rows(res.get("summary"))
        if rows:
            numeric = [all(isinstance(r[i], (int, float)) or r[i] is None for r in rows) for i in range(len(cols))]
            body += h.table(
                [h.Column(c, numeric=num) for c, num in zip(cols, numeric, strict=True)], rows, "experiment-table", True
            )
        body += "".join(h.figure(c, c.path.name) for name, c in sorted(made.items()) if name.startswith("experiment-"))
    if not body:
        body = h.note("experiment/results.json has no summary rows or curves this report can show.")
    intro = "Results of the training experiment recorded in <code>experiment/results.json</code>."
    return h.section("experiment", "Experiment", body, intro)
