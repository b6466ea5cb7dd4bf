"""Embedding and assignment stream: peak memory does not grow with the corpus.

The embed and cluster stages run in fresh processes on a corpus of one shard and on one ten times
larger (same shard size); the larger run's peak RSS may exceed the smaller one's by at most
``BOUND_MIB``, far less than the larger corpus' text (~70 MiB) or its float32 embeddings would take.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from clusterclip.corpus import corpus_stage
from clusterclip.rundir import RunDir

BOUND_MIB = 40
SHARD = 3000

MEASURE = """
import json, resource, sys
import clusterclip.cluster
from clusterclip.cluster import ClusterConfig, cluster_stage
from clusterclip.embed import embed_stage
from clusterclip.rundir import RunDir
run = RunDir(sys.argv[1])
embed_stage(run, "hashing", shard_size=int(sys.argv[2]), progress=False)
embed_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
clusterclip.cluster.ASSIGN_BATCH = int(sys.argv[2])
cluster_stage(run, ClusterConfig(k=8, points_per_centroid=64), progress=False)
print(json.dumps({"embed_kib": embed_kib, "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def write_corpus(path, n: int) -> None:
    rng = np.random.default_rng(n)
    vocab = np.array([f"w{i}" for i in range(5000)])
    with open(path, "w") as fh:
        for i in range(n):
            fh.write(json.dumps({"text": " ".join(vocab[rng.integers(0, 5000, 400)]), "id": i}) + "\n")


def peak_mib(tmp_path, n: int) -> float:
    corpus = tmp_path / f"c{n}.jsonl"
    write_corpus(corpus, n)
    run = RunDir(tmp_path / f"run{n}")
    corpus_stage(run, [corpus], progress=False)
    proc = subprocess.run([sys.executable, "-c", MEASURE, str(run.root), str(SHARD)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out["peak_kib"] / 1024


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_corpus(tmp_path):
    small = peak_mib(tmp_path, SHARD)
    large = peak_mib(tmp_path, 10 * SHARD)
    assert large - small < BOUND_MIB, f"peak RSS grew {large - small:.0f} MiB ({small:.0f} -> {large:.0f})"
