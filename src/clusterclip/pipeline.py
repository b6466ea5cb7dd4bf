"""The whole job in one call: corpus -> embeddings -> clusters -> plans -> summary.

Each stage is skipped when its record in the run directory is fresh, so calling :func:`run_pipeline`
again after a change of one option re-runs only that stage and the ones after it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from clusterclip.add import pending_note
from clusterclip.cluster import ClusterConfig, cluster_stage
from clusterclip.corpus import CorpusConfig, corpus_stage
from clusterclip.embed.config import EmbedConfig, embed_command
from clusterclip.embed.stage import embed_stage
from clusterclip.engines import EngineConfig
from clusterclip.errors import ClusterClipError
from clusterclip.plan import list_plans
from clusterclip.store import RunDir, load_npy, save_json
from clusterclip.store import layout as A
from clusterclip.store.lineage import check_record_files, orphan_plans

log = logging.getLogger(__name__)

DEFAULT_STRATEGIES = ("clusterclip", "uniform", "random")


DEFAULT_RUN_DIR = "clusterclip-run"
"""The run directory of ``clusterclip run`` and :func:`run_pipeline` when none is given."""


def embed_corpus(run: RunDir, inputs: Sequence[str | os.PathLike[str]], corpus: CorpusConfig,
                 embed: EmbedConfig, force: bool = False, progress: bool = True,
                 engine: str = "local") -> dict[str, Any]:
    """Corpus and embed stages (what ``clusterclip embed`` does), on ``engine`` (checked by the caller's
    :func:`engine_session`)."""
    command = embed_command(inputs, corpus, embed)
    corpus_stage(run, inputs, corpus, force=force, progress=progress, engine=engine, command=command)
    return embed_stage(run, embedder=embed.embedder, batch_size=embed.batch_size, shard_size=embed.shard_size,
                       force=force, progress=progress, device=embed.device, engine=engine, command=command,
                       **embed.extra)


def run_pipeline(  # noqa: PLR0913 -- one argument per settings section, as the CLI's option groups
    inputs: Sequence[str | os.PathLike[str]] = (),
    out: str | os.PathLike[str] = DEFAULT_RUN_DIR,
    corpus: CorpusConfig | None = None,
    embed: EmbedConfig | None = None,
    cluster: ClusterConfig | None = None,
    plans: Sequence[Any] | None = None,
    force: bool = False,
    progress: bool = True,
    engine: EngineConfig | None = None,
) -> dict[str, Any]:
    """Run every stage into ``out`` (the default corpus when ``inputs`` is empty); returns the summary.

    ``plans`` is a sequence of :class:`clusterclip.plan.PlanConfig`; by default ClusterClip plus the
    uniform and random baselines, each with a budget of one epoch. With ``engine.engine == "ray"``,
    embedding and assignment run on Ray Data (a local instance, or the cluster at ``engine.ray_address``).
    """
    from clusterclip.plan import PlanConfig, plan_stage

    corpus, embed, cluster = corpus or CorpusConfig(), embed or EmbedConfig(), cluster or ClusterConfig()
    engine = engine or EngineConfig()
    run = RunDir(out)
    plan_configs = list(plans) if plans is not None else [PlanConfig(strategy=s) for s in DEFAULT_STRATEGIES]
    with run.lock(), engine.session():
        check_record_files(run.root)
        run.clean_temp_files()
        embed_corpus(run, inputs, corpus, embed, force=force, progress=progress, engine=engine.engine)
        cluster_stage(run, cluster, force=force, progress=progress, engine=engine.engine)
        for cfg in plan_configs:
            plan_stage(run, cfg, force=force)
        summary = summarize(run)
        save_json(run.path(A.SUMMARY), summary)
    return summary


def engine_session(engine: str, ray_address: str | None = None) -> contextlib.AbstractContextManager[Any]:
    """A Ray session for ``engine="ray"`` (shared by every stage inside it); nothing for ``local``. The one
    place a command's engine is checked (an unknown name is a :class:`clusterclip.settings.SettingsError`)."""
    return EngineConfig(engine=engine, ray_address=ray_address).session()


