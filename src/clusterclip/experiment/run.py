"""Orchestration of the sampling experiment: split, pipeline, tokenizer, one training run per
(strategy, seed), metrics, and the results JSON, markdown table and plots.

Layout (``OUT`` is the run directory of the *training split*, a normal clusterclip run directory)::

    OUT/corpus.json, embeddings/, labels.npy, ...   pipeline stages on the training split
    OUT/experiment/source/            corpus stage on the full input (any supported format)
    OUT/experiment/data/train.jsonl   training split (id, text, domain), cut to max_words
    OUT/experiment/data/heldout.jsonl held-out split
    OUT/experiment/tokenizer.json     byte-level BPE trained on the training split
    OUT/experiment/results.json       every number, rewritten atomically after each training run
    OUT/experiment/results.md         the markdown table
    OUT/experiment/*.png              loss curves, per-domain bars, mixtures

Runs are keyed ``<strategy>/<seed>``; a restart with the same configuration skips finished runs.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.errors import ClusterClipError
from clusterclip.rundir import RunDir, atomic_write, config_hash, load_json, save_json

log = logging.getLogger(__name__)

RESULTS_VERSION = 1
PRIMARY = "heldout_macro_cluster"
METRICS = ("heldout_macro_cluster", "heldout_macro_domain", "heldout_micro", "heldout_worst10_cluster",
           "small_heldout", "small_train", "small_gap", "final_train_loss", "effective_clusters",
           "effective_domains", "small_share", "small_share_last_quarter")
SHUFFLE_SALT = 0x5EED
UNIGRAM_MARGIN = 0.5
RUNTIME_FIELDS = ("seeds", "strategies", "max_repeats", "device", "threads")


@dataclass(frozen=True)
class ExperimentConfig:
    """Every option of an experiment. Fields in ``RUNTIME_FIELDS`` may change between restarts
    (adding seeds or strategies reuses finished runs); any other change needs ``force``."""

    docs: int | None = 1000
    max_words: int | None = 120
    heldout: float = 0.2
    split_seed: int = 0
    text_field: str = "text"
    group_field: str | None = "domain"
    embedder: str = "static"
    k: int = 24
    passes: float = 6.0
    strategies: tuple[str, ...] = ("random", "uniform", "temperature", "clusterclip")
    max_repeats: tuple[int, ...] = (9, 12)
    tau: float = 0.5
    seeds: tuple[int, ...] = (0, 1, 2)
    vocab_size: int = 2048
    context: int = 128
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 128
    batch_size: int = 8
    lr: float = 3e-3
    warmup_steps: int = 100
    curve_points: int = 8
    curve_docs: int = 100
    small_clusters: float = 0.2
    device: str = "cpu"
    threads: int | None = 1

    def validate(self) -> None:
        """Reject options that cannot give a meaningful comparison, with the fix in the message."""
        known = ("random", "uniform", "temperature", "clusterclip", "clusterclip-spread", "clusterclip-shuffled")
        bad = [s for s in self.strategies if s not in known]
        if bad or not self.strategies:
            raise ClusterClipError(f"unknown strategies {bad}; choose from {', '.join(known)}")
        if not self.seeds or any(s < 0 for s in self.seeds):
            raise ClusterClipError("seeds must be a non-empty list of integers >= 0")
        if self.passes <= 0:
            raise ClusterClipError(f"--passes must be > 0, got {self.passes}")
        if any(s.startswith("clusterclip") for s in self.strategies):
            if not self.max_repeats:
                raise ClusterClipError("clusterclip needs at least one --max-repeat value")
            low = [r for r in self.max_repeats if r <= self.passes]
            if low:
                raise ClusterClipError(
                    f"--max-repeat {low} must exceed --passes {self.passes:g}: the budget repeats every "
                    f"document {self.passes:g} times on average, so a cap below that is infeasible and a cap "
                    "equal to it makes ClusterClip identical to random; use caps above the number of passes "
                    f"(e.g. {math.ceil(self.passes * 1.5)}) or lower --passes")
        if not 0 < self.heldout < 1:
            raise ClusterClipError(f"--heldout must be in (0, 1), got {self.heldout}")
        if self.k < 2:
            raise ClusterClipError(f"--k must be at least 2, got {self.k}")
        if self.context < 8 or self.batch_size < 1 or self.vocab_size < 300:
            raise ClusterClipError("--context must be >= 8, --batch-size >= 1 and --vocab-size >= 300 "
                                   "(256 bytes + merges)")
        if self.d_model % self.n_head:
            raise ClusterClipError(f"--d-model {self.d_model} must be divisible by --heads {self.n_head}")

    def fixed_hash(self) -> str:
        """Hash of the options that change the numbers of every run (not the runtime fields)."""
        d = asdict(self)
        for key in RUNTIME_FIELDS:
            d.pop(key)
        return config_hash(d)

    def strategy_specs(self) -> list[dict[str, Any]]:
        """One entry per trained strategy: name and the :class:`PlanConfig` options it needs."""
        specs = []
        for s in self.strategies:
            if s.startswith("clusterclip"):
                specs += [{"name": f"{s}-R{r}", "strategy": "clusterclip", "max_repeat": int(r),
                           "order": "spread" if s.endswith("spread") else "equal-rate",
                           "shuffle": s.endswith("shuffled")} for r in self.max_repeats]
            elif s == "temperature":
                specs.append({"name": f"temperature-{self.tau:g}", "strategy": s, "tau": float(self.tau)})
            else:
                specs.append({"name": s, "strategy": s})
        return specs


QUICK = dict(docs=320, max_words=60, k=6, passes=3.0, max_repeats=(5,), seeds=(0,), vocab_size=400,
             context=64, n_layer=1, n_head=2, d_model=64, batch_size=8, curve_points=4, curve_docs=64,
             warmup_steps=20, embedder="hashing")


def quick_config(**overrides: Any) -> ExperimentConfig:
    """The ``--quick`` preset (seconds per run; exercises every code path, proves nothing)."""
    return dataclasses.replace(ExperimentConfig(), **{**QUICK, **overrides})


# ------------------------------------------------------------------------------------------- helpers


def _write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` atomically unless the file already holds it (keeps mtimes, so stages stay fresh)."""
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return
    with atomic_write(path, "w") as fh:
        fh.write(text)


