"""export_plan: the planned stream as JSONL / Parquet shards."""

from __future__ import annotations

import json
import logging

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from clusterclip.errors import ClusterClipError
from clusterclip.export.stage import export_plan
from clusterclip.plan import PlanConfig
from clusterclip.plan.stage import plan_stage
from clusterclip.store import RunDir, atomic_path, save_npy
from tests.records import write_record


def _run(tmp_path, n=50, parts=2, budget=130, pad=""):
    """A run of ``n`` documents; ``pad``: text appended to each document, or a function of its index."""
    run = RunDir(tmp_path / "run")
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, n).astype(np.int32)
    bounds = np.linspace(0, n, parts + 1).astype(int)
    rels = []
    tail = pad if callable(pad) else (lambda i: pad)
    for p in range(parts):
        idx = np.arange(bounds[p], bounds[p + 1])
        table = pa.table({"index": pa.array(idx, pa.int64()), "id": [f"f.jsonl:{i}" for i in idx],
                          "text": [f"text of doc {i} ünï{tail(i)}" for i in idx],
                          "n_tokens": pa.array(idx + 1, pa.int64()), "group": pa.nulls(idx.size, pa.string())})
        rel = f"corpus/part-{p:05d}.parquet"
        with atomic_path(run.path(rel)) as tmp:
            pq.write_table(table, tmp)
        rels.append(rel)
    save_npy(run.path("tokens.npy"), np.arange(1, n + 1, dtype=np.int64))
    write_record(run, "corpus", {}, "c", [*rels, "tokens.npy"], 0.0)
    save_npy(run.path("labels.npy"), labels)
    write_record(run, "cluster", {}, "x", ["labels.npy"], 0.0)
    cfg = PlanConfig(budget=budget, seed=4)
    plan_stage(run, cfg)
    return run, cfg, labels


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_export_writes_the_planned_stream(tmp_path, fmt):
    run, cfg, labels = _run(tmp_path)
    plan = np.load(run.path("plans", cfg.name(), "plan.npy"))
    out = tmp_path / "export"
    shards = export_plan(run, cfg.name(), out, fmt=fmt, shard_size=40)
    assert [p.name for p in shards] == [f"part-{i:05d}.{fmt}" for i in range(4)]
    if fmt == "jsonl":
        rows = [json.loads(line) for p in shards for line in p.read_text(encoding="utf-8").splitlines()]
    else:
        rows = [r for p in shards for r in pq.read_table(p).to_pylist()]
    assert [r["index"] for r in rows] == plan.tolist()
    assert all(r["text"] == f"text of doc {r['index']} ünï" and r["id"] == f"f.jsonl:{r['index']}" for r in rows)
    assert [r["cluster"] for r in rows] == labels[plan].tolist()
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["rows"] == 130 and manifest["files"] == [p.name for p in shards]
    assert manifest["identity"]["plan"] == cfg.name() and manifest["identity"]["format"] == fmt
    assert not (out / ".partial").exists()


def test_reexport_removes_stale_shards_and_defaults_to_only_plan(tmp_path):
    run, cfg, _ = _run(tmp_path)
    out = tmp_path / "export"
    export_plan(run, cfg.name(), out, shard_size=10)
    assert len(list(out.glob("part-*.jsonl"))) == 13
    export_plan(run.root, None, out, shard_size=100)
    assert sorted(p.name for p in out.glob("part-*.jsonl")) == ["part-00000.jsonl", "part-00001.jsonl"]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_export_in_buckets_when_the_corpus_exceeds_the_memory_limit(tmp_path, fmt):
    """3 MiB of text with a 1 MiB limit: the corpus is read once, into buckets of plan positions, and the
    output is unchanged; the buckets' scratch folder is gone afterwards."""
    run, cfg, _ = _run(tmp_path, n=600, parts=3, budget=1800, pad=" " + "lorem ipsum " * 430)
    whole = export_plan(run, cfg.name(), tmp_path / "whole", fmt=fmt, shard_size=64)
    bucketed = export_plan(run, cfg.name(), tmp_path / "bucketed", fmt=fmt, shard_size=64, memory_mb=1)
    assert [p.read_bytes() for p in bucketed] == [p.read_bytes() for p in whole]
    records = [json.loads((tmp_path / d / "export.json").read_text()) for d in ("whole", "bucketed")]
    assert [r["corpus_reads"] for r in records] == [1, 1]
    assert records[0]["buckets"] == 0 and records[1]["buckets"] >= 5
    assert not any(p.name.startswith(".") and p.name != ".lock" for p in (tmp_path / "bucketed").iterdir())


def test_a_batch_larger_than_the_memory_limit_is_named_with_a_shard_size_that_fits(tmp_path, caplog):
    run, cfg, _ = _run(tmp_path, n=600, parts=3, budget=1800, pad=" " + "lorem ipsum " * 430)
    with caplog.at_level(logging.WARNING, logger="clusterclip.export.stage"):
        export_plan(run, cfg.name(), tmp_path / "small", shard_size=64)
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger="clusterclip.export.stage"):
        export_plan(run, cfg.name(), tmp_path / "large", shard_size=1000, memory_mb=1)
    (record,) = caplog.records
    fits = int(record.getMessage().rsplit("--shard-size ", 1)[1].split()[0].replace(",", ""))
    assert "more than --memory-mb 1" in record.getMessage() and 1 <= fits < 1000
    assert (tmp_path / "large" / "export.json").exists()


def test_export_errors(tmp_path):
    run, cfg, _ = _run(tmp_path)
    with pytest.raises(ClusterClipError, match="must be one of"):
        export_plan(run, cfg.name(), tmp_path / "o", fmt="csv")
    with pytest.raises(ClusterClipError, match="shard_size"):
        export_plan(run, cfg.name(), tmp_path / "o", shard_size=0)
    with pytest.raises(ClusterClipError, match="memory_mb"):
        export_plan(run, cfg.name(), tmp_path / "o", memory_mb=0)
    with pytest.raises(ClusterClipError, match="no finished plan"):
        export_plan(run, "missing", tmp_path / "o")


def test_export_refuses_a_corpus_out_of_index_order(tmp_path):
    run, cfg, _ = _run(tmp_path)
    part = run.path("corpus/part-00001.parquet")
    table = pq.read_table(part)
    swapped = table.set_column(0, "index", pa.array(table.column("index").to_numpy()[::-1]))
    with atomic_path(part) as tmp:
        pq.write_table(swapped, tmp)
    with pytest.raises(ClusterClipError, match="checksum does not match"):
        export_plan(run, cfg.name(), tmp_path / "o")
    write_record(run, "corpus", {}, "c", list(run.record("corpus")["artifacts"]), 0.0)
    with pytest.raises(ClusterClipError, match="is stale"):
        export_plan(run, cfg.name(), tmp_path / "o")
    plan_stage(run, cfg)
    with pytest.raises(ClusterClipError, match="not in index order"):
        export_plan(run, cfg.name(), tmp_path / "o")
