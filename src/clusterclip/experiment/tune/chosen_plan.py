"""The chosen plan for the whole corpus: an ordinary plan of the run directory, with its ``clusterclip plan``
command."""

from __future__ import annotations

import math
import os
import shlex
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.cluster.config import ClusterConfig
from clusterclip.contract.cluster import CENTROIDS, LABELS
from clusterclip.contract.corpus import TOKENS
from clusterclip.contract.experiment import TUNE_DIR
from clusterclip.contract.plan import PLANS_DIR, plan_stage_name
from clusterclip.contract.tune_results import TuneResults
from clusterclip.experiment.commands import experiment_argv
from clusterclip.experiment.config import ExperimentConfig
from clusterclip.experiment.prepare import pipeline_stages, source_config
from clusterclip.experiment.spec_grammar import PLAN, item_of
from clusterclip.experiment.specs import plan_config
from clusterclip.experiment.stats import MIN_PAIRS
from clusterclip.experiment.tune.groups import ClusterView, assign, concrete_spec
from clusterclip.experiment.tune.runners import centroids_in, split_root
from clusterclip.plan.stage import plan_stage
from clusterclip.store import RunDir, load_npy, save_json


def write_chosen_plan(inputs: Sequence[str | os.PathLike[str]], run_dir: Path, cfg: ExperimentConfig,
                      spec: dict[str, Any], seed: int, progress: bool = False,
                      weight_search: dict[str, Any] | None = None) -> dict[str, Any]:
    """The whole corpus through corpus, embed and cluster stages (K, embedder and fields of ``cfg``: those its
    stratified candidates read, kept or scored as for the proxies), and
    the chosen plan over it: an ordinary plan for a budget of ``cfg.passes`` passes over its tokens. Returns
    its name, settings, command (as :meth:`RunDir.rebuild_command <clusterclip.store.RunDir.rebuild_command>`
    renders every other) and scalar statistics. A weight candidate (``weight_search`` holds its groups)
    becomes the whole corpus's cluster weights, written to ``RUN/tune/chosen_weights.json``."""
    run = RunDir(run_dir)
    pipeline_stages(run, inputs, source_config(cfg), progress, cfg.embedder, ClusterConfig(k=cfg.k, seed=seed))
    token_counts = load_npy(run.path(TOKENS))
    tokens = int(token_counts.sum())
    weights_file = None
    if "group_weights" in spec and weight_search is not None:
        labels = np.asarray(load_npy(run.path(LABELS)))
        k = len(load_npy(run.path(CENTROIDS), mmap=True))
        # the groups live in the reference split's embedding space (a fitted embedder differs per run)
        reference = RunDir(split_root(run_dir / TUNE_DIR, int(weight_search["space"]["reference_split"])))
        view = ClusterView(centroids_in(reference, run, labels, k),
                           np.bincount(labels, weights=token_counts, minlength=k), round(cfg.passes * tokens))
        spec = concrete_spec(spec, view, assign(view, np.asarray(weight_search["space"]["group_centroids"])))
        weights_file = run_dir / TUNE_DIR / "chosen_weights.json"
        save_json(weights_file, {str(c): w for c, w in spec["weights"]})
    pc = plan_config(spec, round(cfg.passes * tokens), seed)
    record = plan_stage(run, pc)
    command = run.rebuild_command(plan_stage_name(pc.name()), record.to_json())
    if weights_file is not None:  # the plan's command names WEIGHTS_FILE for the weights it does not keep
        quoted = shlex.quote(str(weights_file))
        command = command.replace("WEIGHTS_FILE", quoted) if "WEIGHTS_FILE" in command else \
            f"{command} --weights {quoted}"
    return {"name": pc.name(), "config": pc.to_json(), "command": command,
            "weights_file": None if weights_file is None else str(weights_file),
            "stats": {k: v for k, v in record.stats.items() if isinstance(v, (int, float, str))}}


def check_command(inputs: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], cfg: ExperimentConfig,
                  seen: Sequence[int], results: dict[str, Any]) -> str | None:
    """The ``clusterclip experiment`` command that checks the choice on split seeds the search never saw (after
    ``seen``; enough of them for ``MIN_PAIRS`` pairs with the search's seeds), against random, with the same
    proxies: a grid candidate as its own item, a weight candidate as ``plan:`` of its plan for the whole corpus.
    When random was chosen, the best feasible grid candidate is checked instead; None when there is nothing to
    check (random chosen and no grid candidate)."""
    res = TuneResults.from_json(results, "the tune results")
    winner, specs = res.winner, res.specs()
    item = None
    if winner and winner != "random":
        item = item_of(specs[winner])
        if item is None and res.plan:
            item = f"{PLAN}:{Path(out) / PLANS_DIR / res.plan['name']}"
    else:
        scored = {n: c["assessment"] for n, c in (res.candidates or {}).items()
                  if n != "random" and c.get("assessment") and c["assessment"]["feasible"] and item_of(specs[n])}
        best = min(scored, key=lambda n: scored[n]["objective"]["mean"], default=None)
        item = None if best is None else item_of(specs[best])
    if item is None:
        return None
    start = max([*cfg.splits(), *seen]) + 1
    unseen = tuple(range(start, start + math.ceil(MIN_PAIRS / len(cfg.seeds))))
    check = replace(cfg, strategies=("random", item), split_seeds=unseen)
    return shlex.join(experiment_argv(inputs, f"{out}-check", check))
