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
from pathlib import Path

import numpy as np
import pytest

from clusterclip.corpus.stage import corpus_stage
from clusterclip.store import RunDir

BOUND_MIB = 40
SHARD = 3000
MEMWATCH = f"import sys\nsys.path.insert(0, {str(Path(__file__).resolve().parents[1] / 'benchmarks')!r})\n"
"""Lets a measuring script (run with ``python -c``) import ``memwatch`` from the benchmarks folder."""

MEASURE = MEMWATCH + """
import json, sys
from memwatch import AnonPeak
watch = AnonPeak()
import clusterclip.cluster.stage
from clusterclip.cluster.config import ClusterConfig
from clusterclip.cluster.stage import cluster_stage
from clusterclip.embed.config import EmbedConfig
from clusterclip.embed.stage import embed_stage
from clusterclip.store import RunDir
run = RunDir(sys.argv[1])
embed_stage(run, EmbedConfig(sys.argv[3], shard_size=int(sys.argv[2]), extra=json.loads(sys.argv[4])), progress=False)
clusterclip.cluster.stage.ASSIGN_BATCH = int(sys.argv[2])
cluster_stage(run, ClusterConfig(k=8, points_per_centroid=64), progress=False)
print(json.dumps({"peak_anon_kib": watch.read()}))
"""


def write_corpus(path, n: int) -> None:
    rng = np.random.default_rng(n)
    vocab = np.array([f"w{i}" for i in range(5000)])
    with open(path, "w") as fh:
        for i in range(n):
            fh.write(json.dumps({"text": " ".join(vocab[rng.integers(0, 5000, 400)]), "id": i}) + "\n")


