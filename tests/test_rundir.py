"""The run-directory contract: atomic writes, records, integrity checks and the writer lock."""

from __future__ import annotations

import multiprocessing as mp
import time

import numpy as np
import pytest

from clusterclip.errors import ClusterClipError
from clusterclip.rundir import (
    TMP_PREFIX,
    RunDir,
    StaleArtifactError,
    atomic_write,
    load_npy,
    save_npy,
)


def test_atomic_write_leaves_old_content_on_failure(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_write(path, "w") as fh:
        fh.write("half")
        raise RuntimeError("killed")
    assert path.read_text() == "old"
    assert not list(tmp_path.glob(TMP_PREFIX + "*"))


def test_npy_roundtrip_never_pickles(tmp_path):
    arr = np.arange(10, dtype=np.int32)
    save_npy(tmp_path / "a.npy", arr)
    np.testing.assert_array_equal(load_npy(tmp_path / "a.npy"), arr)
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(StaleArtifactError, match="cannot read array"):
        load_npy(tmp_path / "obj.npy")


def _record(run: RunDir) -> None:
    save_npy(run.root / "x.npy", np.arange(100))
    run.write_record("demo", {"a": 1}, "in", ["x.npy"], 0.1)


def test_freshness_and_integrity(tmp_path):
    run = RunDir(tmp_path)
    _record(run)
    assert run.is_fresh("demo", {"a": 1}, "in")
    assert not run.is_fresh("demo", {"a": 2}, "in")
    assert not run.is_fresh("demo", {"a": 1}, "other")
    run.verify("demo")
    data = (run.root / "x.npy").read_bytes()
    (run.root / "x.npy").write_bytes(data[:-8])
    with pytest.raises(StaleArtifactError, match=r"x.npy: size .* re-run `demo`"):
        run.verify("demo")
    assert not run.is_fresh("demo", {"a": 1}, "in")
    (run.root / "x.npy").write_bytes(data[:-8] + b"\0" * 8)
    with pytest.raises(StaleArtifactError, match="checksum"):
        run.verify("demo")


def test_require_names_missing_stage(tmp_path):
    with pytest.raises(StaleArtifactError, match="stage `cluster` has not run yet"):
        RunDir(tmp_path).require("cluster")


def test_output_hash_changes_with_artifacts(tmp_path):
    run = RunDir(tmp_path)
    _record(run)
    h1 = run.output_hash("demo")
    save_npy(run.root / "x.npy", np.arange(101))
    run.write_record("demo", {"a": 1}, "in", ["x.npy"], 0.1)
    assert run.output_hash("demo") != h1


def _hold_lock(path, ready, release):
    with RunDir(path).lock():
        ready.set()
        release.wait(10)


def test_second_writer_is_refused(tmp_path):
    ctx = mp.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold_lock, args=(str(tmp_path), ready, release))
    proc.start()
    try:
        assert ready.wait(30)
        with pytest.raises(ClusterClipError, match="another clusterclip process"), RunDir(tmp_path).lock():
            pass
        release.set()
        proc.join(10)
        t0 = time.monotonic()
        with RunDir(tmp_path).lock(wait=True, timeout=5):
            pass
        assert time.monotonic() - t0 < 5
    finally:
        release.set()
        proc.join(10)


def test_clean_temp_files(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / f"{TMP_PREFIX}plan.npy.abc").write_bytes(b"x")
    assert RunDir(tmp_path).clean_temp_files() == 1
    assert not list(tmp_path.rglob(TMP_PREFIX + "*"))