def _jsonl(ids: Sequence[str], texts: Sequence[str], domains: Sequence[str | None]) -> str:
    return "".join(json.dumps({"id": i, "text": t, "domain": d}, ensure_ascii=False) + "\n"
                   for i, t, d in zip(ids, texts, domains, strict=True))


def _mean_std(values: Sequence[float]) -> dict[str, Any]:
    v = np.asarray(values, dtype=np.float64)
    return {"mean": round(float(v.mean()), 5), "std": round(float(v.std(ddof=1)) if v.size > 1 else 0.0, 5),
            "n": int(v.size), "values": [round(float(x), 5) for x in v]}


@dataclass
class _Prepared:
    run: RunDir
    split_hash: str
    train_texts: list[str]
    heldout_texts: list[str]
    train_domains: np.ndarray | None
    heldout_domains: np.ndarray | None
    labels: np.ndarray
    heldout_labels: np.ndarray
    data: dict[str, Any]


def prepare_data(inputs: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], cfg: ExperimentConfig,
                 progress: bool = False, expect_split: str | None = None, force: bool = False) -> _Prepared:
    """Read, subset and cut the corpus, split it stratified by (cluster, domain), and run the
    pipeline (corpus, embed, cluster) on the training split; held-out documents are assigned to the
    training split's centroids.

    The stratifying clusters come from a k-means of the whole subset with the same embedder and K;
    the clusters used for training and metrics are the training split's own, as in real use. When
    ``expect_split`` (the split hash of finished runs) differs from the new split, nothing is written
    and an error explains why, unless ``force``.
    """
    from clusterclip.cluster import ClusterConfig, assign, cluster_stage, fit_centroids, load_labels
    from clusterclip.corpus import CorpusConfig, corpus_stage, read_column
    from clusterclip.embed import embed_stage, get_embedder
    from clusterclip.experiment.data import choose_subset, cut_words, stratified_split
    from clusterclip.rundir import load_npy

    run = RunDir(out)
    exp = run.root / "experiment"
    source = RunDir(exp / "source")
    with source.lock():
        source.clean_temp_files()
        corpus_stage(source, inputs, CorpusConfig(text_field=cfg.text_field, group_field=cfg.group_field),
                     progress=progress)
    texts_all = read_column(source, "text")
    ids_all = read_column(source, "id")
    groups_all = read_column(source, "group")
    pick = choose_subset(len(texts_all), cfg.docs, cfg.split_seed)
    if pick.size < 4 * cfg.k:
        raise ClusterClipError(f"{pick.size} documents are too few for k={cfg.k} clusters and a held-out split; "
                               "use more --docs or a smaller --k")
    texts = [cut_words(texts_all[i], cfg.max_words) for i in pick]
    ids = [str(ids_all[i]) for i in pick]
    groups = [groups_all[i] for i in pick]
    has_domains = any(g is not None for g in groups)
    dom = [g if g is not None else "(none)" for g in groups]

    embedder = get_embedder(cfg.embedder, progress=progress)
    emb = embedder.encode(texts)
    fit = fit_centroids(emb, cfg.k, seed=cfg.split_seed)
    split_labels, _ = assign([emb], fit.centroids)
    strata = np.array([f"{c}|{d}" for c, d in zip(split_labels.tolist(), dom, strict=True)])
    held = stratified_split(strata, cfg.heldout, cfg.split_seed)
    tr, ho = np.flatnonzero(~held), np.flatnonzero(held)

    train_jsonl = _jsonl([ids[i] for i in tr], [texts[i] for i in tr], [dom[i] for i in tr])
    heldout_jsonl = _jsonl([ids[i] for i in ho], [texts[i] for i in ho], [dom[i] for i in ho])
    split_hash = config_hash({"train": train_jsonl, "heldout": heldout_jsonl})
    if expect_split is not None and expect_split != split_hash and not force:
        raise ClusterClipError(
            f"{exp / 'results.json'}: the held-out split drawn now differs from the one its finished runs "
            "used (the corpus, the embedder or the clustering code changed); pass --force to set those runs "
            "aside and start again, or use another --out")
    data_dir = exp / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    _write_if_changed(data_dir / "train.jsonl", train_jsonl)
    _write_if_changed(data_dir / "heldout.jsonl", heldout_jsonl)
    with run.lock():
        run.clean_temp_files()
        corpus_stage(run, [data_dir / "train.jsonl"], CorpusConfig(id_field="id", group_field="domain"),
                     progress=progress)
        embed_stage(run, embedder=cfg.embedder, progress=progress)
        cluster_stage(run, ClusterConfig(k=cfg.k, seed=cfg.split_seed), progress=progress)
    labels = load_labels(run).astype(np.int64)
    centroids = load_npy(run.root / "centroids.npy")
    heldout_labels = assign([emb[ho]], centroids)[0].astype(np.int64)
    train_texts = read_column(run, "text")
    train_dom = np.array(read_column(run, "group"), dtype=object).astype(str)
    heldout_texts = [texts[i] for i in ho]
    k = int(centroids.shape[0])
    data = {
        "input_documents": len(texts_all), "subset_documents": int(pick.size),
        "train_documents": int(tr.size), "heldout_documents": int(ho.size), "k": k,
        "train_cluster_sizes": np.bincount(labels, minlength=k).tolist(),
        "heldout_cluster_sizes": np.bincount(heldout_labels, minlength=k).tolist(),
    }
    if has_domains:
        keys, counts = np.unique(train_dom, return_counts=True)
        hkeys, hcounts = np.unique(np.array(dom, dtype=object)[ho].astype(str), return_counts=True)
        hc = dict(zip(hkeys.tolist(), hcounts.tolist(), strict=True))
        data["domains"] = {k_: {"train_documents": int(c), "heldout_documents": int(hc.get(k_, 0))}
                           for k_, c in sorted(zip(keys.tolist(), counts.tolist(), strict=True), key=lambda t: -t[1])}
    return _Prepared(run, split_hash, train_texts, heldout_texts,
                     train_dom if has_domains else None,
                     np.array([dom[i] for i in ho], dtype=object).astype(str) if has_domains else None,
                     labels, heldout_labels, data)


