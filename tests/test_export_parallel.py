"""The one-pass export in parallel: the plan partitioned on the driver, scatter and gather tasks in worker
processes or on Ray, and the same bytes whatever runs them."""

from __future__ import annotations

import itertools
import json
import operator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip.cli.main import main
from clusterclip.engines import ordered_map
from clusterclip.errors import ClusterClipError
from clusterclip.export import buckets
from clusterclip.export.stage import export_plan
from clusterclip.export.stream import PlanStream
from tests.test_export import _run
from tests.test_export_formats import _available, _content, _tokenizer


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=8), st.integers(0, 80), st.integers(1, 40),
       st.integers(1, 13), st.randoms(use_true_random=False))
def test_partition_spills_every_planned_copy_once_to_the_unit_of_its_row_group(sizes, draws, limit, chunk, rnd):
    import tempfile

    starts = np.concatenate([[0], np.cumsum(sizes)])
    groups = [buckets.RowGroup("p", g, int(a), int(b)) for g, (a, b) in enumerate(itertools.pairwise(starts))]
    order = np.array([rnd.randrange(int(starts[-1])) for _ in range(draws)], np.int64)
    with tempfile.TemporaryDirectory() as scratch:
        units = buckets.partition(order, groups, np.full(len(groups), 4.0), limit, Path(scratch), chunk)
        seen = []
        for u in units:
            pairs = np.fromfile(u.pairs, dtype=np.int64).reshape(-1, 2)
            assert pairs.size and np.all(np.diff(pairs[:, 1]) > 0), "positions increase within a unit"
            lo, hi = u.groups[0].start, u.groups[-1].stop
            assert np.all((pairs[:, 0] >= lo) & (pairs[:, 0] < hi))
            assert [g.group for g in u.groups] == list(range(u.groups[0].group, u.groups[-1].group + 1))
            seen.append(pairs)
    got = np.concatenate(seen) if seen else np.zeros((0, 2), np.int64)
    assert sorted(map(tuple, got.tolist())) == sorted(zip(order.tolist(), range(draws), strict=True))
    if draws and len(units) > 1:  # a unit past the first starts where the planned bytes passed a multiple of limit
        assert all(u.groups[0].group > 0 for u in units[1:])


def test_ordered_map_yields_in_call_order_and_raises_at_the_failing_calls_turn():
    calls = [(i, 2) for i in range(7)]
    assert list(ordered_map(pow, calls)) == [i * i for i in range(7)]
    assert list(ordered_map(pow, calls, workers=2, ahead=3)) == [i * i for i in range(7)]
    results = ordered_map(operator.truediv, [(4, 2), (1, 0), (9, 3)], workers=2)
    assert next(results) == 2
    with pytest.raises(ZeroDivisionError):
        next(results)


def _many_units(tmp_path: Path):
    """A run of 12 parts (one row group each) and a plan of several hundred draws."""
    return _run(tmp_path, n=240, parts=12, budget=700)


def _files(folder: Path) -> dict[str, bytes]:
    return {q.relative_to(folder).as_posix(): _content(q) for q in sorted(folder.rglob("*"))
            if q.is_file() and q.name not in ("export.json", ".lock")}


@pytest.mark.parametrize("fmt, tokenized", [("parquet", False), ("jsonl", False), ("megatron", True),
                                            ("parquet", True)])
def test_worker_processes_write_the_bytes_of_one_process(tmp_path, monkeypatch, fmt, tokenized):
    """Buckets of about 23 rows over 12 units: the scatter and gather tasks in 3 spawned processes (each
    loading the tokenizer itself) write exactly what one process writes, and what one window writes."""
    if not _available(fmt):
        pytest.skip(f"{fmt} library not installed")
    run, cfg, _ = _many_units(tmp_path)
    opts = {"fmt": fmt, "shard_size": 16, **({"tokenizer": _tokenizer(tmp_path), "append_eos": True,
                                             "seq_len": 7} if tokenized else {})}
    export_plan(run, cfg.name(), tmp_path / "window", **opts)
    monkeypatch.setattr(buckets, "BUCKET_BYTES", 700)
    monkeypatch.setattr(PlanStream, "bucketed", lambda self, memory_mb: True)
    export_plan(run, cfg.name(), tmp_path / "one", workers=1, **opts)
    export_plan(run, cfg.name(), tmp_path / "three", workers=3, **opts)
    records = [json.loads((tmp_path / d / "export.json").read_text()) for d in ("one", "three")]
    assert records[0]["buckets"] > 5 and records[0]["buckets"] == records[1]["buckets"]
    assert records[0]["config_hash"] == records[1]["config_hash"] and "workers" not in records[0]["config"]
    window = _files(tmp_path / "window")
    assert window and _files(tmp_path / "one") == window and _files(tmp_path / "three") == window


