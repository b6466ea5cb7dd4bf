"""The experiment's results file ``OUT/experiment/results.json``: which finished runs a restart may
reuse, the aggregates over seeds (mean, spread, paired differences to ``random``), the markdown table
and the plots written next to it."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.contract.experiment_results import ExperimentResults
from clusterclip.experiment.config import ExperimentConfig
from clusterclip.experiment.stats import MIN_PAIRS, format_interval, paired_interval
from clusterclip.settings import SettingsError
from clusterclip.store import atomic_write
from clusterclip.store.record import RecordError

log = logging.getLogger(__name__)

PRIMARY = "heldout_macro_cluster"
METRICS = ("heldout_macro_cluster", "heldout_macro_domain", "heldout_micro", "heldout_novel_micro",
           "heldout_worst10_cluster",
           "small_heldout", "small_train", "small_gap", "final_train_loss", "effective_clusters",
           "effective_domains", "small_share", "small_share_last_quarter")
PAIRED = ("heldout_macro_cluster", "heldout_macro_domain", "heldout_micro", "heldout_novel_micro",
          "heldout_worst10_cluster")
VERDICT_METRICS = ("heldout_macro_cluster", "heldout_macro_domain", "heldout_micro")
UNIGRAM_MARGIN = 0.5


# ------------------------------------------------------------------------------------ resuming


def reusable_results(path: Path, cfg: ExperimentConfig, force: bool) -> ExperimentResults | None:
    """The results file's finished runs if ``cfg`` may extend them (same :meth:`~ExperimentConfig.results_hash`).

    Finished runs of another configuration, or a file that is no results of this clusterclip, are an error, or
    with ``force`` set aside.
    """
    if not path.exists():
        return None
    try:
        previous = ExperimentResults.read(path)
    except RecordError:
        if not force:
            raise
        return discard(path, None, force, "are not results this clusterclip reads")
    if not previous.runs:
        return None
    if previous.config_hash != cfg.results_hash():
        return discard(path, previous, force, "were trained with a different configuration")
    return previous


def discard(path: Path, previous: ExperimentResults | None, force: bool, why: str) -> None:
    """Refuse to mix incomparable runs; with ``force`` keep the old file aside and start afresh."""
    n = len(previous.runs) if previous is not None else 0
    if not force:
        raise SettingsError("", f"{path}: its {n} finished runs {why}; pass {{force}} to set them aside (renamed "
                            "to results.discarded-<time>.json) and start again, or use another {out}",
                            ExperimentConfig)
    backup = path.with_name(f"results.discarded-{time.strftime('%Y%m%dT%H%M%S')}.json")
    os.replace(path, backup)
    log.warning("experiment: %d finished runs %s; moved to %s", n, why, backup)
    return None


# --------------------------------------------------------------------------------- aggregates


def _mean_std(values: Sequence[float]) -> dict[str, Any]:
    v = np.asarray(values, dtype=np.float64)
    return {"mean": round(float(v.mean()), 5), "std": round(float(v.std(ddof=1)) if v.size > 1 else 0.0, 5),
            "n": int(v.size), "values": [round(float(x), 5) for x in v]}


def _by_strategy(results: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    by: dict[str, list[dict[str, Any]]] = {}
    for r in results["runs"].values():
        by.setdefault(r["strategy"], []).append(r)
    return by


def pair_key(run: dict[str, Any]) -> tuple[Any, int]:
    """(split, seed) of a run: the unit that pairs a strategy with ``random``."""
    return run.get("split"), int(run["seed"])


def _strategy_stats(name: str, runs: list[dict[str, Any]], baseline: dict[tuple[Any, int], dict[str, Any]],
                    ) -> dict[str, Any]:
    entry: dict[str, Any] = {"runs": len(runs)}
    for m in METRICS:
        vals = [r[m] for r in runs if r.get(m) is not None]
        if vals:
            entry[m] = _mean_std(vals)
    paired = [(r, baseline[pair_key(r)]) for r in runs if pair_key(r) in baseline and name != "random"]
    for m in PAIRED:
        diffs = [a[m] - b[m] for a, b in paired if a.get(m) is not None and b.get(m) is not None]
        if diffs:
            entry[f"{m}_minus_random"] = {**_mean_std(diffs), **paired_interval(diffs)}
    per_domain: dict[str, list[float]] = {}
    for r in runs:
        for d, v in (r.get("heldout_per_domain") or {}).items():
            per_domain.setdefault(d, []).append(v)
    entry["heldout_per_domain"] = {d: _mean_std(v) for d, v in per_domain.items()}
    entry["domain_shares"] = runs[0]["domain_mixture"]["shares"] if runs[0].get("domain_mixture") else None
    return entry


def summarize_runs(results: dict[str, Any]) -> dict[str, Any]:
    """Mean, spread and paired differences to ``random`` (same split and seed) per strategy, with their
    95 % expanded bootstrap intervals and verdicts (``inconclusive`` with a ``note`` from fewer than
    ``MIN_PAIRS`` pairs), from the finished runs."""
    by = _by_strategy(results)
    baseline = {pair_key(r): r for r in by.get("random", [])}
    return {name: _strategy_stats(name, runs, baseline) for name, runs in by.items()}


def _flat_summary(stats: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """One row of scalars per strategy (the report's table)."""
    rows = {}
    for name, e in stats.items():
        row: dict[str, Any] = {"runs": e["runs"]}
        for m in METRICS:
            if m in e:
                row[m] = e[m]["mean"]
                if m.startswith("heldout"):
                    row[f"{m}_std"] = e[m]["std"]
        for m in VERDICT_METRICS:
            d = e.get(f"{m}_minus_random")
            if d:
                row.update({f"{m}_minus_random": d["mean"], f"{m}_minus_random_low": d["low"],
                            f"{m}_minus_random_high": d["high"], f"{m}_verdict": d["verdict"]})
                if d.get("note"):  # too few pairs for a verdict, whatever the interval
                    row[f"{m}_verdict_note"] = d["note"]
        rows[name] = row
    return rows


def _mean_curves(results: dict[str, Any]) -> dict[str, dict[str, list[float]]]:
    """Per strategy: the loss curves averaged over the seeds that finished."""
    out: dict[str, dict[str, list[float]]] = {}
    for name, runs in _by_strategy(results).items():
        curves = [r["curve"] for r in runs]
        n = min(len(c) for c in curves)
        entry: dict[str, list[float]] = {"step": [c["step"] for c in curves[0][:n]]}
        for key in (PRIMARY, "heldout_micro", "heldout_macro_domain", "train_loss"):
            rows = [[p.get(key) for p in c[:n]] for c in curves]
            if all(v is not None for row in rows for v in row[1:]):
                entry[key] = [None if any(row[i] is None for row in rows) else
                              round(float(np.mean([row[i] for row in rows])), 5) for i in range(n)]
        out[name] = entry
    return out


def _check_unigram_margin(results: dict[str, Any]) -> None:
    """Record how far the worst model is below the unigram floor; warn when it is barely below."""
    uni = results.get("unigram", {})
    if not results["runs"] or "micro" not in uni:
        return
    margin = min(uni["micro"] - r["heldout_micro"] for r in results["runs"].values())
    uni["smallest_margin_micro"] = round(margin, 4)
    if margin < UNIGRAM_MARGIN:
        log.warning("experiment: a model is only %.2f nats/token below the unigram baseline: undertrained, "
                    "differences between strategies mean little; raise passes or the corpus size", margin)


def write_results(results: dict[str, Any], exp_dir: Path, seconds: float) -> None:
    """Recompute the aggregates, then write results.json, results.md and the plots."""
    from clusterclip.experiment.plots import write_plots

    _check_unigram_margin(results)
    results["stats"] = summarize_runs(results)
    results["summary"] = _flat_summary(results["stats"])
    results["curves"] = _mean_curves(results)
    results["updated_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    results["seconds_this_session"] = round(seconds, 1)
    ExperimentResults.write(exp_dir / "results.json", results)
    with atomic_write(exp_dir / "results.md", "w") as fh:
        fh.write(markdown_table(results))
    try:
        results["plots"] = write_plots(results, exp_dir)
    except Exception as exc:  # plots must never lose the numbers
        log.warning("experiment: plots failed (%s)", exc)
    ExperimentResults.write(exp_dir / "results.json", results)


# ------------------------------------------------------------------------------------- the table


def _mean_pm(e: dict[str, Any], m: str) -> str:
    return f"{e[m]['mean']:.3f} ± {e[m]['std']:.3f}" if m in e else "–"


def _delta(e: dict[str, Any], m: str) -> str:
    return format_interval(e.get(f"{m}_minus_random"))


def _table_row(name: str, e: dict[str, Any]) -> str:
    small = f"{e['small_heldout']['mean']:.3f} / {e['small_train']['mean']:.3f}" if "small_heldout" in e else "–"
    eff_c = f"{e['effective_clusters']['mean']:.1f}" if "effective_clusters" in e else "–"
    eff_d = f"{e['effective_domains']['mean']:.2f}" if "effective_domains" in e else "–"
    return (f"| {name} | {e['runs']} | {_mean_pm(e, 'heldout_macro_cluster')} | "
            f"{_delta(e, 'heldout_macro_cluster')} | {_mean_pm(e, 'heldout_macro_domain')} | "
            f"{_delta(e, 'heldout_macro_domain')} | "
            f"{_mean_pm(e, 'heldout_micro')} | {_delta(e, 'heldout_micro')} | "
            f"{_mean_pm(e, 'heldout_worst10_cluster')} | {small} | {eff_c} | {eff_d} |")


def markdown_table(results: dict[str, Any]) -> str:
    """The results as a markdown table: mean ± std over (split, seed) runs, paired difference to random
    with its 95 % expanded bootstrap interval and verdict (none from fewer than ``MIN_PAIRS`` pairs)."""
    stats = results.get("stats", {})
    d = results.get("data", {})
    uni = results.get("unigram", {})
    progress = results.get("progress", {})
    rec = ExperimentResults.from_json(results, "experiment/results.json")
    sft = rec.setting("objective") == "sft"
    lines = [
        f"{'Held-out response loss (--objective sft: response tokens only)' if sft else 'Held-out loss'} "
        f"(nats/token), mean ± std over runs ({len(results.get('splits') or [0])} held-out split(s) x "
        f"{len(rec.setting('seeds', ()))} seed(s)); Δ: mean paired difference to random over (split, "
        f"seed) pairs [95 % expanded bootstrap interval] verdict (wins/pairs); a verdict needs at least {MIN_PAIRS} "
        "pairs. "
        f"First split: {d.get('train_documents')} training documents, "
        f"K={d.get('k')}, budget {d.get('budget_tokens', 0):,} tokens "
        f"({rec.setting('passes'):g} passes, {d.get('steps')} steps), "
        f"{results.get('model', {}).get('parameters', 0):,}-parameter model. "
        f"Unigram baseline: macro {uni.get('macro_cluster', float('nan')):.3f}, "
        f"micro {uni.get('micro', float('nan')):.3f}. Status: {results.get('status')} "
        f"({progress.get('finished_runs')}/{progress.get('total_runs')} runs).",
        "",
        "| strategy | runs | macro (clusters) | Δ macro clusters vs random | macro (domains) | "
        "Δ macro domains vs random | micro | Δ micro vs random | worst 10% clusters | "
        "small clusters held-out / train | eff. clusters | eff. domains |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    names = sorted(stats, key=lambda s: (s != "random", s))
    lines += [_table_row(name, stats[name]) for name in names]
    if d.get("heldout_near_train") and any("heldout_novel_micro" in stats[n] for n in names):
        lines += ["", f"{d['heldout_near_train']} of {d.get('heldout_documents')} held-out documents (first split) "
                  "have a near-copy in the training split (cosine >= 1 - eps of `clusterclip dedup`); a plan that "
                  "repeats that copy lowers their loss by memorising it. Micro loss on the other held-out documents:",
                  "",
                  "| strategy | micro, held-out without a near-copy in training | Δ vs random |", "|---|---|---|"]
        lines += [f"| {n} | {_mean_pm(stats[n], 'heldout_novel_micro')} | {_delta(stats[n], 'heldout_novel_micro')} |"
                  for n in names]
    return "\n".join(lines) + "\n"
