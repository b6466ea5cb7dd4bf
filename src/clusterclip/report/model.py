"""The report page as data: what each section shows and which charts it needs, computed from a run.

:func:`page_model` turns what :mod:`clusterclip.report.load` read (plus the corpus scan) into frozen
records, one per section (those of the clusters and ground-truth sections are in
:mod:`clusterclip.report.clusters`); :mod:`clusterclip.report.render` only formats them. Numbers here are
raw (shares as fractions, seconds as floats); every chart is a :class:`ChartSpec` drawn later into the
output folder.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.charts.online import experiment_online_charts
from clusterclip.contract.plan import PLAN_FIELDS
from clusterclip.contract.plan_notes import clip_note
from clusterclip.contract.stages import PIPELINE
from clusterclip.report import charts
from clusterclip.report.centroid_map import plot_centroid_map
from clusterclip.report.clusters import ClusterTable, GroundTruth, cluster_table, ground_truth, majority_groups
from clusterclip.report.continued import across_switch
from clusterclip.report.dedup import DedupSection, dedup_section
from clusterclip.report.experiment import experiment_curves, is_scalar, summary_rows
from clusterclip.report.keywords import CorpusScan
from clusterclip.report.load import PlanView, RunView
from clusterclip.report.metrics import effective_number, top_share
from clusterclip.report.online import OnlineSection, online_section
from clusterclip.report.scale import RepeatScale, charted, repeat_scale, shown_path
from clusterclip.report.strata import StrataPlan, plot_tiers, strata_plans

TOP_IN_MIXTURE = 8
MAX_EXPERIMENT_CHARTS = 6
SIZES_CHART = "sizes.png"
EFFECTIVE_CHART = "effective-clusters.png"
CENTROID_CHART = "centroid-map.png"
OWN_CHART = re.compile(r"^(sizes|effective-clusters|centroid-map|(mixture|repeats|experiment|online|tiers)-.+)\.png$")
"""Names of the PNGs the report writes; a rebuild removes those it no longer makes, and nothing else."""

PLAN_OPTIONS = (*PLAN_FIELDS, "weights")
"""The options shown for each plan: every plan setting (``PlanConfig``), in the command line's order."""
NOT_IN_PLAN_TABLE = ("name", "clusters_exhausted", "n_windows", "exhausted_clusters", "cap_binds", "bind_budget",
                     "bind_cap")


@dataclass(frozen=True)
class ChartSpec:
    """A chart to draw: its file name in the output folder and the function that draws it there."""

    file: str
    draw: Callable[[Path], charts.Chart]


@dataclass(frozen=True)
class Summary:
    """Corpus and clustering at a glance, details, and seconds per stage (None: not recorded)."""

    documents: int | None
    tokens: int | None
    k: int
    embedder: str | None
    objective: float | None
    n_plans: int
    details: tuple[tuple[str, object], ...]
    timing: tuple[tuple[str, float | None], ...]
    missing_stages: tuple[str, ...]


@dataclass(frozen=True)
class SizeSummary:
    """The cluster size distribution: concentration, extremes and the effective number of clusters."""

    k: int
    top1: tuple[int, float]
    top10: tuple[int, float]
    largest: int
    median: int
    smallest: int
    empty: int
    effective: float
    chart: str


@dataclass(frozen=True)
class PlanSection:
    """One plan: its options, then the statistics it recorded (JSON values), and its charts (None: not drawn)."""

    name: str
    facts: tuple[tuple[str, object], ...]
    mixture_chart: str | None
    repeats_chart: str | None
    clip: str | None = None
    """What the repetition cap did (documents clipped, clusters exhausted), or why it never bound."""


@dataclass(frozen=True)
class CentroidMap:
    """The centroid map chart and whether it is coloured by majority group."""

    chart: str
    by_group: bool


@dataclass(frozen=True)
class ExperimentSection:
    """An experiment's summary table (JSON values) and the charts of its curves."""

    columns: tuple[str, ...]
    numeric: tuple[bool, ...]
    rows: tuple[tuple[object, ...], ...]
    charts: tuple[str, ...]


@dataclass(frozen=True)
class Page:
    """The whole report: one field per section (None: the section explains what is missing)."""

    run_dir: Path
    summary: Summary
    sizes: SizeSummary | None
    clusters: ClusterTable | None
    plans: tuple[PlanSection, ...]
    effective_chart: str | None
    centroid_map: CentroidMap | None
    ground_truth: GroundTruth | None
    experiment: ExperimentSection | None
    notes: tuple[str, ...]
    charts: tuple[ChartSpec, ...]
    tune: dict[str, Any] | None = None
    dedup: DedupSection | None = None
    online: OnlineSection | None = None
    strata: tuple[StrataPlan, ...] = ()