def summarize(run: RunDir) -> dict[str, Any]:
    """Corpus, clustering and plan statistics of a run directory, as printed by ``clusterclip run`` and
    ``clusterclip status``; reads records and ``sizes.npy`` only.

    Never fails on a damaged run directory: a corrupt record, a missing or truncated artifact (the quick
    check: sizes and modification times, no bytes read) goes to ``problems`` (``{stage: [message]}``),
    a stale stage to ``stale`` (``{stage: reason}``, ending with the commands that rebuild it), and a plan
    built before ``clusterclip add`` grew the run to ``behind``; each message is one line.
    """
    out: dict[str, Any] = {"run_dir": str(run.root)}
    problems: dict[str, list[str]] = {}

    def record(stage: str) -> dict[str, Any] | None:
        try:
            return run.record(stage)
        except ClusterClipError as exc:
            problems.setdefault(stage, []).append(str(exc))
            return None

    with contextlib.suppress(KeyError, TypeError):
        if corpus := record(A.CORPUS_STAGE):
            out["corpus"] = {"documents": corpus["count"], "tokens": corpus["tokens"], "skipped": corpus["skipped"],
                             "inputs": corpus["config"]["inputs"], "seconds": corpus["seconds"]}
    with contextlib.suppress(KeyError, TypeError):
        if embed := record(A.EMBED_STAGE):
            out["embed"] = {"embedder": embed.get("embedder"), "model": embed.get("model"), "dim": embed.get("dim"),
                            "seconds": embed["seconds"]}
    try:
        for stage, found in run.quick_problems().items():
            problems.setdefault(stage, []).extend(found)
        out.update(_cluster_summary(run, record(A.CLUSTER_STAGE), problems))
        plans = {name: {"config": rec.get("config"), **rec.get("stats", {})}
                 for name in list_plans(run) if (rec := record(A.plan_stage_name(name)))}
        if plans:
            out["plans"] = plans
        out.update(_freshness(run, skip={stage for stage, found in problems.items() if found}))
    except ClusterClipError as exc:
        problems.setdefault("run directory", []).append(str(exc))
    for name, plan in out.get("plans", {}).items():
        plan["stale"] = A.plan_stage_name(name) in out.get("stale", {})
    out.update(_lineage(run, problems))
    problems = {stage: list(dict.fromkeys(found)) for stage, found in problems.items() if found}
    if problems:
        out["problems"] = problems
    return out


def _lineage(run: RunDir, problems: dict[str, list[str]]) -> dict[str, Any]:
    """``lineage`` (after an add: the commands that rebuild the corpus, in order, and what each add
    appended) and ``pending`` (an interrupted add) of the summary; plan folders without a record go to
    ``problems``."""
    out: dict[str, Any] = {}
    for name in orphan_plans(run.root):
        stage = A.plan_stage_name(name)
        problems.setdefault(stage, []).append(
            f"{run.path(A.plan_path(name))}: plan files without their record {A.PLAN_RECORD} (deleted?), so no "
            f"reader trusts them; rebuild: `{run.rebuild_command(stage, None, force=True)}`")
    if note := pending_note(run):
        out["pending"] = note
    with contextlib.suppress(ClusterClipError, KeyError, TypeError):
        corpus = run.record(A.CORPUS_STAGE) or {}
        if corpus.get("additions"):
            out["lineage"] = {
                "rebuild": replay_commands(run, corpus, run.record(A.CLUSTER_STAGE) or {}),
                "additions": [{"inputs": a["inputs"], "count": a["count"],
                               "duplicates_skipped": a.get("duplicates_skipped", 0)} for a in corpus["additions"]]}
    return out


def replay_commands(run: RunDir, corpus: dict[str, Any], cluster: dict[str, Any]) -> list[str]:
    """The commands that rebuild a run that grew, in order: the corpus and embed stages, the clustering the
    first add grew, then every add, each refit after the add it followed (``refits``, by document count)."""
    def render(argv: list[str], *extra: str) -> str:
        return " ".join([run.rebuild_command(A.CORPUS_STAGE, {"command": argv}), *extra])

    steps = [run.rebuild_command(A.CORPUS_STAGE, corpus)]
    if first := corpus["additions"][0].get("cluster_command"):
        steps.append(render(first))
    for add in corpus["additions"]:
        steps.append(render(add["command"]))
        count = int(add["first_index"]) + int(add["count"])
        steps += [render(cluster["command"], "--refit", "--force") for refit in cluster.get("refits", [])
                  if refit.get("documents") == count and "command" in cluster]
    return steps