# ------------------------------------------------------------------------------------------ the run


def run_experiment(
    inputs: Sequence[str | os.PathLike[str]] = (),
    out: str | os.PathLike[str] = "clusterclip-experiment",
    config: ExperimentConfig | None = None,
    force: bool = False,
    progress: bool = False,
) -> dict[str, Any]:
    """Train one model per (strategy, seed) on the same data, budget and recipe; only the plan differs.

    Writes ``OUT/experiment/results.json`` after every run (atomically) together with the markdown
    table and plots, and skips runs already recorded there for the same configuration, so a killed
    experiment resumes where it stopped. ``force`` discards results of a different configuration.
    Returns the results dictionary.
    """
    import torch

    from clusterclip.experiment.data import encode_docs, load_tokenizer, pack, train_tokenizer
    from clusterclip.experiment.evaluate import Evaluator, mixture, repeats, summarize_losses, unigram_doc_losses
    from clusterclip.experiment.model import GPT, ModelConfig
    from clusterclip.experiment.train import TrainConfig, train_model
    from clusterclip.sampling import PlanConfig, build_plan

    cfg = config or ExperimentConfig()
    cfg.validate()
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise ClusterClipError("--device cuda requested but torch sees no CUDA device")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    exp_dir = Path(out) / "experiment"
    exp = RunDir(exp_dir)
    results_path = exp_dir / "results.json"
    t_start = time.perf_counter()
    with exp.lock():
        previous = load_json(results_path) if results_path.exists() else None
        if previous is not None and not previous.get("runs"):
            previous = None
        if previous is not None and previous.get("config_hash") != cfg.fixed_hash():
            previous = _discard(results_path, previous, force, "were trained with a different configuration")
        prep = prepare_data(inputs, out, cfg, progress=progress,
                            expect_split=(previous or {}).get("split_hash"), force=force)
        tok_path = exp_dir / "tokenizer.json"
        data_hash = config_hash({"cfg": cfg.fixed_hash(), "train": prep.run.output_hash("corpus")})
        stale_split = previous is not None and previous.get("split_hash", prep.split_hash) != prep.split_hash
        if previous is not None and (stale_split or previous.get("data_hash") != data_hash or not tok_path.exists()):
            previous = _discard(results_path, previous, force, "were trained on other data (the corpus, the "
                                "split or an upstream stage changed)")
        if previous is not None:
            tokenizer = load_tokenizer(tok_path)
        else:
            tokenizer = train_tokenizer(prep.train_texts, cfg.vocab_size, tok_path)
        train = encode_docs(tokenizer, prep.train_texts)
        heldout = encode_docs(tokenizer, prep.heldout_texts)
        vocab = int(tokenizer.get_vocab_size())  # type: ignore[attr-defined]
        model_cfg = ModelConfig(vocab_size=vocab, context=cfg.context, n_layer=cfg.n_layer, n_head=cfg.n_head,
                                d_model=cfg.d_model)
        train_cfg = TrainConfig(batch_size=cfg.batch_size, lr=cfg.lr, warmup_steps=cfg.warmup_steps,
                                curve_points=cfg.curve_points)
        k = prep.data["k"]
        train_tokens = int(train.lengths.sum())
        budget = round(cfg.passes * train_tokens)
        steps = budget // (cfg.batch_size * cfg.context)
        if steps < 1:
            raise ClusterClipError(f"a budget of {budget} tokens is less than one batch; raise --passes")

        evaluator = Evaluator(heldout, prep.heldout_labels, prep.heldout_domains, cfg.context, device=cfg.device)
        rng = np.random.default_rng(cfg.split_seed)
        curve_ids = np.sort(rng.choice(len(heldout), size=min(cfg.curve_docs, len(heldout)), replace=False))
        curve_eval = Evaluator(_subset(heldout, curve_ids), prep.heldout_labels[curve_ids],
                               None if prep.heldout_domains is None else prep.heldout_domains[curve_ids],
                               cfg.context, device=cfg.device)
        small = _smallest_clusters(prep.labels, prep.heldout_labels, k, cfg.small_clusters)
        small_train_ids = np.flatnonzero(np.isin(prep.labels, small))
        small_train_eval = Evaluator(_subset(train, small_train_ids), prep.labels[small_train_ids], None,
                                     cfg.context, device=cfg.device)
        small_held = np.isin(prep.heldout_labels, small)

        uni_sums, uni_counts = unigram_doc_losses(train, heldout, vocab)
        unigram = summarize_losses(uni_sums, uni_counts, prep.heldout_labels, prep.heldout_domains)
        results: dict[str, Any] = {
            "version": RESULTS_VERSION,
            "status": "running",
            "config": asdict(cfg),
            "config_hash": cfg.fixed_hash(),
            "data_hash": data_hash,
            "split_hash": prep.split_hash,
            "inputs": [str(p) for p in inputs],
            "run_dir": str(prep.run.root),
            "started_at": (previous or {}).get("started_at", time.strftime("%Y-%m-%dT%H:%M:%S%z")),
            "environment": {"python": platform.python_version(), "torch": torch.__version__,
                            "threads": torch.get_num_threads(), "device": cfg.device,
                            "argv": sys.argv},
            "data": {**prep.data, "vocab_size": vocab, "train_tokens": train_tokens,
                     "heldout_tokens": int(heldout.lengths.sum()), "budget_tokens": budget, "steps": steps,
                     "tokens_per_step": cfg.batch_size * cfg.context,
                     "small_clusters": small.tolist(),
                     "small_clusters_train_documents": int(small_train_ids.size),
                     "small_clusters_heldout_documents": int(small_held.sum())},
            "model": {**asdict(model_cfg), "parameters": GPT(model_cfg).num_params()},
            "train": asdict(train_cfg),
            "unigram": {key: unigram[key] for key in ("macro_cluster", "macro_domain", "micro", "per_domain")
                        if key in unigram},
            "runs": dict((previous or {}).get("runs", {})),
        }
        specs = cfg.strategy_specs()
        wanted = [f"{spec['name']}/{seed}" for seed in cfg.seeds for spec in specs]
        total = len(wanted)

        def finished() -> int:
            return sum(key in results["runs"] for key in wanted)

        for seed in cfg.seeds:
            for spec in specs:
                key = f"{spec['name']}/{seed}"
                if key in results["runs"]:
                    continue
                t0 = time.perf_counter()
                plan_cfg = PlanConfig(strategy=spec["strategy"], budget=budget, budget_unit="tokens",
                                      max_repeat=spec.get("max_repeat"), tau=spec.get("tau", 0.5), seed=seed,
                                      order=spec.get("order", "equal-rate"))
                plan = build_plan(prep.labels, plan_cfg, tokens=train.lengths, n_clusters=k)
                order = np.asarray(plan.order, dtype=np.int64)
                if spec.get("shuffle"):
                    order = np.random.default_rng([seed, SHUFFLE_SALT]).permutation(order)
                packed = pack(train, order, steps * cfg.batch_size, cfg.context)
                log.info("experiment: %s seed %d: %d steps (%d/%d)", spec["name"], seed, steps,
                         finished() + 1, total)

                def on_curve(model: GPT, ev: Evaluator = curve_eval) -> dict[str, Any]:
                    m = ev.evaluate(model)
                    return {PRIMARY: round(m["macro_cluster"], 5), "heldout_micro": round(m["micro"], 5),
                            **({"heldout_macro_domain": round(m["macro_domain"], 5)} if "macro_domain" in m else {})}

                def report(step: int, loss: float, name: str = key, t0: float = t0) -> None:
                    log.info("experiment: %s: step %d/%d, train loss %.3f, %.0fs", name, step, steps,
                             loss, time.perf_counter() - t0)

                model, curve = train_model(model_cfg, train_cfg, packed, steps, seed, cfg.device, on_curve, report)
                final = evaluator.evaluate(model)
                sums, counts = evaluator.losses(model)
                small_ho = float(sums[small_held].sum() / max(counts[small_held].sum(), 1))
                s_sums, s_counts = small_train_eval.losses(model)
                small_tr = float(s_sums.sum() / max(s_counts.sum(), 1))
                used = order[: np.searchsorted(np.cumsum(train.lengths[order]), packed.stream_tokens) + 1]
                mix_c = mixture(used, train.lengths, prep.labels)
                mix_d = mixture(used, train.lengths, prep.train_domains) if prep.train_domains is not None else None
                results["runs"][key] = {
                    "strategy": spec["name"], "seed": seed, "plan": plan_cfg.to_json(),
                    "plan_stats": {k_: v for k_, v in plan.stats.items() if _scalar(v)},
                    "heldout_macro_cluster": final["macro_cluster"], "heldout_micro": final["micro"],
                    "heldout_macro_domain": final.get("macro_domain"),
                    "heldout_worst10_cluster": final["worst10_cluster"],
                    "heldout_per_cluster": final["per_cluster"], "heldout_per_domain": final.get("per_domain"),
                    "small_heldout": small_ho, "small_train": small_tr, "small_gap": small_ho - small_tr,
                    "final_train_loss": curve[-1]["train_loss"],
                    "cluster_mixture": mix_c, "domain_mixture": mix_d,
                    "effective_clusters": mix_c["effective"],
                    "effective_domains": mix_d["effective"] if mix_d else None,
                    "repeats": repeats(used, len(train)),
                    **_small_shares(used, train.lengths, np.isin(prep.labels, small)),
                    "wrapped_tokens": packed.wrapped_tokens,
                    "curve": curve, "seconds": round(time.perf_counter() - t0, 1),
                }
                results["progress"] = {"finished_runs": finished(), "total_runs": total}
                _finish(results, cfg, exp_dir, time.perf_counter() - t_start)
                print(f"experiment: {key}: macro {final['macro_cluster']:.4f} micro {final['micro']:.4f} "
                      f"({results['runs'][key]['seconds']:.0f}s, {finished()}/{total})",
                      file=sys.stderr, flush=True)
        results["status"] = "complete"
        results["progress"] = {"finished_runs": finished(), "total_runs": total}
        _finish(results, cfg, exp_dir, time.perf_counter() - t_start)
    return results


