"""Embedding and assignment stream: peak memory does not grow with the corpus.

The embed and cluster stages run in fresh processes on a corpus of one shard and on one ten times
larger (same shard size); the larger run's peak anonymous memory (``RssAnon``: what the process
allocates; memory-mapped shards are file pages the kernel can drop, so they are not counted) may exceed
the smaller one's by at most ``BOUND_MIB``, far less than the larger corpus' text (~70 MiB) or its
float32 embeddings would take. Reading a Parquet input streams too: peak memory stays far below the
file's size.
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
import json, sys
from clusterclip.memwatch import AnonPeak
watch = AnonPeak()
import clusterclip.cluster
from clusterclip.cluster import ClusterConfig, cluster_stage
from clusterclip.embed import embed_stage
from clusterclip.rundir import RunDir
run = RunDir(sys.argv[1])
embed_stage(run, "hashing", shard_size=int(sys.argv[2]), progress=False)
clusterclip.cluster.ASSIGN_BATCH = int(sys.argv[2])
cluster_stage(run, ClusterConfig(k=8, points_per_centroid=64), progress=False)
print(json.dumps({"peak_anon_kib": watch.read()}))
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
    return out["peak_anon_kib"] / 1024


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_corpus(tmp_path):
    small = peak_mib(tmp_path, SHARD)
    large = peak_mib(tmp_path, 10 * SHARD)
    assert large - small < BOUND_MIB, f"peak anonymous memory grew {large - small:.0f} MiB ({small:.0f} -> {large:.0f})"


READ_PARQUET = """
import json, sys
from clusterclip.corpus import ReadOptions, ReadStats, expand_inputs, iter_documents
from clusterclip.memwatch import AnonPeak
watch = AnonPeak()
base = watch.read()
n = sum(len(b) for b in iter_documents(expand_inputs([sys.argv[1]]), ReadOptions(group_field=None), ReadStats()))
print(json.dumps({"docs": n, "grew_kib": watch.read() - base}))
"""


def parquet_growth_mib(tmp_path, row_groups: int) -> float:
    """Growth of peak anonymous memory while the corpus reader reads a Parquet file of 2,000-row groups."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / f"big{row_groups}.parquet"
    rng = np.random.default_rng(0)
    vocab = np.array([f"w{i}" for i in range(5000)])
    with pq.ParquetWriter(path, pa.schema([("text", pa.string())])) as writer:
        for _ in range(row_groups):
            texts = [" ".join(vocab[rng.integers(0, 5000, 400)]) for _ in range(2000)]
            writer.write_table(pa.table({"text": texts}), row_group_size=2000)
    proc = subprocess.run([sys.executable, "-c", READ_PARQUET, str(path)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["docs"] == 2000 * row_groups
    return out["grew_kib"] / 1024


@pytest.mark.slow
def test_reading_a_parquet_input_streams(tmp_path):
    """A file three times larger (~160 MiB against ~53 MiB) must not need more memory: pyarrow's default
    pre-buffering would hold the whole file (it grew by about the file's size before the fix)."""
    small = parquet_growth_mib(tmp_path, 20)
    large = parquet_growth_mib(tmp_path, 60)
    assert large - small < BOUND_MIB, f"reading grew memory by {small:.0f} MiB, then {large:.0f} MiB for 3x the file"