def _freshness(run: RunDir, skip: set[str]) -> dict[str, Any]:
    """``stale`` and ``behind`` entries of the summary (only the non-empty ones) of the stages not in ``skip``
    (those with a problem already reported)."""
    stages = [stage for stage in run.stages() if stage not in skip]
    stale = {stage: why for stage in stages if (why := run.stale_reason(stage))}
    behind = {stage: note for stage in stages if stage not in stale and (note := run.behind_note(stage))}
    return {key: value for key, value in (("stale", stale), ("behind", behind)) if value}


def _cluster_summary(run: RunDir, cluster: dict[str, Any] | None, problems: dict[str, list[str]]) -> dict[str, Any]:
    """The ``cluster`` entry of the summary (size statistics from ``sizes.npy`` when it passes the quick check)."""
    if not cluster or problems.get(A.CLUSTER_STAGE):
        return {}
    try:
        sizes = load_npy(run.path(A.SIZES))
        return {"cluster": {
            "k": cluster["k"], "objective": round(cluster["objective"], 4), "sample_size": cluster["sample_size"],
            "size_min": int(sizes.min()), "size_median": float(np.median(sizes)), "size_max": int(sizes.max()),
            "largest_10pct_share": round(float(np.sort(sizes)[::-1][: max(1, len(sizes) // 10)].sum()
                                               / sizes.sum()), 4),
            "seconds": cluster["seconds"],
        }}
    except (ClusterClipError, OSError, KeyError, TypeError, ValueError) as exc:
        problems.setdefault(A.CLUSTER_STAGE, []).append(f"{run.root / A.SIZES}: cannot summarise the clusters "
                                                       f"({exc}); {run.rebuild_command(A.CLUSTER_STAGE, force=True)}")
        return {}


def format_summary(summary: dict[str, Any]) -> str:
    """Human-readable summary for the terminal; stale stages and problems last, one line each."""
    lines = [f"run directory: {summary['run_dir']}"]
    if c := summary.get("corpus"):
        lines.append(f"corpus:   {c['documents']:,} documents, {c['tokens']:,} tokens"
                     + (f", {c['skipped']} bad records skipped" if c["skipped"] else ""))
    if e := summary.get("embed"):
        model = f"{e['model']}, " if e["model"] != e["embedder"] else ""
        lines.append(f"embed:    {e['embedder']} ({model}dim {e['dim']}), {e['seconds']:.1f}s")
    if k := summary.get("cluster"):
        lines.append(f"cluster:  k={k['k']}, sizes min {k['size_min']} / median {k['size_median']:g} / "
                     f"max {k['size_max']}, largest 10% of clusters hold {k['largest_10pct_share']:.0%} "
                     f"of documents, mean cosine {k['objective']:.3f}")
    for name, p in summary.get("plans", {}).items():
        keys = {"length": "draws", "tokens": "tokens", "unique_docs": "unique docs", "coverage": "coverage",
                "max_repeat_observed": "max repeat", "clusters_exhausted": "clusters exhausted"}
        stats = ", ".join(f"{label} {_fmt(p[key])}" for key, label in keys.items() if key in p)
        lines.append(f"plan:     {name}: {stats}" + (" (STALE)" if p.get("stale") else ""))
    for add in summary.get("lineage", {}).get("additions", []):
        lines.append(f"added:    {add['count']:,} documents from {' '.join(add['inputs'])}"
                     + (f" ({add['duplicates_skipped']:,} duplicates skipped)" if add["duplicates_skipped"] else ""))
    if steps := summary.get("lineage", {}).get("rebuild"):
        lines.append("rebuild:  " + ", then ".join(f"`{c}`" for c in steps))
    if summary.get("pending"):
        lines.append(f"pending:  {summary['pending']}")
    lines += [f"stale:    {why}" for why in summary.get("stale", {}).values()]
    lines += [f"note:     {note}" for note in summary.get("behind", {}).values()]
    lines += [f"problem:  {problem}" for found in summary.get("problems", {}).values() for problem in found]
    return "\n".join(lines)


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