def _discard(path: Path, previous: dict[str, Any], force: bool, why: str) -> None:
    """Refuse to mix incomparable runs; with ``force`` keep the old file aside and start afresh."""
    n = len(previous.get("runs", {}))
    if not force:
        raise ClusterClipError(f"{path}: its {n} finished runs {why}; pass --force to set them aside "
                               "(renamed to results.discarded-<time>.json) and start again, or use another --out")
    backup = path.with_name(f"results.discarded-{time.strftime('%Y%m%dT%H%M%S')}.json")
    os.replace(path, backup)
    log.warning("experiment: %d finished runs %s; moved to %s", n, why, backup)
    return None


def _scalar(v: Any) -> bool:
    return isinstance(v, (int, float, str, bool, np.integer, np.floating)) or v is None


def _subset(docs: Any, ids: np.ndarray) -> Any:
    from clusterclip.experiment.data import TokenizedDocs, gather_stream

    lengths = docs.lengths[ids]
    return TokenizedDocs(gather_stream(docs, ids), np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
                         docs.eos)


def _smallest_clusters(labels: np.ndarray, heldout_labels: np.ndarray, k: int, fraction: float) -> np.ndarray:
    """The smallest ``fraction`` of clusters (by training documents) that have held-out documents."""
    sizes = np.bincount(labels, minlength=k)
    has_heldout = np.bincount(heldout_labels, minlength=k) > 0
    cand = np.flatnonzero(has_heldout)
    cand = cand[np.argsort(sizes[cand], kind="stable")]
    return np.sort(cand[: max(1, math.ceil(fraction * k))])


