"""The experiment as its steps: prepare the data, fix what every run shares, then per (strategy, seed)
plan, train and evaluate; the results file is rewritten after every run.

Layout (``OUT`` is the run directory of the *training split*, a normal clusterclip run directory)::

    OUT/corpus.json, embeddings/, labels.npy, ...   pipeline stages on the training split
    OUT/experiment/source/            corpus stage on the full input (any supported format)
    OUT/experiment/data/train.jsonl   training split (id, text, domain), cut to max_words
    OUT/experiment/data/heldout.jsonl held-out split
    OUT/experiment/tokenizer.json     byte-level BPE trained on the training split
    OUT/experiment/results.json       every number, rewritten atomically after each training run
    OUT/experiment/results.md         the markdown table
    OUT/experiment/*.png              loss curves, per-domain bars, mixtures

With several split seeds, the splits after the first live in ``OUT/experiment/splits/<seed>/`` (each a run
directory with its own ``experiment/data`` and tokenizer). Runs are keyed ``<strategy>/<seed>`` on the
first split and ``<strategy>/<seed>/split-<split>`` on the others; a restart with the same configuration
skips finished runs.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from clusterclip.experiment.config import ExperimentConfig, ModelConfig, TrainConfig
from clusterclip.experiment.data import Packed, TokenizedDocs, pack, select_docs
from clusterclip.experiment.evaluate import (
    Evaluator,
    mixture,
    repeats,
    small_shares,
    smallest_clusters,
    summarize_losses,
    unigram_doc_losses,
)
from clusterclip.experiment.model import GPT
from clusterclip.experiment.prepare import Prepared, Tokenized, prepare_data, tokenize
from clusterclip.experiment.results import PRIMARY, RESULTS_VERSION, discard, reusable_results, write_results
from clusterclip.experiment.train import train_model
from clusterclip.plan import PlanConfig, build_plan
from clusterclip.settings import SettingsError
from clusterclip.store import RunDir, config_hash

log = logging.getLogger(__name__)

SHUFFLE_SALT = 0x5EED

OnRun = Callable[[str, dict[str, Any], int, int], None]
"""Called after every finished run with its key, its record in ``results["runs"]``, runs finished, runs asked for."""


@dataclass(frozen=True)
class Setup:
    """What every run shares: budget and steps, model and recipe, the evaluators and the unigram floor."""

    model: ModelConfig
    train: TrainConfig
    budget: int
    steps: int
    heldout: Evaluator
    curve: Evaluator
    small_clusters: np.ndarray
    small_heldout: np.ndarray
    small_train: Evaluator
    unigram: dict[str, Any]


@dataclass(frozen=True)
class PlannedRun:
    """One (strategy, seed): its plan and the packed training sequences; ``used`` is the part trained on."""

    name: str
    seed: int
    plan_config: PlanConfig
    plan_stats: dict[str, Any]
    used: np.ndarray
    packed: Packed


@dataclass(frozen=True)
class TrainedRun:
    """The trained model and its loss curve."""

    model: GPT
    curve: list[dict[str, Any]]


@dataclass(frozen=True)
class RunMetrics:
    """Held-out losses (:func:`summarize_losses`), the smallest clusters' losses, and the plan's mixture."""

    heldout: dict[str, Any]
    small_heldout: float
    small_train: float
    cluster_mixture: dict[str, Any]
    domain_mixture: dict[str, Any] | None
    repeats: dict[str, Any]
    small_shares: dict[str, float]


# ------------------------------------------------------------------------------------- the run


def run_experiment(
    inputs: Sequence[str | os.PathLike[str]] = (),
    out: str | os.PathLike[str] = "clusterclip-experiment",
    config: ExperimentConfig | None = None,
    force: bool = False,
    progress: bool = False,
    on_run: OnRun | None = None,
) -> dict[str, Any]:
    """Train one model per (split, strategy, seed) on the same data, budget and recipe; only the plan differs.

    Every split seed of ``config.splits()`` draws its own subset, held-out split and clustering; the
    first is trained in ``OUT`` itself, the others in ``OUT/experiment/splits/<seed>/``. Writes
    ``OUT/experiment/results.json`` after every run (atomically) together with the markdown table and
    plots, and skips runs already recorded there for the same configuration, so a killed experiment
    resumes where it stopped. ``force`` discards results of a different configuration; ``progress``
    shows the pipeline stages' progress bars; ``on_run`` is called after every finished run (the
    command line prints a line). Returns the results dictionary.
    """
    cfg = config or ExperimentConfig()
    use_torch(cfg)
    exp_dir = Path(out) / "experiment"
    t_start = time.perf_counter()
    with RunDir(exp_dir).lock():
        previous = reusable_results(exp_dir / "results.json", cfg, force)
        splits: list[SplitData] = []
        for split in cfg.splits():
            data, previous = prepare_split(inputs, out, cfg, split, progress, previous, force)
            splits.append(data)
        results = _results_header(cfg, inputs, splits, previous)
        runs = _runs(cfg)
        wanted = [key for key, _, _, _ in runs]
        by_split = {d.split: d for d in splits}
        for key, split, seed, spec in runs:
            if key in results["runs"]:
                continue
            t0 = time.perf_counter()
            d = by_split[split]
            log.info("experiment: %s seed %d split %d: %d steps (%d/%d)", spec["name"], seed, split, d.setup.steps,
                     _finished(results, wanted) + 1, len(wanted))
            results["runs"][key] = proxy_run(d, spec, seed, cfg.device, time.perf_counter() - t0)
            _write(results, wanted, exp_dir, t_start)
            if on_run is not None:
                on_run(key, results["runs"][key], _finished(results, wanted), len(wanted))
        results["status"] = "complete"
        _write(results, wanted, exp_dir, t_start)
    return results


@dataclass(frozen=True)
class SplitData:
    """One held-out split ready to train on: its configuration, data, tokens, shared setup and data hash."""

    split: int
    cfg: ExperimentConfig
    prep: Prepared
    tok: Tokenized
    setup: Setup
    data_hash: str


def split_root(out: str | os.PathLike[str], split: int, primary: int) -> Path:
    """Run directory of a split's training documents: ``OUT`` for the first split, else a folder under it."""
    return Path(out) if split == primary else Path(out) / "experiment" / "splits" / str(split)


