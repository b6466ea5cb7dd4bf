"""The experiment as a stage: prepare every held-out split, then train one proxy run per (split, strategy,
seed); the results file is rewritten after every proxy run.

Layout (``OUT`` is the run directory of the *training split*, a normal clusterclip run directory)::

    OUT/corpus.json, embeddings/, labels.npy, ...   pipeline stages on the training split
    OUT/experiment/source/            corpus stage on the full input (any supported format)
    OUT/experiment/data/train.jsonl   training split (id, text, domain), cut to max_words
    OUT/experiment/data/heldout.jsonl held-out split
    OUT/experiment/tokenizer.json     byte-level BPE trained on the training split
    OUT/experiment/results.json       every number, rewritten atomically after each proxy run
    OUT/experiment/results.md         the markdown table
    OUT/experiment/*.png              loss curves, per-domain bars, mixtures
    OUT/experiment/experiment.json    the stage record: settings, inputs, the files above with checksums

With several split seeds, the splits after the first live in ``OUT/experiment/splits/<seed>/`` (each a run
directory with its own ``experiment/data`` and tokenizer). Proxy runs are keyed ``<strategy>/<seed>`` on the
first split and ``<strategy>/<seed>/split-<split>`` on the others. ``OUT/experiment/`` is a run directory
whose one stage is the experiment (:data:`EXPERIMENT_STAGE`): a re-run with the same settings and inputs is
skipped; a killed or changed experiment keeps the finished proxy runs that still apply.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from clusterclip.contract.experiment import EXPERIMENT_STAGE, ExperimentRecord
from clusterclip.contract.experiment_results import RESULTS_VERSION, ExperimentResults
from clusterclip.experiment.commands import experiment_argv
from clusterclip.experiment.config import ExperimentConfig
from clusterclip.experiment.model import GPT
from clusterclip.experiment.prepare import input_fingerprint
from clusterclip.experiment.results import reusable_results, write_results
from clusterclip.experiment.spec_grammar import spec_id
from clusterclip.experiment.splits import EXPERIMENT_DIR, prepare_split
from clusterclip.experiment.steps import SplitData, proxy_run, use_torch
from clusterclip.stages import Built, Job, Stage, run_stage
from clusterclip.store import RunDir, config_hash

log = logging.getLogger(__name__)

EXPERIMENT_STAGE = EXPERIMENT_STAGE
"""The stage of ``OUT/experiment/``; its record is ``OUT/experiment/experiment.json``."""
RESULTS, TABLE = "results.json", "results.md"

OnRun = Callable[[str, dict[str, Any], int, int], None]
"""Called after every finished proxy run with its key, its record in ``results["runs"]``, proxy runs
finished, proxy runs asked for."""


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
    ``OUT/experiment/results.json`` after every proxy run (atomically) together with the markdown table
    and plots, and skips proxy runs already recorded there for the same configuration, so a killed
    experiment resumes where it stopped; a finished one with the same settings and inputs is not re-run.
    ``force`` re-runs it and discards results of a different configuration; ``progress`` shows the
    pipeline stages' progress bars; ``on_run`` is called after every finished proxy run (the command line
    prints a line). Returns the results dictionary.
    """
    cfg = config or ExperimentConfig()
    use_torch(cfg)
    exp = RunDir(Path(out) / EXPERIMENT_DIR)
    results: dict[str, Any] = {}

    def build(job: Job) -> Built:
        results.update(_train_all(inputs, out, cfg, force, progress, on_run))
        return Built([RESULTS, TABLE, *results.get("plots", [])])

    stage = Stage(EXPERIMENT_STAGE, cfg.recorded(), _inputs_hash(inputs, cfg), build,
                  command=experiment_argv(inputs, out, cfg), record=ExperimentRecord)
    run_stage(exp, stage, force)
    return results or ExperimentResults.read(exp.path(RESULTS)).to_json()