def _small_shares(order: np.ndarray, lengths: np.ndarray, is_small: np.ndarray) -> dict[str, float]:
    """Token share of the smallest clusters over the whole plan and in its last quarter (what the
    model saw most recently: a plan that exhausts them early leaves them out of the end of training)."""
    tok = lengths[order].astype(np.float64)
    pos = np.cumsum(tok)
    late = pos > 0.75 * pos[-1]
    small = is_small[order]
    return {"small_share": float(tok[small].sum() / tok.sum()),
            "small_share_last_quarter": float(tok[small & late].sum() / tok[late].sum())}


def summarize_runs(results: dict[str, Any]) -> dict[str, Any]:
    """Mean, spread and paired differences to ``random`` per strategy, from the finished runs."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in results["runs"].values():
        by.setdefault(r["strategy"], []).append(r)
    baseline = {r["seed"]: r for r in by.get("random", [])}
    stats: dict[str, Any] = {}
    for name, runs in by.items():
        entry: dict[str, Any] = {"runs": len(runs)}
        for m in METRICS:
            vals = [r[m] for r in runs if r.get(m) is not None]
            if vals:
                entry[m] = _mean_std(vals)
        paired = [(r, baseline[r["seed"]]) for r in runs if r["seed"] in baseline and name != "random"]
        for m in ("heldout_macro_cluster", "heldout_macro_domain", "heldout_micro", "heldout_worst10_cluster"):
            diffs = [a[m] - b[m] for a, b in paired if a.get(m) is not None]
            if diffs:
                entry[f"{m}_minus_random"] = {**_mean_std(diffs), "wins": int(sum(d < 0 for d in diffs))}
        per_domain: dict[str, list[float]] = {}
        for r in runs:
            for d, v in (r.get("heldout_per_domain") or {}).items():
                per_domain.setdefault(d, []).append(v)
        entry["heldout_per_domain"] = {d: _mean_std(v) for d, v in per_domain.items()}
        entry["domain_shares"] = runs[0]["domain_mixture"]["shares"] if runs[0].get("domain_mixture") else None
        stats[name] = entry
    return stats


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
        for m in ("heldout_macro_cluster", "heldout_micro"):
            if f"{m}_minus_random" in e:
                row[f"{m}_minus_random"] = e[f"{m}_minus_random"]["mean"]
        rows[name] = row
    return rows


def _mean_curves(results: dict[str, Any]) -> dict[str, dict[str, list[float]]]:
    """Per strategy: the loss curves averaged over the seeds that finished."""
    by: dict[str, list[list[dict[str, Any]]]] = {}
    for r in results["runs"].values():
        by.setdefault(r["strategy"], []).append(r["curve"])
    out: dict[str, dict[str, list[float]]] = {}
    for name, curves in by.items():
        n = min(len(c) for c in curves)
        entry: dict[str, list[float]] = {"step": [c["step"] for c in curves[0][:n]]}
        for key in (PRIMARY, "heldout_micro", "heldout_macro_domain", "train_loss"):
            rows = [[p.get(key) for p in c[:n]] for c in curves]
            if all(v is not None for row in rows for v in row[1:]):
                entry[key] = [None if any(row[i] is None for row in rows) else
                              round(float(np.mean([row[i] for row in rows])), 5) for i in range(n)]
        out[name] = entry
    return out


def _finish(results: dict[str, Any], cfg: ExperimentConfig, exp_dir: Path, seconds: float) -> None:
    """Recompute aggregates, then write results.json, results.md and the plots."""
    from clusterclip.experiment.plots import write_plots

    uni = results.get("unigram", {})
    if results["runs"] and "micro" in uni:
        margin = min(uni["micro"] - r["heldout_micro"] for r in results["runs"].values())
        uni["smallest_margin_micro"] = round(margin, 4)
        if margin < UNIGRAM_MARGIN:
            log.warning("experiment: a model is only %.2f nats/token below the unigram baseline: undertrained, "
                        "differences between strategies mean little; raise --passes or the corpus size", margin)
    results["stats"] = summarize_runs(results)
    results["summary"] = _flat_summary(results["stats"])
    results["curves"] = _mean_curves(results)
    results["updated_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    results["seconds_this_session"] = round(seconds, 1)
    save_json(exp_dir / "results.json", results)
    with atomic_write(exp_dir / "results.md", "w") as fh:
        fh.write(markdown_table(results))
    try:
        results["plots"] = write_plots(results, exp_dir)
    except Exception as exc:  # plots must never lose the numbers
        log.warning("experiment: plots failed (%s)", exc)
    save_json(exp_dir / "results.json", results)


def markdown_table(results: dict[str, Any]) -> str:
    """The results as a markdown table: mean ± std over seeds, paired difference to random."""
    stats = results.get("stats", {})
    d = results.get("data", {})
    uni = results.get("unigram", {})
    lines = [
        f"Held-out loss (nats/token), mean ± std over seeds; {d.get('train_documents')} training documents, "
        f"K={d.get('k')}, budget {d.get('budget_tokens', 0):,} tokens "
        f"({results['config']['passes']:g} passes, {d.get('steps')} steps), "
        f"{results.get('model', {}).get('parameters', 0):,}-parameter model. "
        f"Unigram baseline: macro {uni.get('macro_cluster', float('nan')):.3f}, "
        f"micro {uni.get('micro', float('nan')):.3f}. Status: {results.get('status')} "
        f"({results.get('progress', {}).get('finished_runs')}/{results.get('progress', {}).get('total_runs')} runs).",
        "",
        "| strategy | runs | macro (clusters) | Δ macro vs random (wins) | macro (domains) | micro | "
        "Δ micro vs random | worst 10% clusters | small clusters held-out / train | eff. clusters | eff. domains |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def ms(e: dict[str, Any], m: str) -> str:
        return f"{e[m]['mean']:.3f} ± {e[m]['std']:.3f}" if m in e else "–"

    def delta(e: dict[str, Any], m: str) -> str:
        key = f"{m}_minus_random"
        if key not in e:
            return "–"
        return f"{e[key]['mean']:+.3f} ± {e[key]['std']:.3f} ({e[key]['wins']}/{e[key]['n']})"

    for name in sorted(stats, key=lambda s: (s != "random", s)):
        e = stats[name]
        small = (f"{e['small_heldout']['mean']:.3f} / {e['small_train']['mean']:.3f}"
                 if "small_heldout" in e else "–")
        eff_c = f"{e['effective_clusters']['mean']:.1f}" if "effective_clusters" in e else "–"
        eff_d = f"{e['effective_domains']['mean']:.2f}" if "effective_domains" in e else "–"
        lines.append(f"| {name} | {e['runs']} | {ms(e, 'heldout_macro_cluster')} | "
                     f"{delta(e, 'heldout_macro_cluster')} | {ms(e, 'heldout_macro_domain')} | "
                     f"{ms(e, 'heldout_micro')} | {delta(e, 'heldout_micro')} | {ms(e, 'heldout_worst10_cluster')} | "
                     f"{small} | {eff_c} | {eff_d} |")
    return "\n".join(lines) + "\n"
