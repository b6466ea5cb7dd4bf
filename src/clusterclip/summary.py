"""The run summary: what ``clusterclip run`` prints and ``clusterclip status`` shows, from the records of every
stage of the table (:mod:`clusterclip.contract.stages`), never failing on a damaged run directory."""

from __future__ import annotations

import contextlib
from typing import Any, TypeVar

import numpy as np

from clusterclip.add.drift import duplicates_note
from clusterclip.add.lineage import pending_note
from clusterclip.contract.cluster import CLUSTER_STAGE, SIZES, ClusterRecord
from clusterclip.contract.corpus import CORPUS_STAGE, CorpusRecord
from clusterclip.contract.dedup import DEDUP_STAGE, DedupRecord
from clusterclip.contract.embed import EmbedRecord
from clusterclip.contract.plan import PLAN_RECORD, PlanRecord, list_plans, orphan_plans, plan_path, plan_stage_name
from clusterclip.contract.plan_notes import clip_note, strata_note, tokens_note
from clusterclip.contract.stages import finished_stages
from clusterclip.errors import ClusterClipError
from clusterclip.store import RunDir, load_npy
from clusterclip.store import layout as A
from clusterclip.store.lock import held_elsewhere
from clusterclip.store.record import StageRecord

R = TypeVar("R", bound=StageRecord)


def summarize(run: RunDir) -> dict[str, Any]:
    """Corpus, clustering, duplicate-group and plan statistics of a run directory, as printed by ``clusterclip
    run`` and ``clusterclip status``; reads records and ``sizes.npy`` only.

    Never fails on a damaged run directory: a corrupt record, a missing or truncated artifact (the quick
    check: sizes and modification times, no bytes read) goes to ``problems`` (``{stage: [message]}``),
    a stale stage to ``stale`` (``{stage: reason}``, ending with the commands that rebuild it), and a plan
    built before ``clusterclip add`` grew the run to ``behind``; each message is one line.
    """
    out: dict[str, Any] = {"run_dir": str(run.root)}
    problems: dict[str, list[str]] = {}

    def read(cls: type[R], stage: str | None = None) -> R | None:
        try:
            return cls.read(run, stage)
        except ClusterClipError as exc:
            problems.setdefault(stage or cls.NAME, []).append(str(exc))
            return None

    if corpus := read(CorpusRecord):
        out["corpus"] = {"documents": corpus.count, "tokens": corpus.tokens, "skipped": corpus.skipped,
                         "inputs": corpus.config.inputs, "seconds": corpus.seconds,
                         **({"fields": corpus.fields} if corpus.fields else {}),
                         **({"kinds": corpus.kinds} if corpus.kinds else {})}
    if embed := read(EmbedRecord):
        out["embed"] = {"embedder": embed.embedder, "model": embed.model, "dim": embed.dim, "seconds": embed.seconds,
                        **({"confidence": embed.confidence} if embed.confidence else {})}
    try:
        stages = finished_stages(run)
        for stage, found in run.quick_problems(stages).items():
            problems.setdefault(stage, []).extend(found)
        out.update(_cluster_summary(run, read(ClusterRecord), problems))
        if (dedup := read(DedupRecord)) and not problems.get(DEDUP_STAGE):
            out["dedup"] = {"documents": dedup.documents, "groups": dedup.groups, "removed": dedup.removed,
                            "largest_group": dedup.largest_group, "seconds": dedup.seconds}
        plans = {name: {"config": rec.config.to_json(), **rec.stats}
                 for name in list_plans(run) if (rec := read(PlanRecord, plan_stage_name(name)))}
        if plans:
            out["plans"] = plans
        out.update(_freshness(run, [s for s in stages if not problems.get(s)]))
    except ClusterClipError as exc:
        problems.setdefault("run directory", []).append(str(exc))
    for name, plan in out.get("plans", {}).items():
        plan["stale"] = plan_stage_name(name) in out.get("stale", {})
    out.update(_lineage(run, corpus, problems))
    problems = {stage: list(dict.fromkeys(found)) for stage, found in problems.items() if found}
    if problems:
        out["problems"] = problems
    return out


