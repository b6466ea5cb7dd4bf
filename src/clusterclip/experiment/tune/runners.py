"""Proxy runners: what trains and scores one candidate on one (held-out split, seed) pair.

:class:`TrainingRunner` trains the experiment's model by the experiment's own steps
(:func:`~clusterclip.experiment.splits.prepare_split`, :func:`~clusterclip.experiment.steps.proxy_run`);
tests pass runners with known losses instead.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from clusterclip.contract.cluster import CENTROIDS
from clusterclip.contract.corpus import read_column
from clusterclip.errors import ClusterClipError
from clusterclip.experiment.by_id import run_fields
from clusterclip.experiment.config import ExperimentConfig
from clusterclip.experiment.prepare import input_fingerprint
from clusterclip.experiment.tune.groups import ClusterView
from clusterclip.store import RunDir, load_npy

KEPT = ("heldout_macro_cluster", "heldout_macro_domain", "heldout_micro", "small_heldout", "small_train",
        "small_gap", "effective_clusters", "seconds")
"""What a proxy run's record keeps of the experiment's run record."""


class ProxyRunner(Protocol):
    """Trains and scores one candidate on one (split, seed) pair.

    With ``jobs`` > 1 the runner is sent to worker processes, so it must pickle; a runner with a
    ``portable(split)`` method sends what that returns instead (a smaller callable for one split).
    """

    def identity(self) -> dict[str, Any]:
        """Everything a run's numbers depend on besides (candidate, split, seed): the inputs of its stage."""
        ...

    def __call__(self, spec: dict[str, Any], split: int, seed: int) -> dict[str, Any]:
        """The run's metrics (at least ``KEPT``'s losses)."""
        ...

    # Optional: ``plan_identity(spec, split, seed) -> str | None`` (runs of one plan are shared) and
    # ``cluster_view(split, space) -> ClusterView`` (needed by ``--search weights``; ``space``: the split whose
    # embedding space the centroids are given in).


class TrainingRunner:
    """Real proxy runs: every split is prepared once, on first use, under ``tune_dir/splits/<seed>/``."""

    def __init__(self, inputs: Sequence[str | os.PathLike[str]], tune_dir: Path, cfg: ExperimentConfig,
                 progress: bool = False) -> None:
        self.inputs, self.tune_dir, self.cfg, self.progress = list(inputs), tune_dir, cfg, progress
        self._splits: dict[int, Any] = {}

    def identity(self) -> dict[str, Any]:
        return {"experiment": self.cfg.results_hash(), "inputs": input_fingerprint(self.inputs)}

    def portable(self, split: int) -> SplitRunner:
        """A picklable runner for one split, prepared here (once) so that workers never write to it."""
        from clusterclip.experiment.splits import prepare_split
        from clusterclip.experiment.steps import use_torch

        if split not in self._splits:
            use_torch(self.cfg)
            cfg = replace(self.cfg, split_seeds=(split,))
            data, _ = prepare_split(self.inputs, self.tune_dir, cfg, split, self.progress,
                                    root=split_root(self.tune_dir, split))
            fields = self.cfg.input_fields()
            if fields:  # a field the input lacks is refused before any run trains, not at the first that reads it
                run_fields(RunDir(data.prep.source), fields, read_column(data.prep.run, "id"))
            self._splits[split] = SplitRunner(data, self.cfg)
        return self._splits[split]

    def __call__(self, spec: dict[str, Any], split: int, seed: int) -> dict[str, Any]:
        return self.portable(split)(spec, split, seed)

    def cluster_view(self, split: int, space: int | None = None) -> ClusterView:
        """The split's centroids, tokens per cluster and token budget (for the weight search). With ``space``
        (another split), the centroids are in that split's embedding space: its fitted embedder (``lsa``,
        ``static-vocab`` are fitted per split, so their coordinates differ) embeds this split's documents."""
        d = self.portable(split).data
        k = int(d.prep.data["k"])
        if space is None or space == split:
            centroids = np.asarray(load_npy(d.prep.run.path(CENTROIDS)))
        else:
            centroids = centroids_in(self.portable(space).data.prep.run, d.prep.run, d.prep.labels, k)
        tokens = np.bincount(d.prep.labels, weights=d.tok.train.lengths, minlength=k)
        return ClusterView(centroids, tokens, int(d.setup.budget))

    def plan_identity(self, spec: dict[str, Any], split: int, seed: int) -> str:
        """The identity of the plan the run would train on (two candidates with one plan train once): the
        experiment's own plan of the spec, with the per-document fields a stratified one reads."""
        from clusterclip.experiment.steps import plan_proxy

        d = self.portable(split).data
        return plan_proxy(spec, seed, d.prep, d.tok, d.setup).identity


@dataclass
class SplitRunner:
    """Proxy runs on one prepared split: what a worker process receives."""

    data: Any
    cfg: ExperimentConfig

    def __call__(self, spec: dict[str, Any], split: int, seed: int) -> dict[str, Any]:
        from clusterclip.experiment.steps import proxy_run, use_torch

        use_torch(self.cfg)
        rec = proxy_run(self.data, spec, seed, self.cfg.device)
        return {k: rec.get(k) for k in KEPT}


def split_root(tune_dir: Path, split: int) -> Path:
    """The run directory of proxy split ``split`` (its corpus, fitted embedder, clusters)."""
    return tune_dir / "splits" / str(split)


def centroids_in(reference: RunDir, run: RunDir, labels: np.ndarray, k: int, batch_rows: int = 4096) -> np.ndarray:
    """The (k, d) unit centroids of ``run``'s clusters (``labels``, corpus order) in ``reference``'s embedding
    space: ``run``'s documents embedded by ``reference``'s embedder, averaged per cluster, normalised. An empty
    cluster's row is zero."""
    from clusterclip.contract.corpus import iter_corpus
    from clusterclip.embed.load import run_embedder

    emb = run_embedder(reference)
    x = np.concatenate([emb.encode(b.column(0).to_pylist()) for b in iter_corpus(run, ("text",), batch_rows)])
    if x.shape[0] != labels.shape[0]:
        raise ClusterClipError(f"{run.root}: {x.shape[0]:,} documents for {labels.shape[0]:,} labels")
    order = np.argsort(labels, kind="stable")
    counts = np.bincount(labels, minlength=k)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    sums = np.zeros((k, x.shape[1]))
    nonempty = counts > 0
    sums[nonempty] = np.add.reduceat(x[order].astype(np.float64), starts[nonempty], axis=0)
    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    return np.divide(sums, norms, out=np.zeros_like(sums), where=norms > 0)
