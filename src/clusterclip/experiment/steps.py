"""One proxy run as its steps, on a prepared held-out split: plan the strategy over the training split,
train a fresh model on the plan in order (read through ``ClusterClipSampler``, as a training job reads it),
evaluate it, and write the run's record.

:func:`set_up` fixes what every proxy run of a split shares (budget, steps, evaluators, the unigram
floor); :func:`proxy_run` is the whole run of one (strategy, seed).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from clusterclip.contract.corpus import read_column
from clusterclip.contract.dedup import load_groups
from clusterclip.experiment.batches import PlanBatches
from clusterclip.experiment.by_id import run_fields, run_labels
from clusterclip.experiment.config import ExperimentConfig, ModelConfig, TrainConfig
from clusterclip.experiment.data import TokenizedDocs, select_docs
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
from clusterclip.experiment.online import Steering
from clusterclip.experiment.prepare import Prepared, Tokenized
from clusterclip.experiment.results import PRIMARY
from clusterclip.experiment.specs import plan_config
from clusterclip.experiment.train import train_model
from clusterclip.plan.build import Plan, build_plan
from clusterclip.plan.config import PlanConfig
from clusterclip.plan.duplicates import GroupSide, grouped_plan
from clusterclip.settings import SettingsError
from clusterclip.store import RunDir

log = logging.getLogger(__name__)

SHUFFLE_SALT = 0x5EED


@dataclass(frozen=True)
class Setup:
    """What every proxy run of a split shares: budget and steps, model and recipe, the evaluators and the
    unigram floor."""

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
class SplitData:
    """One held-out split ready to train on: its configuration, data, tokens, shared setup and data hash."""

    split: int
    cfg: ExperimentConfig
    prep: Prepared
    tok: Tokenized
    setup: Setup
    data_hash: str


@dataclass(frozen=True)
class PlannedProxy:
    """One (strategy, seed): its plan, as the sampler replays it (the ``Plan``, or its draws permuted), and
    the spec's ``online`` rule and ``updates`` when the controller steers it."""

    name: str
    seed: int
    plan_config: PlanConfig
    plan_stats: dict[str, Any]
    plan: Plan | np.ndarray
    online: str | None = None
    updates: int = 0
    identity: str = ""


@dataclass(frozen=True)
class TrainedProxy:
    """The trained model, its loss curve, the plan's documents it read (``used``, first pass), the tokens
    taken from a second pass, the sampler's state after training, and an online run's record (weights over
    the run)."""

    model: GPT
    curve: list[dict[str, Any]]
    used: np.ndarray
    wrapped_tokens: int
    sampler_state: dict[str, Any]
    online: dict[str, Any] | None = None


@dataclass(frozen=True)
class ProxyMetrics:
    """Held-out losses (:func:`summarize_losses`), the smallest clusters' losses, and the plan's mixture."""

    heldout: dict[str, Any]
    small_heldout: float
    small_train: float
    heldout_novel: float | None
    cluster_mixture: dict[str, Any]
    domain_mixture: dict[str, Any] | None
    repeats: dict[str, Any]
    small_shares: dict[str, float]


def use_torch(cfg: ExperimentConfig) -> None:
    """Check the device and set torch's CPU threads."""
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise SettingsError("device", f"{cfg.device!r} requested but torch sees no CUDA device", ExperimentConfig)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)


def proxy_run(d: SplitData, spec: dict[str, Any], seed: int, device: str = "cpu",
              seconds_before: float = 0.0) -> dict[str, Any]:
    """Plan, train and evaluate one (strategy, seed) on a prepared split; its record for ``results["runs"]``."""
    t0 = time.perf_counter()
    planned = plan_proxy(spec, seed, d.prep, d.tok, d.setup)
    trained = train_proxy(planned, d.tok, d.setup, device, d.prep.labels, d.prep.data["k"])
    metrics = evaluate_proxy(trained, d.prep, d.tok, d.setup)
    return {**proxy_record(planned, trained, metrics, seconds_before + time.perf_counter() - t0), "split": d.split}


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


def plan_proxy(spec: dict[str, Any], seed: int, prep: Prepared, tok: Tokenized, setup: Setup) -> PlannedProxy:
    """The strategy's plan over the training split for the token budget (the diagnostic ``shuffle`` permutes
    the plan's draws)."""
    plan = _plan(spec, seed, prep, tok, setup)
    replayed: Plan | np.ndarray = plan
    if spec.get("shuffle"):
        replayed = np.random.default_rng([seed, SHUFFLE_SALT]).permutation(np.asarray(plan.order, dtype=np.int64))
    stats = {k: v for k, v in plan.stats.items() if _scalar(v)}
    return PlannedProxy(spec["name"], seed, plan.config, stats, replayed, spec.get("online"), spec.get("updates", 0),
                        str(plan.identity))


def _plan(spec: dict[str, Any], seed: int, prep: Prepared, tok: Tokenized, setup: Setup) -> Plan:
    """The spec's plan for the token budget, over the split's clusters or, with ``clusters``, another run's (each
    training document in its cluster there), with the per-document fields its strata read from the input (or that
    run). ``group-cap`` and ``rehydrate`` plan documents (members differ in tokens): enough of them, at the
    training split's mean length plus 5 %, for the steps (the packer stops at the budget)."""
    labels, k, lengths = prep.labels, prep.data["k"], tok.train.lengths
    if "clusters" in spec:
        labels, k = run_labels(spec["clusters"], read_column(prep.run, "id"))
    dup = spec.get("duplicates", "none")
    groups = None if dup == "none" else load_groups(prep.run)
    if groups is not None and dup in ("group-cap", "rehydrate"):
        docs, cap = math.ceil(1.05 * setup.budget / float(lengths.mean())), spec.get("max_repeat")
        cfg = plan_config(spec, min(docs, cap * groups[1].size) if cap else docs, seed, budget_unit="docs")
    else:
        cfg = plan_config(spec, setup.budget, seed)
    names = cfg.field_names()
    source = RunDir(spec.get("clusters") or prep.source)
    fields = run_fields(source, names, read_column(prep.run, "id")) if names else None
    if groups is None:
        return build_plan(labels, cfg, tokens=lengths, n_clusters=k, fields=fields)
    return grouped_plan(labels, cfg, groups, tokens=lengths, n_clusters=k, side=GroupSide(fields=fields))