def _lineage(run: RunDir, corpus: CorpusRecord | None, problems: dict[str, list[str]]) -> dict[str, Any]:
    """``lineage`` (after an add: the commands that rebuild the corpus, in order, and what each add
    appended) and ``pending`` (an interrupted add) of the summary; plan folders without a record go to
    ``problems``."""
    out: dict[str, Any] = {}
    for name in orphan_plans(run.root):
        stage = plan_stage_name(name)
        problems.setdefault(stage, []).append(
            f"{run.path(plan_path(name))}: plan files without their record {PLAN_RECORD} (deleted?), so no "
            f"reader trusts them; rebuild: `{run.rebuild_command(stage, None, force=True)}`")
    if note := pending_note(run):
        out["pending"] = note
    if held_elsewhere(run.root):
        out["busy"] = (f"another clusterclip process is writing this run directory now (lock held on {A.LOCK}): "
                       "what follows may be half written; run status again when it has finished")
    if corpus is not None and corpus.additions:
        with contextlib.suppress(ClusterClipError, KeyError, TypeError):
            cluster = ClusterRecord.read(run)
            out["lineage"] = {
                "rebuild": replay_commands(run, corpus, cluster),
                "additions": [{"inputs": a["inputs"], "count": a["count"],
                               "duplicates_skipped": a.get("duplicates_skipped", 0),
                               "duplicates_within": a.get("duplicates_within", 0)} for a in corpus.additions]}
    return out


def replay_commands(run: RunDir, corpus: CorpusRecord, cluster: ClusterRecord | None) -> list[str]:
    """The commands that rebuild a run that grew, in order: the corpus and embed stages, the clustering the
    first add grew, then every add, each refit after the add it followed (``refits``, by document count)."""
    def render(argv: list[str], *extra: str) -> str:
        return " ".join([run.rebuild_command(CORPUS_STAGE, {"command": argv}), *extra])

    additions = corpus.additions or []
    steps = [run.rebuild_command(CORPUS_STAGE, corpus.to_json())]
    if first := additions[0].get("cluster_command"):
        steps.append(render(first))
    for add in additions:
        steps.append(render(add["command"]))
        count = int(add["first_index"]) + int(add["count"])
        if cluster is not None and cluster.command:
            steps += [render(cluster.command, "--refit", "--force") for refit in cluster.refits or []
                      if refit.get("documents") == count]
    return steps


def _freshness(run: RunDir, stages: list[str]) -> dict[str, Any]:
    """``stale`` and ``behind`` entries of the summary (only the non-empty ones) of ``stages``."""
    stale = {stage: why for stage in stages if (why := run.stale_reason(stage))}
    behind = {stage: note for stage in stages if stage not in stale and (note := run.behind_note(stage))}
    return {key: value for key, value in (("stale", stale), ("behind", behind)) if value}