def prepare_split(inputs: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], cfg: ExperimentConfig,
                  split: int, progress: bool = False, previous: dict[str, Any] | None = None,
                  force: bool = False, root: Path | None = None) -> tuple[SplitData, dict[str, Any] | None]:
    """Prepare, tokenize and set up one split (the corpus stage of the input, ``OUT/experiment/source``,
    is shared by all splits); ``root`` overrides the split's run directory (:func:`split_root`).

    ``previous`` (finished results) is returned unchanged when its runs of this split were trained on the
    same data, else set aside (``force``) or refused; its tokenizer is reused so token ids stay valid.
    """
    primary = cfg.splits()[0]
    scfg = dataclasses.replace(cfg, split_seed=split, split_seeds=())
    root = root or split_root(out, split, primary)
    info = _previous_split(previous, split, primary)
    prep = prepare_data(inputs, root, scfg, progress, info.get("split_hash"), force,
                        source_dir=Path(out) / "experiment" / "source")
    data_hash = config_hash({"cfg": scfg.results_hash(), "train": prep.run.output_hash("corpus")})
    tok_path = root / "experiment" / "tokenizer.json"
    if info:
        previous = _same_data(previous, info, Path(out) / "experiment" / "results.json", tok_path, prep.split_hash,
                              data_hash, force)
    tok = tokenize(prep, scfg, tok_path, reuse=bool(info) and previous is not None)
    return SplitData(split, scfg, prep, tok, set_up(prep, tok, scfg), data_hash), previous