def page_model(run: RunView, scan: CorpusScan | None) -> Page:
    """The report of ``run`` as data; ``scan`` is the corpus pass (None without corpus text or labels)."""
    majority = majority_groups(scan)
    shown = tuple(charted(p) for p in run.plans)
    scale = repeat_scale([p.repeat_hist for p in run.plans if p.repeat_hist is not None])
    plan_charts = [_plan_charts(p, run, shown, scale) for p in shown]
    effective = _effective_chart(shown, run)
    centroid_map = _centroid_map(run, majority)
    experiment, experiment_charts = _experiment(run.experiment)
    online = online_section(run)
    online_charts = [ChartSpec(file, draw) for file, draw in online.charts] if online else []
    strata = strata_plans(run.root, [(p.name, p.slug, p.stats) for p in run.plans])
    tier_charts = [ChartSpec(s.chart, partial(plot_tiers, s)) for s in strata if s.chart]
    wanted = [_size_chart(run), *chain.from_iterable(plan_charts), effective, centroid_map, *online_charts,
              *experiment_charts, *tier_charts]
    return Page(
        run_dir=run.root,
        summary=_summary(run),
        sizes=_size_summary(run),
        clusters=cluster_table(run, scan),
        plans=tuple(_plan_section(p, *c) for p, c in zip(run.plans, plan_charts, strict=True)),
        effective_chart=effective.file if effective else None,
        centroid_map=CentroidMap(centroid_map.file, majority is not None) if centroid_map else None,
        ground_truth=ground_truth(run, scan),
        experiment=experiment,
        notes=run.notes + (online.notes if online else ()),
        charts=tuple(c for c in wanted if c is not None),
        tune=run.tune,
        dedup=dedup_section(run.root),
        online=online,
        strata=strata,
    )


# ---------------------------------------------------------------------------------------------- summary


def _summary(run: RunView) -> Summary:
    tokens = run.corpus.tokens if run.corpus is not None else None
    if tokens is None and run.tokens is not None:
        tokens = int(np.asarray(run.tokens).sum())
    model = (run.embed.model or run.embed.embedder) if run.embed is not None else None
    objective = run.cluster.objective if run.cluster is not None else None
    timing = [(stage, rec.seconds) for stage, rec in run.records.items() if rec is not None]
    timing += [(f"plan {p.name}", p.record.seconds) for p in run.plans]
    missing = tuple(c.NAME for c in PIPELINE if c.NAME in run.records and run.records[c.NAME] is None)
    return Summary(
        documents=run.n_docs,
        tokens=int(tokens) if tokens is not None else None,
        k=run.k,
        embedder=model if isinstance(model, str) and model else None,
        objective=objective if isinstance(objective, (int, float)) else None,
        n_plans=len(run.plans),
        details=tuple(_details(run, tokens, model if isinstance(model, str) else None)),
        timing=tuple(timing),
        missing_stages=missing,
    )


def _details(run: RunView, tokens: Any, model: str | None) -> list[tuple[str, object]]:
    """Inputs, skipped records, embedder settings and k-means options, when recorded."""
    n = run.n_docs
    details: list[tuple[str, object]] = []
    if run.corpus is not None:
        shown = [shown_path(str(i)) for i in run.corpus.config.inputs]
        shown += [f"{shown_path(str(i))} (added)" for a in run.corpus.additions or () for i in a.get("inputs", ())]
        if shown:
            details.append(("inputs", ", ".join(shown)))
        details.append(("records skipped", run.corpus.skipped))
    if n and tokens:
        details.append(("mean tokens per document", float(tokens) / n))
    if run.embed is not None:
        details.append(("embedding dimension", run.embed.dim))
        option = ", ".join(f"{k}={v}" for k, v in run.embed.embedder_config.items())
        if option and option != model:
            details.append(("embedder settings", option if len(option) <= 240 else option[:240] + "…"))
    if run.cluster is not None:
        options = ("seed", "niter", "nredo", "init", "points_per_centroid")
        details += [(f"k-means {key}", value) for key in options
                    if (value := getattr(run.cluster.config, key)) is not None]
        details += [("k-means iterations", run.cluster.iterations),
                    ("k-means training sample", run.cluster.sample_size)]
    return details


def _size_summary(run: RunView) -> SizeSummary | None:
    if not run.k:
        return None
    s = np.asarray(run.sizes)
    return SizeSummary(
        k=len(s),
        top1=top_share(s, 0.01),
        top10=top_share(s, 0.10),
        largest=int(s.max()),
        median=int(np.median(s)),
        smallest=int(s.min()),
        empty=int((s == 0).sum()),
        effective=float(effective_number(s)),
        chart=SIZES_CHART,
    )


