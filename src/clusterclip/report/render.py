"""The report page as HTML: one function per section, formatting a :class:`~clusterclip.report.model.Page`.

Nothing here reads the run directory or computes a statistic; numbers arrive in the model and are only
formatted (percentages, thousands separators, seconds) and laid out with :mod:`clusterclip.report.html`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

from clusterclip import __version__
from clusterclip.charts.style import Chart
from clusterclip.report import html as h
from clusterclip.report.clusters import ClusterRow, ClusterTable, GroundTruth
from clusterclip.report.dedup import render_dedup
from clusterclip.report.model import (
    TOP_IN_MIXTURE,
    ExperimentSection,
    Page,
    PlanSection,
    SizeSummary,
    Summary,
)
from clusterclip.report.online_html import online_html
from clusterclip.report.plan_table import plans_section
from clusterclip.report.scale import hide_paths, shown_path
from clusterclip.report.strata import render_strata

Charts = Mapping[str, Chart]
MAX_DRAW_COLUMNS = 3
"""Most plans whose % draws columns the clusters table shows side by side; with more, a menu picks one."""
CLUSTER_ROWS = 50
GROUP_ROWS = 25
"""Rows the clusters and ground-truth tables show until the reader asks for all of them."""
BADGE_CLASS = {"largest": "large", "smallest": "small"}


def render_page(page: Page, made: Charts, elapsed: float) -> str:
    """The HTML of ``page``; ``made`` maps chart file names to the charts drawn, ``elapsed`` is the build time."""
    online = [("online", "Online mixing", online_html(page.online, made))] if page.online is not None else []
    sections = [
        ("summary", "Summary", _summary(page.summary, elapsed)),
        ("sizes", "Cluster sizes", _sizes(page.sizes, made)),
        ("clusters", "Clusters", _clusters(page.clusters)),
        ("plans", "Plans", plans_section(page.plans)),
        ("mixture", "Mixture over training", _mixture(page.plans, made)),
        ("repetition", "Repetition", _repetition(page.plans, made)),
        *([("strata", "Strata", render_strata(page.strata, dict(made)))] if page.strata else []),
        ("effective-clusters", "Effective clusters", _effective(page.effective_chart, made)),
        *online,
        ("centroid-map", "Centroid map", _centroid_map(page, made)),
        ("ground-truth", "Ground truth", _ground_truth(page.ground_truth)),
    ]
    if page.experiment is not None:
        sections.append(("experiment", "Experiment", _experiment(page.experiment, made)))
    if page.tune is not None:
        from clusterclip.report.tune import tune_section

        sections.append(("tune", "Tune", tune_section(page.tune)))
    if page.dedup is not None:
        sections.append(("duplicates", "Duplicates", render_dedup(page.dedup)))
    if page.notes:
        items = "<ul>" + "".join(f"<li>{h.esc(n)}</li>" for n in page.notes) + "</ul>"
        intro = "Problems met while reading the run directory; the affected parts are omitted."
        sections.append(("notes", "Notes", h.section("notes", "Notes", items, intro)))
    shown = shown_path(page.run_dir)
    meta = f"run directory <code>{h.esc(shown)}</code> · generated {h.esc(time.strftime('%Y-%m-%d %H:%M:%S'))}"
    footer = f"clusterclip {h.esc(__version__)} · report built in {h.esc(h.fmt_seconds(elapsed))}"
    text = h.page(f"clusterclip report: {page.run_dir.resolve().name}", meta, sections, footer)
    return hide_paths(text, page.run_dir)


def _figure(made: Charts, file: str) -> str:
    return h.figure(made[file], file)


def _summary(s: Summary, elapsed: float) -> str:
    big = [
        ("documents", h.fmt_num(s.documents) if s.documents is not None else "–"),
        ("tokens", h.fmt_num(s.tokens) if s.tokens is not None else "–"),
        ("clusters (K)", h.fmt_num(s.k) if s.k else "–"),
        ("embedder", s.embedder or "–"),
        ("objective (mean cosine)", f"{s.objective:.4f}" if s.objective is not None else "–"),
        ("plans", str(s.n_plans)),
    ]
    timing = [*s.timing, ("report (this page)", elapsed)]
    time_table = h.table(
        [h.Column("stage"), h.Column("time", numeric=True)],
        [(stage, h.Cell(h.esc(h.fmt_seconds(t)), sort=t, numeric=True)) for stage, t in timing],
    )
    missing = s.missing_stages
    warn = h.note("Stages not finished in this run directory: " + ", ".join(missing)) if missing else ""
    body = (
        h.cards(big)
        + warn
        + '<div class="grid"><div>'
        + "<h3>Details</h3>"
        + h.key_values(s.details)
        + "</div><div><h3>Time per stage</h3>"
        + time_table
        + "</div></div>"
    )
    return h.section("summary", "Corpus and clustering", body)


def _sizes(s: SizeSummary | None, made: Charts) -> str:
    title = "Cluster size distribution"
    if s is None:
        return h.section("sizes", title, h.note("No clustering in this run directory."))
    items = [
        ("largest 1% of clusters", f"{s.top1[1]:.1%} of docs ({s.top1[0]} cl.)"),
        ("largest 10% of clusters", f"{s.top10[1]:.1%} of docs ({s.top10[0]} cl.)"),
        ("largest / median / smallest", f"{s.largest:,} / {s.median:,} / {s.smallest:,}"),
        ("empty clusters", str(s.empty)),
        ("effective number of clusters", f"{s.effective:.1f} of {s.k}"),
    ]
    intro = (
        "Clusters sorted from largest to smallest, log scale. Random sampling gives each cluster a share "
        "of training equal to its share of the corpus, so a steep head means a few topics dominate."
    )
    return h.section("sizes", title, h.cards(items) + _figure(made, s.chart), intro)


def _cluster_columns(t: ClusterTable) -> list[h.Column]:
    cols = [
        h.Column("cluster", numeric=True, ascending_first=True),
        h.Column("docs", numeric=True),
        h.Column("% corpus", numeric=True, tip="share of the corpus's documents"),
    ]
    if t.with_tokens:
        cols.append(h.Column("% tokens", numeric=True, tip="share of the corpus's tokens"))
    if t.with_cohesion:
        cols.append(h.Column("mean cos", numeric=True, tip="mean cosine similarity of the documents to the centroid"))
    if t.with_coverage:
        cols.append(h.Column("% seen", numeric=True, tip="mean share of its documents' text the embedder represented "
                             "(low: words outside its vocabulary, another script, truncated text)"))
    cols += [
        h.Column("% draws", numeric=True, tip=f"share of the draws of plan {name}", cls=f"draws {_pick(t, i)}".strip(),
                 plan=name)
        for i, name in enumerate(t.draw_plans)
    ]
    if t.with_groups:
        cols.append(h.Column("majority group", tip="most frequent ground-truth group and its share of the cluster"))
    return [*cols, h.Column("keywords"), h.Column("examples (closest to centroid)")]


def _percent(share: float, cls: str = "") -> h.Cell:
    return h.Cell(f"{100 * share:.2f}", sort=share, numeric=True, cls=cls)


def _pick(t: ClusterTable, plan: int) -> str:
    """The class of a plan's draws column: past :data:`MAX_DRAW_COLUMNS` plans, one column shows at a time."""
    if len(t.draw_plans) <= MAX_DRAW_COLUMNS:
        return ""
    return f"pick pick-{plan}" + (" pick-off" if plan else "")