def proxy_run(d: SplitData, spec: dict[str, Any], seed: int, device: str = "cpu",
              seconds_before: float = 0.0) -> dict[str, Any]:
    """Plan, train and evaluate one (strategy, seed) on a prepared split; its record for ``results["runs"]``."""
    t0 = time.perf_counter()
    planned = plan_run(spec, seed, d.prep, d.tok, d.setup)
    trained = train_run(planned, d.setup, device)
    metrics = evaluate_run(planned, trained, d.prep, d.tok, d.setup)
    return {**run_record(planned, trained, metrics, seconds_before + time.perf_counter() - t0), "split": d.split}


def use_torch(cfg: ExperimentConfig) -> None:
    """Check the device and set torch's CPU threads."""
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise SettingsError("device", f"{cfg.device!r} requested but torch sees no CUDA device", ExperimentConfig)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)


def _previous_split(previous: dict[str, Any] | None, split: int, primary: int) -> dict[str, Any]:
    """What finished results recorded about a split's data ({} when they hold no run of it)."""
    if previous is None:
        return {}
    if split == primary:
        return {k: previous[k] for k in ("split_hash", "data_hash") if k in previous}
    return dict(previous.get("splits", {}).get(str(split), {}))


def _same_data(previous: dict[str, Any] | None, info: dict[str, Any], path: Path, tokenizer: Path, split_hash: str,
               data_hash: str, force: bool) -> dict[str, Any] | None:
    """``previous`` if its runs were trained on the data just prepared, with the tokenizer still there."""
    if previous is None:
        return None
    if (info.get("split_hash", split_hash) != split_hash or info.get("data_hash") != data_hash
            or not tokenizer.exists()):
        return discard(path, previous, force, "were trained on other data (the corpus, the split or an upstream "
                       "stage changed)")
    return previous


def _runs(cfg: ExperimentConfig) -> list[tuple[str, int, int, dict[str, Any]]]:
    """(key, split, seed, strategy) of every run, split- then seed-major so that a partial result compares
    every strategy; the first split's keys are ``<strategy>/<seed>``, the others' add ``/split-<seed>``."""
    specs = cfg.strategy_specs()
    primary = cfg.splits()[0]
    return [(f"{spec['name']}/{seed}" + ("" if split == primary else f"/split-{split}"), split, seed, spec)
            for split in cfg.splits() for seed in cfg.seeds for spec in specs]


def _finished(results: dict[str, Any], wanted: list[str]) -> int:
    return sum(key in results["runs"] for key in wanted)


def _write(results: dict[str, Any], wanted: list[str], exp_dir: Path, t_start: float) -> None:
    results["progress"] = {"finished_runs": _finished(results, wanted), "total_runs": len(wanted)}
    write_results(results, exp_dir, time.perf_counter() - t_start)


# --------------------------------------------------------------------------------------- the steps


def set_up(prep: Prepared, tok: Tokenized, cfg: ExperimentConfig) -> Setup:
    """Budget (``passes`` x training tokens), steps, the model with the tokenizer's vocabulary, and the
    evaluators: all held-out documents, the fixed curve subset, and the smallest clusters."""
    model = dataclasses.replace(cfg.model, vocab_size=tok.vocab_size)
    budget = round(cfg.passes * int(tok.train.lengths.sum()))
    steps = budget // (cfg.train.batch_size * model.context)
    if steps < 1:
        raise SettingsError("passes", f"{cfg.passes:g} give a budget of {budget} tokens, less than one batch; "
                            "raise {passes}", ExperimentConfig)

    def evaluator(docs: TokenizedDocs, clusters: np.ndarray, domains: np.ndarray | None) -> Evaluator:
        return Evaluator(docs, clusters, domains, model.context, device=cfg.device)

    heldout, labels, domains = tok.heldout, prep.heldout_labels, prep.heldout_domains
    rng = np.random.default_rng(cfg.split_seed)
    curve_ids = np.sort(rng.choice(len(heldout), size=min(cfg.curve_docs, len(heldout)), replace=False))
    small = smallest_clusters(prep.labels, labels, prep.data["k"], cfg.small_clusters)
    small_train_ids = np.flatnonzero(np.isin(prep.labels, small))
    uni_sums, uni_counts = unigram_doc_losses(tok.train, heldout, tok.vocab_size)
    return Setup(
        model, cfg.train, budget, steps, evaluator(heldout, labels, domains),
        evaluator(select_docs(heldout, curve_ids), labels[curve_ids], None if domains is None else domains[curve_ids]),
        small, np.isin(labels, small),
        evaluator(select_docs(tok.train, small_train_ids), prep.labels[small_train_ids], None),
        summarize_losses(uni_sums, uni_counts, labels, domains),
    )