def _size_chart(run: RunView) -> ChartSpec | None:
    return ChartSpec(SIZES_CHART, partial(charts.plot_sizes, run.sizes)) if run.k else None


# ------------------------------------------------------------------------------------------------ plans


def _plan_section(plan: PlanView, mixture: ChartSpec | None, repeats: ChartSpec | None) -> PlanSection:
    facts: list[tuple[str, object]] = []
    for key in PLAN_OPTIONS:
        v = getattr(plan.config, key)
        v = plan.stats.get(key) if v is None else v
        facts.append((key, plan.window if key == "window" and v is None else v))
    exhausted = plan.stats.get("clusters_exhausted")
    if exhausted is None and plan.exhausted_at is not None:
        exhausted = int((np.asarray(plan.exhausted_at) >= 0).sum())
    facts += [("draws", plan.n_draws), ("clusters exhausted", exhausted)]
    shown = {key for key, _ in facts} | set(NOT_IN_PLAN_TABLE)
    facts += [(key, v) for key, v in plan.stats.items() if is_scalar(v) and key not in shown]
    return PlanSection(
        name=plan.name,
        facts=tuple(facts),
        mixture_chart=mixture.file if mixture else None,
        repeats_chart=repeats.file if repeats else None,
        clip=clip_note(plan.stats, plan.config.budget_unit),
    )


def _plan_charts(plan: PlanView, run: RunView, plans: tuple[PlanView, ...] | None = None,
                 scale: RepeatScale | None = None) -> tuple[ChartSpec | None, ChartSpec | None]:
    """The plan's mixture chart and repetition chart (None where it lacks the data); ``plans`` are all plans
    with their mixtures in the charts' windows (default: as recorded), ``scale`` the y axis all repetition charts
    share."""
    mixture = repeats = None
    if plan.mixture is not None and run.k:
        draw = partial(
            charts.plot_mixture,
            plan.mixture,
            run.sizes,
            plan.window,
            plan=plan.name,
            top=TOP_IN_MIXTURE,
            exhausted_at=plan.exhausted_at,
            switch=across_switch(plan, run.plans if plans is None else plans),
        )
        mixture = ChartSpec(f"mixture-{plan.slug}.png", draw)
    if plan.repeat_hist is not None:
        draw = partial(charts.plot_repeats, plan.repeat_hist, plan=plan.name, scale=scale)
        repeats = ChartSpec(f"repeats-{plan.slug}.png", draw)
    return mixture, repeats


def _effective_chart(plans: tuple[PlanView, ...], run: RunView) -> ChartSpec | None:
    """Each plan's effective clusters per window, a continuation's from its switch position in the training
    stream (the switch positions of its chain summed), not from 0."""
    with_mixture = {p.name: (p.mixture, p.window) for p in plans if p.mixture is not None}
    if not with_mixture or not run.k:
        return None
    starts = {p.name: sum(int(a.get("consumed", 0)) for a in p.record.chain()) for p in plans}
    return ChartSpec(EFFECTIVE_CHART, partial(charts.plot_effective_clusters, with_mixture, run.sizes,
                                              starts=starts))


def _centroid_map(run: RunView, majority: list[str | None] | None) -> ChartSpec | None:
    if run.centroids is None or not run.k or len(run.centroids) != run.k:
        return None
    return ChartSpec(CENTROID_CHART, partial(plot_centroid_map, run.centroids, run.sizes, groups=majority))


# ------------------------------------------------------------------------------------------- experiment


def _experiment(results: dict[str, Any] | None) -> tuple[ExperimentSection | None, list[ChartSpec]]:
    """The experiment section (None without ``results.json``) and the charts of its curves."""
    if results is None:
        return None, []
    if not isinstance(results, dict):
        return ExperimentSection((), (), (), ()), []
    cols, rows = summary_rows(results.get("summary"))
    numeric = tuple(all(isinstance(r[i], (int, float)) or r[i] is None for r in rows) for i in range(len(cols)))
    curves = list(experiment_curves(results).items())[:MAX_EXPERIMENT_CHARTS]
    specs = [
        ChartSpec(
            f"experiment-{i}.png",
            partial(charts.plot_curves, series, title=f"Experiment: {metric}", xlabel=xlabel, ylabel=metric),
        )
        for i, (metric, (xlabel, series)) in enumerate(curves)
    ]
    specs += [ChartSpec(file, draw) for file, draw in experiment_online_charts(results, prefix="experiment-online-")]
    section = ExperimentSection(tuple(cols), numeric, tuple(map(tuple, rows)), tuple(s.file for s in specs))
    return section, specs