def train_proxy(planned: PlannedProxy, tok: Tokenized, setup: Setup, device: str = "cpu",
                labels: np.ndarray | None = None, n_clusters: int | None = None) -> TrainedProxy:
    """A fresh model seeded with the run's seed, trained on the plan in order: ``ClusterClipSampler`` replays
    it into a ``DataLoader`` over the training documents, packed into sequences as they come
    (:class:`PlanBatches`). The loss curve also scores the fixed held-out subset at every point. An online
    run (``planned.online``) needs the training split's cluster ``labels`` and ``n_clusters``: its
    :class:`~clusterclip.experiment.online.Steering` re-plans from the losses as it trains."""
    t0 = time.perf_counter()
    key = f"{planned.name}/{planned.seed}"

    def on_curve(model: GPT) -> dict[str, Any]:
        m = setup.curve.evaluate(model)
        return {PRIMARY: round(m["macro_cluster"], 5), "heldout_micro": round(m["micro"], 5),
                **({"heldout_macro_domain": round(m["macro_domain"], 5)} if "macro_domain" in m else {})}

    def report(step: int, loss: float) -> None:
        log.info("experiment: %s: step %d/%d, train loss %.3f, %.0fs", key, step, setup.steps, loss,
                 time.perf_counter() - t0)

    steering = None
    if planned.online is not None:
        if labels is None or n_clusters is None:
            raise ValueError(f"{key}: an online run needs the training split's cluster labels and their number")
        batches = PlanBatches(tok.train, planned.plan, setup.train.batch_size, setup.model.context, labels=labels)
        steering = Steering(batches, tok.train.lengths, planned.plan_config, setup.budget, n_clusters,
                            planned.online, setup.steps, planned.updates)
    else:
        batches = PlanBatches(tok.train, planned.plan, setup.train.batch_size, setup.model.context)
    model, curve = train_model(setup.model, setup.train, batches, setup.steps, planned.seed, device,
                               on_curve, report)
    return TrainedProxy(model, curve, batches.used(), batches.wrapped_tokens, batches.state(),
                        None if steering is None else steering.record())


def evaluate_proxy(trained: TrainedProxy, prep: Prepared, tok: Tokenized, setup: Setup) -> ProxyMetrics:
    """Held-out losses of the trained model, its losses on the smallest clusters (held-out and
    training documents), and what the trained part of the plan held (mixtures, repeats)."""
    sums, counts = setup.heldout.losses(trained.model)
    small_ho = float(sums[setup.small_heldout].sum() / max(counts[setup.small_heldout].sum(), 1))
    s_sums, s_counts = setup.small_train.losses(trained.model)
    novel = ~prep.heldout_near_train
    lengths, used = tok.train.lengths, trained.used
    return ProxyMetrics(
        heldout=summarize_losses(sums, counts, prep.heldout_labels, prep.heldout_domains),
        small_heldout=small_ho,
        small_train=float(s_sums.sum() / max(s_counts.sum(), 1)),
        heldout_novel=float(sums[novel].sum() / counts[novel].sum()) if counts[novel].sum() else None,
        cluster_mixture=mixture(used, lengths, prep.labels),
        domain_mixture=None if prep.train_domains is None else mixture(used, lengths, prep.train_domains),
        repeats=repeats(used, len(tok.train)),
        small_shares=small_shares(used, lengths, np.isin(prep.labels, setup.small_clusters)),
    )


def proxy_record(planned: PlannedProxy, trained: TrainedProxy, metrics: ProxyMetrics,
                 seconds: float) -> dict[str, Any]:
    """The run's entry in ``results["runs"]``."""
    h, mix_c, mix_d = metrics.heldout, metrics.cluster_mixture, metrics.domain_mixture
    return {
        "strategy": planned.name, "seed": planned.seed, "plan": planned.plan_config.to_json(),
        "plan_identity": planned.identity,
        "plan_stats": planned.plan_stats,
        "heldout_macro_cluster": h["macro_cluster"], "heldout_micro": h["micro"],
        "heldout_macro_domain": h.get("macro_domain"), "heldout_worst10_cluster": h["worst10_cluster"],
        "heldout_novel_micro": metrics.heldout_novel,
        "heldout_per_cluster": h["per_cluster"], "heldout_per_domain": h.get("per_domain"),
        "small_heldout": metrics.small_heldout, "small_train": metrics.small_train,
        "small_gap": metrics.small_heldout - metrics.small_train,
        "final_train_loss": trained.curve[-1]["train_loss"],
        "cluster_mixture": mix_c, "domain_mixture": mix_d,
        "effective_clusters": mix_c["effective"], "effective_domains": mix_d["effective"] if mix_d else None,
        "repeats": metrics.repeats, **metrics.small_shares,
        "wrapped_tokens": trained.wrapped_tokens,
        "sampler": {k: trained.sampler_state[k] for k in ("epoch", "consumed", "plan_length")},
        "curve": trained.curve, "seconds": round(seconds, 1),
        **({} if trained.online is None else {"online": trained.online}),
    }


def _scalar(v: Any) -> bool:
    return isinstance(v, (int, float, str, bool, np.integer, np.floating)) or v is None