def _plan_picker(t: ClusterTable) -> str:
    """The menu choosing which plan's draws column shows (none when every plan has its own column)."""
    if len(t.draw_plans) <= MAX_DRAW_COLUMNS:
        return ""
    options = "".join(f'<option value="{i}">{h.esc(name)}</option>' for i, name in enumerate(t.draw_plans))
    return (f'<label>% draws of plan <select data-pick="cluster-table" aria-label="plan shown in % draws">'
            f"{options}</select></label>")


def _cluster_row(r: ClusterRow, t: ClusterTable) -> list[object]:
    badge = f'<span class="badge {BADGE_CLASS[r.badge]}">{r.badge}</span>' if r.badge else ""
    row: list[object] = [h.Cell(f"{r.cluster}{badge}", sort=r.cluster, numeric=True), r.docs, _percent(r.share)]
    if r.token_share is not None:
        row.append(_percent(r.token_share))
    if r.mean_cos is not None:
        row.append(h.Cell("–" if math.isnan(r.mean_cos) else f"{r.mean_cos:.3f}", sort=r.mean_cos, numeric=True))
    if r.coverage is not None:
        row.append(h.Cell("–" if math.isnan(r.coverage) else f"{100 * r.coverage:.0f}", sort=r.coverage, numeric=True))
    row += [_percent(share, _pick(t, i)) for i, share in enumerate(r.draw_shares)]
    if t.with_groups:
        group, share = r.majority or (None, 0.0)
        row.append(h.Cell(f"{h.esc(group)} ({share:.0%})", sort=group) if group is not None else "–")
    row.append(h.Cell(h.esc(", ".join(r.keywords)) if r.keywords else "–", cls="kw"))
    row.append(h.Cell(_examples_html(r.examples), sort="", cls="examples"))
    return row