def plan_run(spec: dict[str, Any], seed: int, prep: Prepared, tok: Tokenized, setup: Setup) -> PlannedRun:
    """The strategy's plan over the training split for the token budget, packed into training sequences
    (the diagnostic ``shuffle`` permutes the plan's draws first)."""
    plan_cfg = PlanConfig(strategy=spec["strategy"], budget=setup.budget, budget_unit="tokens",
                          max_repeat=spec.get("max_repeat"), tau=spec.get("tau", 0.5), seed=seed,
                          order=spec.get("order", "equal-rate"))
    plan = build_plan(prep.labels, plan_cfg, tokens=tok.train.lengths, n_clusters=prep.data["k"])
    order = np.asarray(plan.order, dtype=np.int64)
    if spec.get("shuffle"):
        order = np.random.default_rng([seed, SHUFFLE_SALT]).permutation(order)
    packed = pack(tok.train, order, setup.steps * setup.train.batch_size, setup.model.context)
    used = order[: np.searchsorted(np.cumsum(tok.train.lengths[order]), packed.stream_tokens) + 1]
    stats = {k: v for k, v in plan.stats.items() if _scalar(v)}
    return PlannedRun(spec["name"], seed, plan_cfg, stats, used, packed)


def train_run(planned: PlannedRun, setup: Setup, device: str = "cpu") -> TrainedRun:
    """A fresh model seeded with the run's seed, trained on the packed plan in order; the loss curve
    also scores the fixed held-out subset at every point."""
    t0 = time.perf_counter()
    key = f"{planned.name}/{planned.seed}"

    def on_curve(model: GPT) -> dict[str, Any]:
        m = setup.curve.evaluate(model)
        return {PRIMARY: round(m["macro_cluster"], 5), "heldout_micro": round(m["micro"], 5),
                **({"heldout_macro_domain": round(m["macro_domain"], 5)} if "macro_domain" in m else {})}

    def report(step: int, loss: float) -> None:
        log.info("experiment: %s: step %d/%d, train loss %.3f, %.0fs", key, step, setup.steps, loss,
                 time.perf_counter() - t0)

    model, curve = train_model(setup.model, setup.train, planned.packed, setup.steps, planned.seed, device,
                               on_curve, report)
    return TrainedRun(model, curve)


def evaluate_run(planned: PlannedRun, trained: TrainedRun, prep: Prepared, tok: Tokenized,
                 setup: Setup) -> RunMetrics:
    """Held-out losses of the trained model, its losses on the smallest clusters (held-out and
    training documents), and what the trained part of the plan held (mixtures, repeats)."""
    sums, counts = setup.heldout.losses(trained.model)
    small_ho = float(sums[setup.small_heldout].sum() / max(counts[setup.small_heldout].sum(), 1))
    s_sums, s_counts = setup.small_train.losses(trained.model)
    lengths = tok.train.lengths
    return RunMetrics(
        heldout=summarize_losses(sums, counts, prep.heldout_labels, prep.heldout_domains),
        small_heldout=small_ho,
        small_train=float(s_sums.sum() / max(s_counts.sum(), 1)),
        cluster_mixture=mixture(planned.used, lengths, prep.labels),
        domain_mixture=None if prep.train_domains is None else mixture(planned.used, lengths, prep.train_domains),
        repeats=repeats(planned.used, len(tok.train)),
        small_shares=small_shares(planned.used, lengths, np.isin(prep.labels, setup.small_clusters)),
    )