def test_a_workers_error_reaches_the_driver_as_itself(tmp_path):
    """A corpus part out of index order, found by a scatter task in a worker process: the driver raises the
    task's own error, with its fix."""
    part = tmp_path / "part.parquet"
    pq.write_table(pa.table({"index": [1, 0], "id": ["a", "b"], "text": ["x", "y"]}), part)
    unit = buckets.Unit(0, (buckets.RowGroup(str(part), 0, 0, 2),), str(tmp_path / "pairs.bin"))
    np.array([[0, 0], [1, 1]], np.int64).tofile(unit.pairs)
    with pytest.raises(ClusterClipError, match="not in index order; rebuild the corpus with `REBUILD`"):
        list(ordered_map(buckets.scatter_unit, [(unit, 4, str(tmp_path), "REBUILD")] * 2, workers=2))


def test_export_cli_takes_workers_and_the_engine(tmp_path, monkeypatch, capsys):
    run, cfg, _ = _many_units(tmp_path)
    monkeypatch.setattr(buckets, "BUCKET_BYTES", 700)
    monkeypatch.setattr(PlanStream, "bucketed", lambda self, memory_mb: True)
    assert main(["export", str(run.root), "--dest", str(tmp_path / "a"), "--workers", "2", "--engine", "local",
                 "-q"]) == 0
    export_plan(run, cfg.name(), tmp_path / "b", workers=1)
    assert _files(tmp_path / "a") == _files(tmp_path / "b")
    assert main(["export", str(run.root), "--dest", str(tmp_path / "c"), "--workers", "0"]) == 2
    assert "--workers must be an integer >= 1" in capsys.readouterr().err


def test_ray_tasks_write_the_bytes_of_one_process(tmp_path, monkeypatch):
    pytest.importorskip("ray")
    from clusterclip.engines import EngineConfig

    run, cfg, _ = _many_units(tmp_path)
    opts = {"fmt": "parquet", "shard_size": 16, "tokenizer": _tokenizer(tmp_path)}
    monkeypatch.setattr(buckets, "BUCKET_BYTES", 700)
    monkeypatch.setattr(PlanStream, "bucketed", lambda self, memory_mb: True)
    export_plan(run, cfg.name(), tmp_path / "local", workers=1, **opts)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    export_plan(run, cfg.name(), tmp_path / "ray", engine=EngineConfig(engine="ray"), **opts)
    local = _files(tmp_path / "local")
    assert local and _files(tmp_path / "ray") == local
    assert json.loads((tmp_path / "ray" / "export.json").read_text())["buckets"] > 5


@pytest.mark.slow
def test_ray_tasks_on_two_nodes_write_the_bytes_of_one_process(tmp_path, monkeypatch):
    """Scatter and gather tasks on a two-node cluster reached through ``--ray-address``."""
    pytest.importorskip("ray")
    from clusterclip.engines import EngineConfig
    from tests.ray_cluster import two_node_cluster

    run, cfg, _ = _many_units(tmp_path)
    monkeypatch.setattr(buckets, "BUCKET_BYTES", 700)
    monkeypatch.setattr(PlanStream, "bucketed", lambda self, memory_mb: True)
    export_plan(run, cfg.name(), tmp_path / "local", fmt="jsonl", shard_size=16, workers=1)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with two_node_cluster() as cluster:
        engine = EngineConfig(engine="ray", ray_address=cluster.address)
        export_plan(run, cfg.name(), tmp_path / "ray", fmt="jsonl", shard_size=16, engine=engine)
    local = _files(tmp_path / "local")
    assert local and _files(tmp_path / "ray") == local