def _examples_html(snippets: tuple[str, ...]) -> str:
    if not snippets:
        return "–"
    head = snippets[0] if len(snippets[0]) <= 90 else snippets[0][:90].rstrip() + "…"
    items = "".join(f"<li>{h.esc(s)}</li>" for s in snippets)
    return f"<details><summary>{h.esc(head)}</summary><ol>{items}</ol></details>"


def _clusters(t: ClusterTable | None) -> str:
    title = "Clusters"
    if t is None:
        return h.section("clusters", title, h.note("No clustering in this run directory."))
    links = [
        [f'<a href="#cluster-{r.cluster}">#{r.cluster} ({r.docs:,})</a>' for r in rows[:5]]
        for rows in (t.rows, t.rows[::-1])
    ]
    quick = '<div class="quick">Largest: ' + "".join(links[0]) + " · Smallest: " + "".join(links[1]) + "</div>"
    toolbar = (
        '<div class="toolbar"><input type="search" placeholder="filter clusters (keyword, group, text)"'
        ' data-filter="cluster-table" aria-label="filter clusters">' + _plan_picker(t) + quick + "</div>"
    )
    rows = [_cluster_row(r, t) for r in t.rows]
    ids = [f"cluster-{r.cluster}" for r in t.rows]
    columns = _cluster_columns(t)
    table = h.table(columns, rows, table_id="cluster-table", sortable=True, row_ids=ids, css="fit", limit=CLUSTER_ROWS)
    more = h.more_rows("cluster-table", len(rows), CLUSTER_ROWS, "clusters")
    notes = (
        ""
        if t.with_text
        else h.note("No corpus text (corpus/part-*.parquet) or labels: keywords and examples omitted.")
    )
    intro = (
        "One row per cluster, largest first; click a header to sort, type to filter. Keywords are "
        "class-based TF-IDF (words frequent in this cluster and rare in others, English stopwords "
        "removed); examples are the documents closest to the centroid. "
        "<b>% draws</b> is the share of each plan's training draws that comes from the cluster."
    )
    box = f'<div class="scroll" style="{_narrow_grid(columns)}">{table}</div>'
    return h.section("clusters", title, notes + toolbar + more + box, intro)


def _narrow_grid(columns: list[h.Column]) -> str:
    """The clusters table's grid when its columns would scroll sideways (the page's script stacks it): the columns
    shown before keywords and examples on one line, a plan's % draws wider for its name, then keywords and
    examples side by side below them, so a laptop window shows every column."""
    shown = [c for c in columns[:-2] if "pick-off" not in c.cls]
    widths = " ".join("minmax(min-content,2fr)" if c.plan else "minmax(min-content,1fr)" for c in shown)
    return f"--cols:{widths}; --mid:{max(1, 2 * len(shown) // 5) + 1}"


def _charts_section(section_id: str, title: str, figs: list[str], missing: str, intro: str, grid: bool = False) -> str:
    """A section of figures, or the note ``missing`` when there are none."""
    if not figs:
        return h.section(section_id, title, h.note(missing))
    body = "".join(figs)
    return h.section(section_id, title, f'<div class="grid">{body}</div>' if grid else body, intro)


