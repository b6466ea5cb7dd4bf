"""Run directories of any size for the report's layout tests: a synthetic corpus and clustering written as stage
artifacts (no embedding, no k-means), and real plans built on them by the plan stage.

Cluster sizes follow a power law (a few large clusters, a long tail), texts are a few words of the cluster's own
vocabulary and of a shared one, and every document has a ground-truth group, so every section of the page is
filled. 10^5 documents take a few seconds to write.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from clusterclip.plan.config import PlanConfig
from clusterclip.plan.stage import plan_stage
from clusterclip.store import RunDir, save_npy
from tests.records import write_record

PLAN_MENU = (
    {"strategy": "clusterclip", "max_repeat": 2},
    {"strategy": "random"},
    {"strategy": "uniform"},
    {"strategy": "clusterclip", "max_repeat": 4},
    {"strategy": "temperature", "tau": 0.5},
    {"strategy": "clusterclip", "max_repeat": 2, "order": "spread"},
    {"strategy": "clusterclip", "max_repeat": 1},
    {"strategy": "temperature", "tau": 0.3},
    {"strategy": "random", "seed": 1},
    {"strategy": "clusterclip", "max_repeat": 8},
)
"""The settings of the first n plans of a run with n plans (at most 10): a mix of every strategy and cap."""


def power_law_sizes(n_docs: int, k: int) -> np.ndarray:
    """``k`` cluster sizes summing to ``n_docs``, each at least 1, proportional to 1/rank (largest first)."""
    raw = 1.0 / np.arange(1, k + 1)
    sizes = np.floor(raw / raw.sum() * (n_docs - k)).astype(np.int64) + 1
    sizes[0] += n_docs - int(sizes.sum())
    return sizes


def _texts(labels: np.ndarray, rng: np.random.Generator) -> list[str]:
    """Eight words of each document's cluster vocabulary and four shared ones."""
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    k = int(labels.max()) + 1
    stems = [f"{letters[c // 676 % 26]}{letters[c // 26 % 26]}{letters[c % 26]}" for c in range(k)]
    vocab = np.array([[f"{s}{letters[j]}term" for j in range(8)] for s in stems])
    shared = np.array(["the", "data", "result", "value", "people", "time", "report", "model"])
    own = vocab[labels[:, None], rng.integers(0, 8, (len(labels), 8))]
    common = shared[rng.integers(0, len(shared), (len(labels), 4))]
    return [" ".join(words) for words in np.concatenate([own, common], axis=1).tolist()]


def write_sized_run(root: Path, n_docs: int, k: int, n_plans: int, n_groups: int = 6, seed: int = 0,
                    parts: int = 2) -> Path:
    """A finished run of ``n_docs`` documents in ``k`` clusters with ``n_plans`` plans (see :data:`PLAN_MENU`)."""
    rng = np.random.default_rng(seed)
    sizes = power_law_sizes(n_docs, k)
    labels = np.repeat(np.arange(k, dtype=np.int32), sizes)
    rng.shuffle(labels)
    texts = _texts(labels, rng)
    names = np.array([f"group-{g:03d}" for g in range(n_groups)])
    noisy = rng.random(n_docs) < 0.1
    groups = names[np.where(noisy, rng.integers(0, n_groups, n_docs), labels % n_groups)]
    tokens = np.full(n_docs, 12, dtype=np.int64)
    bounds = np.linspace(0, n_docs, parts + 1).astype(int)
    files = []
    (root / "corpus").mkdir(parents=True, exist_ok=True)
    for p in range(parts):
        lo, hi = bounds[p], bounds[p + 1]
        files.append(f"corpus/part-{p:05d}.parquet")
        pq.write_table(pa.table({
            "index": pa.array(np.arange(lo, hi), pa.int64()),
            "id": pa.array([f"doc-{i}" for i in range(lo, hi)], pa.string()),
            "text": pa.array(texts[lo:hi], pa.string()),
            "n_tokens": pa.array(tokens[lo:hi], pa.int64()),
            "group": pa.array(groups[lo:hi].tolist(), pa.string()),
        }), root / files[-1])
    save_npy(root / "tokens.npy", tokens)
    run = RunDir(root)
    source = str(root.resolve().parent / f"synthetic-{n_docs}.jsonl")
    write_record(run, "corpus", {"inputs": [source]}, "synthetic", [*files, "tokens.npy"], 1.0,
                 count=n_docs, tokens=int(tokens.sum()))
    write_record(run, "embed", {"embedder": {"name": "hashing", "dim": 16}}, run.output_hash("corpus"), [], 1.0,
                 embedder="hashing", model="hashing-16", dim=16, count=n_docs)
    centroids = rng.normal(size=(k, 16)).astype(np.float32)
    save_npy(root / "centroids.npy", centroids / np.linalg.norm(centroids, axis=1, keepdims=True))
    save_npy(root / "labels.npy", labels)
    save_npy(root / "scores.npy", rng.uniform(0.2, 0.95, n_docs).astype(np.float32))
    save_npy(root / "sizes.npy", sizes)
    write_record(run, "cluster", {"k": k, "seed": 0}, run.output_hash("embed"),
                 ["centroids.npy", "labels.npy", "scores.npy", "sizes.npy"], 1.0, k=k, objective=0.5,
                 sample_size=n_docs)
    for options in PLAN_MENU[:n_plans]:
        plan_stage(run, PlanConfig(**options))
    return root
