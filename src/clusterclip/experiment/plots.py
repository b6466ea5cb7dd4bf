"""PNG plots of an experiment's results: loss curves, per-domain held-out loss, domain mixtures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.contract.experiment_results import ExperimentResults
from clusterclip.store import atomic_path


def _save(fig: Any, path: Path) -> str:
    import matplotlib.pyplot as plt

    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path.name


def write_plots(results: dict[str, Any], out_dir: Path) -> list[str]:
    """Write ``loss-curves.png``, ``differences.png``, ``per-domain.png``, ``domain-mixture.png`` and, per online
    strategy, ``online-<strategy>.png``; returns file names."""
    import matplotlib

    matplotlib.use("Agg")
    stats = results.get("stats", {})
    strategies = _ordered(stats)
    domains = sorted({d for e in stats.values() for d in (e.get("heldout_per_domain") or {})})
    shares = {n: stats[n]["domain_shares"] for n in strategies if stats[n].get("domain_shares")}
    written = []
    if results.get("curves"):
        written.append(_save(_loss_curves(results), out_dir / "loss-curves.png"))
    if any(f"{m}_minus_random" in e for e in stats.values() for m in DIFFERENCES):
        written.append(_save(_differences(stats, strategies), out_dir / "differences.png"))
    if domains and stats:
        written.append(_save(_per_domain(results, strategies, domains), out_dir / "per-domain.png"))
        if shares:
            written.append(_save(_domain_mixture(shares, domains), out_dir / "domain-mixture.png"))
    return written + _online_weights(results, out_dir)


def _online_weights(results: dict[str, Any], out_dir: Path) -> list[str]:
    """``online-<strategy>.png``: the cluster weights over the run of each online strategy's first proxy run
    (the report's chart, aggregated for large K)."""
    from clusterclip.charts.online import experiment_online_charts

    return [draw(out_dir / file).path.name for file, draw in experiment_online_charts(results, prefix="online-")]


DIFFERENCES = {"heldout_macro_cluster": "macro over clusters", "heldout_macro_domain": "macro over domains",
               "heldout_micro": "micro"}
VERDICT_COLOURS = {"better": "tab:green", "worse": "tab:red", "inconclusive": "tab:grey"}


def _differences(stats: dict[str, Any], strategies: list[str]) -> Any:
    """Per metric: each strategy's mean paired difference to random with its 95 % bootstrap interval,
    coloured by verdict (green better, red worse, grey inconclusive)."""
    import matplotlib.pyplot as plt

    names = [n for n in strategies if n != "random"]
    metrics = [m for m in DIFFERENCES if any(f"{m}_minus_random" in stats[n] for n in names)]
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 0.45 * len(names) + 1.8), sharey=True,
                             squeeze=False)
    y = np.arange(len(names))
    for ax, m in zip(axes[0], metrics, strict=True):
        for i, n in enumerate(names):
            d = stats[n].get(f"{m}_minus_random")
            if d:
                ax.errorbar(d["mean"], i, xerr=[[d["mean"] - d["low"]], [d["high"] - d["mean"]]], fmt="o",
                            capsize=3, color=VERDICT_COLOURS[d["verdict"]])
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set(title=f"{DIFFERENCES[m]} - random", xlabel="nats/token (lower: better)")
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks(y, names)
    fig.suptitle("paired difference to random over (split, seed) pairs, 95 % bootstrap interval", fontsize=9,
                 y=1.04)
    return fig


def _ordered(names: Any) -> list[str]:
    """Strategy names, ``random`` first."""
    return sorted(names, key=lambda s: (s != "random", s))


def _loss_curves(results: dict[str, Any]) -> Any:
    """Held-out macro loss on the fixed curve documents, and training loss, against steps."""
    import matplotlib.pyplot as plt

    curves = results["curves"]
    names = _ordered(curves)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name in names:
        c = curves[name]
        if c.get("heldout_macro_cluster"):
            axes[0].plot(c["step"], c["heldout_macro_cluster"], marker=".", label=name)
        if c.get("train_loss"):
            axes[1].plot(c["step"][1:], c["train_loss"][1:], marker=".", label=name)
    uni = results.get("unigram", {}).get("macro_cluster")
    if uni is not None:
        axes[0].axhline(uni, color="grey", linestyle=":", label="unigram")
    n_curve = ExperimentResults.from_json(results, "experiment/results.json").setting("curve_docs")
    axes[0].set(title=f"held-out loss, macro over clusters ({n_curve} fixed documents)", xlabel="step",
                ylabel="nats/token")
    axes[1].set(title="training loss (plan order)", xlabel="step", ylabel="nats/token")
    for ax in axes:
        ax.grid(alpha=0.3)
    lo = min((min(v for v in curves[n]["heldout_macro_cluster"][1:] if v is not None)
              for n in names if len(curves[n].get("heldout_macro_cluster", [])) > 1), default=None)
    if lo is not None and uni is not None:
        axes[0].set_ylim(lo - 0.1, uni + 0.5)
    axes[0].legend(fontsize=8)
    return fig


def _per_domain(results: dict[str, Any], strategies: list[str], domains: list[str]) -> Any:
    """Bars of the held-out loss per domain and strategy, mean ± std over seeds."""
    import matplotlib.pyplot as plt

    stats = results["stats"]
    width = 0.8 / len(strategies)
    x = np.arange(len(domains))
    fig, ax = plt.subplots(figsize=(max(7, 1.3 * len(domains)), 4))
    for i, name in enumerate(strategies):
        pd = stats[name].get("heldout_per_domain") or {}
        means = [pd[d]["mean"] if d in pd else np.nan for d in domains]
        stds = [pd[d]["std"] if d in pd else 0.0 for d in domains]
        ax.bar(x + i * width - 0.4 + width / 2, means, width, yerr=stds, label=name, capsize=2)
    uni = results.get("unigram", {}).get("per_domain", {})
    vals = [stats[n]["heldout_per_domain"][d]["mean"] for n in strategies for d in domains
            if d in (stats[n].get("heldout_per_domain") or {})]
    if vals:
        ax.set_ylim(min(vals) - 0.3, max(vals) + 0.3)
    ax.set_xticks(x, domains, rotation=20, ha="right")
    title = "held-out loss per domain (mean ± std over seeds)"
    if uni:
        title += f"; unigram {min(uni.values()):.2f}-{max(uni.values()):.2f}"
    ax.set(title=title, ylabel="nats/token")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(axis="y", alpha=0.3)
    return fig


def _domain_mixture(shares: dict[str, dict[str, float]], domains: list[str]) -> Any:
    """Stacked bars of each strategy's training tokens per domain (its seed-0 plan)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.5 * len(shares) + 1.5))
    left = np.zeros(len(shares))
    for d in domains:
        vals = np.array([shares[n].get(d, 0.0) for n in shares])
        ax.barh(list(shares), vals, left=left, label=d)
        left += vals
    ax.set(title="training tokens per domain (seed 0 plan)", xlabel="share")
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    return fig