def _mixture(plans: tuple[PlanSection, ...], made: Charts) -> str:
    intro = (
        f"Share of each window of draws taken by the {TOP_IN_MIXTURE} largest clusters (the rest in grey). "
        "Random stays on the dashed line (the natural share of those clusters); uniform stays near the "
        "dotted line (their balanced share); ClusterClip starts balanced and drifts towards natural as "
        "small clusters are exhausted (red ticks on the top edge). Each point is a window of draws: the "
        "planner's windows, merged on a short plan so that a window holds enough draws to show a share "
        "(the x axis gives its size)."
    )
    figs = [_figure(made, p.mixture_chart) for p in plans if p.mixture_chart]
    missing = "No plan with a mixture (plans/*/mixture.npy)."
    return _charts_section("mixture", "Mixture over training", figs, missing, intro)


def _repetition(plans: tuple[PlanSection, ...], made: Charts) -> str:
    intro = (
        "Number of documents each plan draws 0, 1, 2, ... times. Uniform sampling repeats the documents "
        "of small clusters many times; ClusterClip caps every document at max_repeat. All charts share "
        "one y scale, so bars of the same height are the same number of documents."
    )
    figs = [_figure(made, p.repeats_chart) for p in plans if p.repeats_chart]
    missing = "No plan with a repetition histogram."
    return _charts_section("repetition", "Repetition", figs, missing, intro, grid=True)


def _effective(chart: str | None, made: Charts) -> str:
    intro = (
        "exp(entropy) of the cluster shares in each window: K when every cluster is drawn equally "
        "often, the dashed line for the corpus's natural mixture. Higher means more diverse training "
        "at that point."
    )
    figs = [_figure(made, chart)] if chart else []
    title = "Effective number of clusters over training"
    return _charts_section("effective-clusters", title, figs, "No plan with a mixture.", intro)


def _centroid_map(page: Page, made: Charts) -> str:
    cmap = page.centroid_map
    colour = ", coloured by their majority ground-truth group" if cmap is not None and cmap.by_group else ""
    intro = (
        f"Centroids projected on their first two principal components, area proportional to size{colour}. "
        "Nearby points are clusters of similar content; two principal components only show part of "
        "the geometry (see the variance shares on the axes)."
    )
    figs = [_figure(made, cmap.chart)] if cmap else []
    missing = "No centroids (centroids.npy) in this run directory."
    return _charts_section("centroid-map", "Map of the clusters", figs, missing, intro)


def _ground_truth(gt: GroundTruth | None) -> str:
    title = "Agreement with ground truth"
    if gt is None:
        return h.section(
            "ground-truth",
            title,
            h.note("The corpus has no ground-truth group (group column empty), so agreement is not measured."),
        )
    items = [
        ("NMI", f"{gt.nmi:.3f}"),
        ("purity", f"{gt.purity:.3f}"),
        ("groups", str(len(gt.groups))),
        ("documents with a group", f"{gt.labelled:,} ({gt.labelled_share:.0%})"),
    ]
    rows = [
        [
            g.name,
            g.docs,
            h.Cell(f"{g.share:.1%}", sort=g.docs, numeric=True),
            g.clusters_holding,
            g.clusters_leading,
            h.Cell(f"{g.share_in_led:.1%}", sort=g.share_in_led, numeric=True),
            h.Cell(f"#{g.top_cluster} ({g.top_share:.0%})", sort=g.top_share, numeric=True),
        ]
        for g in sorted(gt.groups, key=lambda g: -g.docs)
    ]
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
    table = h.table(cols, rows, "group-table", True, limit=GROUP_ROWS)
    more = h.more_rows("group-table", len(rows), GROUP_ROWS, "groups (largest first)")
    return h.section("ground-truth", title, h.cards(items) + more + f'<div class="scroll">{table}</div>', intro)


def _experiment(e: ExperimentSection, made: Charts) -> str:
    body = ""
    if e.rows:
        cols = [h.Column(c, numeric=num) for c, num in zip(e.columns, e.numeric, strict=True)]
        table = h.table(cols, [[h.plain(v) for v in row] for row in e.rows], "experiment-table", True)
        body += f'<div class="scroll">{table}</div>'
    body += "".join(_figure(made, chart) for chart in e.charts)
    if not body:
        body = h.note("experiment/results.json has no summary rows or curves this report can show.")
    intro = "Results of the training experiment recorded in <code>experiment/results.json</code>."
    return h.section("experiment", "Experiment", body, intro)