def peak_mib(tmp_path, n: int, embedder: str = "hashing", **options) -> float:
    corpus = tmp_path / f"c{n}.jsonl"
    if not corpus.exists():
        write_corpus(corpus, n)
    run = RunDir(tmp_path / f"run{n}-{embedder}")
    corpus_stage(run, [corpus], progress=False)
    proc = subprocess.run([sys.executable, "-c", MEASURE, str(run.root), str(SHARD), embedder, json.dumps(options)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out["peak_anon_kib"] / 1024


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_corpus(tmp_path):
    small = peak_mib(tmp_path, SHARD)
    large = peak_mib(tmp_path, 10 * SHARD)
    assert large - small < BOUND_MIB, f"peak anonymous memory grew {large - small:.0f} MiB ({small:.0f} -> {large:.0f})"


@pytest.mark.slow
def test_lsa_peak_memory_is_bounded_by_its_fit_sample(tmp_path):
    """``lsa`` holds its fit sample (``sample_size`` documents) besides one shard: with the sample no larger
    than the small corpus, ten times the corpus must not need more memory."""
    small = peak_mib(tmp_path, SHARD, "lsa", sample_size=SHARD)
    large = peak_mib(tmp_path, 10 * SHARD, "lsa", sample_size=SHARD)
    assert large - small < BOUND_MIB, f"peak anonymous memory grew {large - small:.0f} MiB ({small:.0f} -> {large:.0f})"


READ_PARQUET = MEMWATCH + """
import json, sys
from clusterclip.corpus.records import ReadOptions, ReadStats
from clusterclip.corpus.inputs import expand_inputs
from clusterclip.corpus.reading import iter_documents
from memwatch import AnonPeak
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


ADD = MEMWATCH + """
import json, sys
from memwatch import AnonPeak
watch = AnonPeak()
from clusterclip.add.workflow import add_documents
from clusterclip.store import RunDir
run = RunDir(sys.argv[1])
base = watch.read()
with run.lock():
    add_documents(run, [sys.argv[2]], progress=False)
print(json.dumps({"grew_kib": watch.read() - base}))
"""
ADD_BOUND_MIB = 8


def short_corpus(path, n: int, prefix: str) -> None:
    rng = np.random.default_rng(n)
    vocab = np.array([f"w{i}" for i in range(2000)])
    words = vocab[rng.integers(0, 2000, (n, 8))]
    with open(path, "w") as fh:
        fh.writelines(json.dumps({"text": " ".join(w), "id": f"{prefix}{i:07d}"}) + "\n" for i, w in enumerate(words))


def add_growth_mib(tmp_path, n_old: int, new) -> float:
    """Growth of peak anonymous memory while ``clusterclip add`` appends ``new`` to a run of ``n_old`` documents."""
    from clusterclip.cluster.config import ClusterConfig
    from clusterclip.cluster.stage import cluster_stage
    from clusterclip.corpus.config import CorpusConfig
    from clusterclip.embed.config import EmbedConfig
    from clusterclip.embed.stage import embed_stage

    corpus = tmp_path / f"old{n_old}.jsonl"
    short_corpus(corpus, n_old, "old-")
    run = RunDir(tmp_path / f"run{n_old}")
    corpus_stage(run, [corpus], CorpusConfig(id_field="id"), progress=False)
    embed_stage(run, EmbedConfig(embedder="hashing", shard_size=65_536, extra={'dim': 16}), progress=False)
    cluster_stage(run, ClusterConfig(k=8, points_per_centroid=64), progress=False)
    proc = subprocess.run([sys.executable, "-c", ADD, str(run.root), str(new)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])["grew_kib"] / 1024


@pytest.mark.slow
def test_add_memory_is_bounded_by_the_new_documents(tmp_path):
    """Adding the same 5,000 documents to a run of 20,000 and to one of 200,000: old ids, tokens, labels and
    scores are streamed, so peak memory barely differs (holding the old ids alone would take ~14 MiB more,
    the old labels, scores and tokens ~3 MiB)."""
    new = tmp_path / "new.jsonl"
    short_corpus(new, 5000, "new-")
    small = add_growth_mib(tmp_path, 20_000, new)
    large = add_growth_mib(tmp_path, 200_000, new)
    assert large - small < ADD_BOUND_MIB, f"add grew memory by {small:.1f} MiB, then {large:.1f} MiB for 10x the run"


EXPORT = MEMWATCH + """
import json, sys
from memwatch import AnonPeak
watch = AnonPeak()
from clusterclip.export.stage import export_plan
from clusterclip.embed.config import EmbedConfig
from clusterclip.embed.config import EmbedConfig
export_plan(sys.argv[1], None, sys.argv[2], fmt="parquet", shard_size=500, memory_mb=int(sys.argv[3]))
print(json.dumps({"peak_anon_kib": watch.read()}))
"""


def export_peak_mib(tmp_path, n: int, memory_mb: int) -> tuple[float, dict]:
    from clusterclip.cli.main import main

    corpus = tmp_path / f"e{n}.jsonl"
    write_corpus(corpus, n)
    run = tmp_path / f"export-run{n}"
    assert main(["embed", str(corpus), "--out", str(run), "--embedder", "hashing", "-q"]) == 0
    assert main(["cluster", str(run), "--k", "4", "-q"]) == 0
    assert main(["plan", str(run), "--strategy", "random", "-q"]) == 0
    proc = subprocess.run([sys.executable, "-c", EXPORT, str(run), str(tmp_path / f"out{n}"), str(memory_mb)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / f"out{n}" / "export.json").read_text())
    return json.loads(proc.stdout.strip().splitlines()[-1])["peak_anon_kib"] / 1024, record


@pytest.mark.slow
def test_export_memory_is_bounded_by_memory_mb(tmp_path):
    """A corpus ten times larger (~7 -> ~66 MiB of text) under the same --memory-mb 128: the text and its copies
    stay within the limit (the large corpus, under the limit but not with its copies, goes through buckets), so
    the peak grows by less than the limit plus 32 MiB (row groups, batches of 500 rows, the readers' buffers)."""
    small, small_rec = export_peak_mib(tmp_path, 3000, 128)
    large, large_rec = export_peak_mib(tmp_path, 30000, 128)
    assert large - small < 128 + 32, f"peak anonymous memory grew {large - small:.0f} MiB ({small:.0f} -> {large:.0f})"
    assert small_rec["buckets"] == 0 and large_rec["buckets"] >= 2