def _inputs_hash(inputs: Sequence[str | os.PathLike[str]], cfg: ExperimentConfig) -> str:
    """The input files, and what the files that strategy items name hold (a weights file, another run's clusters):
    a changed file makes the stage build again, which retrains the runs it changes."""
    read = [spec_id(s) for s in cfg.strategy_specs() if "weights" in s or "clusters" in s]
    return config_hash(input_fingerprint(inputs) if not read else [input_fingerprint(inputs), read])


def _train_all(inputs: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], cfg: ExperimentConfig,
               force: bool, progress: bool, on_run: OnRun | None) -> dict[str, Any]:
    """Prepare every split, then train the proxy runs the results do not hold yet; the results."""
    exp_dir = Path(out) / EXPERIMENT_DIR
    t_start = time.perf_counter()
    previous = reusable_results(exp_dir / RESULTS, cfg, force)
    splits: list[SplitData] = []
    for split in cfg.splits():
        data, previous = prepare_split(inputs, out, cfg, split, progress, previous, force)
        splits.append(data)
    results = _results_header(cfg, inputs, splits, previous)
    proxies = _proxies(cfg)
    wanted = [key for key, _, _, _ in proxies]
    by_split = {d.split: d for d in splits}
    for key, split, seed, spec in proxies:
        if key in results["runs"] and results["runs"][key].get("spec_id", spec_id(spec)) == spec_id(spec):
            continue
        t0 = time.perf_counter()
        d = by_split[split]
        log.info("experiment: %s seed %d split %d: %d steps (%d/%d)", spec["name"], seed, split, d.setup.steps,
                 _finished(results, wanted) + 1, len(wanted))
        results["runs"][key] = {**proxy_run(d, spec, seed, cfg.device, time.perf_counter() - t0),
                                "spec_id": spec_id(spec)}
        _write(results, wanted, exp_dir, t_start)
        if on_run is not None:
            on_run(key, results["runs"][key], _finished(results, wanted), len(wanted))
    results["status"] = "complete"
    _write(results, wanted, exp_dir, t_start)
    return results


def _proxies(cfg: ExperimentConfig) -> list[tuple[str, int, int, dict[str, Any]]]:
    """(key, split, seed, strategy) of every proxy run, split- then seed-major so that a partial result
    compares every strategy; the first split's keys are ``<strategy>/<seed>``, the others' add ``/split-<seed>``."""
    specs = cfg.strategy_specs()
    primary = cfg.splits()[0]
    return [(f"{spec['name']}/{seed}" + ("" if split == primary else f"/split-{split}"), split, seed, spec)
            for split in cfg.splits() for seed in cfg.seeds for spec in specs]


def _finished(results: dict[str, Any], wanted: list[str]) -> int:
    return sum(key in results["runs"] for key in wanted)


def _write(results: dict[str, Any], wanted: list[str], exp_dir: Path, t_start: float) -> None:
    results["progress"] = {"finished_runs": _finished(results, wanted), "total_runs": len(wanted)}
    write_results(results, exp_dir, time.perf_counter() - t_start)


def _results_header(cfg: ExperimentConfig, inputs: Sequence[str | os.PathLike[str]], splits: list[SplitData],
                    previous: ExperimentResults | None) -> dict[str, Any]:
    """The results file before this session's proxy runs: configuration, data (the first split's, and every
    split's sizes and hashes), model, baseline, reused proxy runs."""
    first = splits[0]
    prep, tok, setup = first.prep, first.tok, first.setup
    uni = setup.unigram
    return {
        "version": RESULTS_VERSION, "status": "running",
        "config": dataclasses.asdict(cfg), "config_hash": cfg.results_hash(), "data_hash": first.data_hash,
        "split_hash": prep.split_hash, "inputs": [str(p) for p in inputs], "run_dir": str(prep.run.root),
        "started_at": previous.started_at if previous else time.strftime("%Y-%m-%dT%H:%M:%S%z"),
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
        "runs": dict(previous.runs if previous else {}),
    }