def run_record(planned: PlannedRun, trained: TrainedRun, metrics: RunMetrics, seconds: float) -> dict[str, Any]:
    """The run's entry in ``results["runs"]``."""
    h, mix_c, mix_d = metrics.heldout, metrics.cluster_mixture, metrics.domain_mixture
    return {
        "strategy": planned.name, "seed": planned.seed, "plan": planned.plan_config.to_json(),
        "plan_stats": planned.plan_stats,
        "heldout_macro_cluster": h["macro_cluster"], "heldout_micro": h["micro"],
        "heldout_macro_domain": h.get("macro_domain"), "heldout_worst10_cluster": h["worst10_cluster"],
        "heldout_per_cluster": h["per_cluster"], "heldout_per_domain": h.get("per_domain"),
        "small_heldout": metrics.small_heldout, "small_train": metrics.small_train,
        "small_gap": metrics.small_heldout - metrics.small_train,
        "final_train_loss": trained.curve[-1]["train_loss"],
        "cluster_mixture": mix_c, "domain_mixture": mix_d,
        "effective_clusters": mix_c["effective"], "effective_domains": mix_d["effective"] if mix_d else None,
        "repeats": metrics.repeats, **metrics.small_shares,
        "wrapped_tokens": planned.packed.wrapped_tokens,
        "curve": trained.curve, "seconds": round(seconds, 1),
    }


def _results_header(cfg: ExperimentConfig, inputs: Sequence[str | os.PathLike[str]], splits: list[SplitData],
                    previous: dict[str, Any] | None) -> dict[str, Any]:
    """The results file before this session's runs: configuration, data (the first split's, and every
    split's sizes and hashes), model, baseline, reused runs."""
    first = splits[0]
    prep, tok, setup = first.prep, first.tok, first.setup
    uni = setup.unigram
    return {
        "version": RESULTS_VERSION, "status": "running",
        "config": dataclasses.asdict(cfg), "config_hash": cfg.results_hash(), "data_hash": first.data_hash,
        "split_hash": prep.split_hash, "inputs": [str(p) for p in inputs], "run_dir": str(prep.run.root),
        "started_at": (previous or {}).get("started_at", time.strftime("%Y-%m-%dT%H:%M:%S%z")),
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "threads": torch.get_num_threads(), "device": cfg.device, "argv": sys.argv},
        "data": {**prep.data, "vocab_size": tok.vocab_size, "train_tokens": int(tok.train.lengths.sum()),
                 "heldout_tokens": int(tok.heldout.lengths.sum()), "budget_tokens": setup.budget,
                 "steps": setup.steps, "tokens_per_step": setup.train.batch_size * setup.model.context,
                 "small_clusters": setup.small_clusters.tolist(),
                 "small_clusters_train_documents": len(setup.small_train.docs),
                 "small_clusters_heldout_documents": int(setup.small_heldout.sum())},
        "splits": {str(d.split): {"split_hash": d.prep.split_hash, "data_hash": d.data_hash,
                                  "run_dir": str(d.prep.run.root), "steps": d.setup.steps,
                                  "train_documents": d.prep.data["train_documents"],
                                  "heldout_documents": d.prep.data["heldout_documents"],
                                  "train_cluster_sizes": d.prep.data["train_cluster_sizes"],
                                  "unigram_micro": d.setup.unigram["micro"]} for d in splits},
        "model": {**dataclasses.asdict(setup.model), "parameters": GPT(setup.model).num_params()},
        "train": dataclasses.asdict(setup.train),
        "unigram": {key: uni[key] for key in ("macro_cluster", "macro_domain", "micro", "per_domain") if key in uni},
        "runs": dict((previous or {}).get("runs", {})),
    }


# ------------------------------------------------------------------------------------------ helpers


def _scalar(v: Any) -> bool:
    return isinstance(v, (int, float, str, bool, np.integer, np.floating)) or v is None