def _cluster_summary(run: RunDir, cluster: ClusterRecord | None, problems: dict[str, list[str]]) -> dict[str, Any]:
    """The ``cluster`` entry of the summary (size statistics from ``sizes.npy`` when it passes the quick check)."""
    if cluster is None or problems.get(CLUSTER_STAGE):
        return {}
    try:
        sizes = load_npy(run.path(SIZES))
        return {"cluster": {
            "k": cluster.k, "objective": round(cluster.objective, 4), "sample_size": cluster.sample_size,
            "size_min": int(sizes.min()), "size_median": float(np.median(sizes)), "size_max": int(sizes.max()),
            "largest_10pct_share": round(float(np.sort(sizes)[::-1][: max(1, len(sizes) // 10)].sum()
                                               / sizes.sum()), 4),
            "seconds": cluster.seconds,
        }}
    except (ClusterClipError, OSError, ValueError) as exc:
        problems.setdefault(CLUSTER_STAGE, []).append(f"{run.root / SIZES}: cannot summarise the clusters "
                                                       f"({exc}); {run.rebuild_command(CLUSTER_STAGE, force=True)}")
        return {}


def format_summary(summary: dict[str, Any]) -> str:
    """Human-readable summary for the terminal; stale stages and problems last, one line each."""
    lines = [f"run directory: {summary['run_dir']}"]
    if c := summary.get("corpus"):
        lines.append(f"corpus:   {c['documents']:,} documents, {c['tokens']:,} tokens"
                     + (f", {c['skipped']} bad records skipped" if c["skipped"] else "")
                     + (" (records: " + ", ".join(f"{k} {n:,}" for k, n in c["kinds"].items()) + ")"
                        if c.get("kinds") else ""))
        if c.get("fields"):
            lines.append("fields:   " + ", ".join(_field_text(n, f) for n, f in c["fields"].items()))
    if e := summary.get("embed"):
        model = f"{e['model']}, " if e["model"] != e["embedder"] else ""
        lines.append(f"embed:    {e['embedder']} ({model}dim {e['dim']}), {e['seconds']:.1f}s")
        if c := e.get("confidence"):
            lines.append(f"          it represented a median {c['coverage_median']:.0%} of each document's text; "
                         f"{c['below_half']:.1%} of the documents less than half (docs/embedders.md)")
    if k := summary.get("cluster"):
        lines.append(f"cluster:  k={k['k']}, sizes min {k['size_min']} / median {k['size_median']:g} / "
                     f"max {k['size_max']}, largest 10% of clusters hold {k['largest_10pct_share']:.0%} "
                     f"of documents, mean cosine {k['objective']:.3f}")
    if d := summary.get("dedup"):
        lines.append(f"dedup:    {d['groups']:,} near-duplicate groups over {d['documents']:,} documents, "
                     f"{d['removed']:,} not kept, largest group {d['largest_group']:,}")
    lines += _plan_lines(summary.get("plans", {}))
    for add in summary.get("lineage", {}).get("additions", []):
        lines.append(f"added:    {add['count']:,} documents from {' '.join(add['inputs'])}"
                     + (f" (duplicates skipped: {duplicates_note(add['duplicates_skipped'], add['duplicates_within'])})"
                        if add["duplicates_skipped"] else ""))
    if steps := summary.get("lineage", {}).get("rebuild"):
        lines.append("replay:   the run grew by `clusterclip add`; to rebuild it from its inputs (not needed to use "
                     "it): " + ", then ".join(f"`{c}`" for c in steps))
    if summary.get("busy"):
        lines.append(f"busy:     {summary['busy']}")
    if summary.get("pending"):
        lines.append(f"pending:  {summary['pending']}")
    lines += [f"stale:    {why}" for why in summary.get("stale", {}).values()]
    lines += [f"note:     {note}" for note in summary.get("behind", {}).values()]
    lines += [f"problem:  {problem}" for found in summary.get("problems", {}).values() for problem in found]
    return "\n".join(lines)


def _field_text(name: str, info: dict[str, Any]) -> str:
    missing = f", {info['missing']:,} missing" if info.get("missing") else ""
    if info.get("kind") == "numeric":
        span = f" {info['min']:.3g}..{info['max']:.3g}" if info.get("min") is not None else ""
        return f"{name} (numeric{span}{missing})"
    return f"{name} (categorical, {info.get('values', 0):,} values{missing})"


def _plan_lines(plans: dict[str, dict[str, Any]]) -> list[str]:
    """A line per plan (draws next to tokens), its notes, and one when the plans differ in tokens."""
    keys = {"length": "draws", "tokens": "tokens", "unique_docs": "unique docs", "coverage": "coverage",
            "max_repeat_observed": "max repeat", "clusters_exhausted": "clusters exhausted"}
    lines = []
    for name, p in plans.items():
        stats = ", ".join(f"{label} {_fmt(p[key])}" for key, label in keys.items() if key in p)
        lines.append(f"plan:     {name}: {stats}" + (" (STALE)" if p.get("stale") else ""))
        notes = (clip_note(p, str(p.get("budget_unit", "docs"))), strata_note(p))  # the stats' unit is the settings'

        lines += [f"          {note}" for note in notes if note]
    if note := tokens_note(plans):
        lines.append(f"note:     {note}")
    return lines


def format_audit(audit: dict[str, list[str]]) -> str:
    """What ``clusterclip status --verify`` prints: one line per intact stage, one per problem."""
    lines = [f"verify:   {stage}: {'ok' if not problems else f'{len(problems)} problem(s)'}"
             for stage, problems in audit.items()]
    lines += [f"  {problem}" for problems in audit.values() for problem in problems]
    return "\n".join(lines or ["verify:   no finished stages"])


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)

