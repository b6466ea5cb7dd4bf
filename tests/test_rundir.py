"""The run-directory contract: atomic writes, records, integrity checks and the writer lock."""

from __future__ import annotations

import multiprocessing as mp
import os
import time

import numpy as np
import pytest

from clusterclip.errors import ClusterClipError
from clusterclip.stages import Built, Job, Stage, run_stage
from clusterclip.store import (
    TMP_PREFIX,
    RunDir,
    StaleArtifactError,
    atomic_write,
    file_digest,
    load_npy,
    rundir,
    save_json,
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
        held = r"another clusterclip process .*; wait for it to finish$"
        with pytest.raises(ClusterClipError, match=held), RunDir(tmp_path).lock():
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


# ------------------------------------------------------------------------------------------ the stage runner


def _chain(run: RunDir, calls: list[str], size: int = 100, settings: dict | None = None) -> dict:
    """Two stages through the runner: ``up`` writes a.npy, ``down`` reads it and writes b.npy."""

    def build_up(job: Job) -> Built:
        calls.append("up")
        save_npy(run.path("a.npy"), np.arange(size))
        return Built(["a.npy"], {"n": size})

    def build_down(job: Job) -> Built:
        calls.append("down")
        save_npy(run.path("b.npy"), load_npy(run.path("a.npy")) * 2)
        return Built(["b.npy"])

    run_stage(run, Stage("up", {"size": size}, "files", build_up))
    down = Stage("down", settings or {"x": 1}, run.output_hash("up"), build_down, reads={"up": None})
    return run_stage(run, down)


def _no_digest(path, chunk=0):
    raise AssertionError(f"{path}: read for a checksum")


def test_noop_rerun_decides_without_reading_artifacts(tmp_path, monkeypatch):
    run, calls = RunDir(tmp_path), []
    rec = _chain(run, calls)
    assert calls == ["up", "down"]
    assert set(rec["artifacts"]["b.npy"]) == {"size", "mtime_ns", "sha256"}
    monkeypatch.setattr(rundir, "file_digest", _no_digest)
    again = _chain(run, calls)
    assert calls == ["up", "down"] and again == rec


def test_changed_settings_or_upstream_rerun(tmp_path):
    run, calls = RunDir(tmp_path), []
    _chain(run, calls)
    _chain(run, calls, settings={"x": 2})
    assert calls == ["up", "down", "down"]
    _chain(run, calls, size=50, settings={"x": 2})
    assert calls == ["up", "down", "down", "up", "down"]


def test_touched_artifact_stays_fresh_by_checksum(tmp_path):
    run, calls = RunDir(tmp_path), []
    _chain(run, calls)
    st = run.path("b.npy").stat()
    os.utime(run.path("b.npy"), ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    _chain(run, calls)
    assert calls == ["up", "down"]


def _tamper_keeping_size_and_mtime(path) -> None:
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_same_size_and_mtime_edit_is_caught_where_content_is_read(tmp_path):
    run, calls = RunDir(tmp_path), []
    _chain(run, calls)
    _tamper_keeping_size_and_mtime(run.path("a.npy"))
    _chain(run, calls)
    assert calls == ["up", "down"], "the quick check trusts size and mtime (documented)"
    assert run.problems("up", checksums=False) == []
    assert "a.npy: checksum does not match" in run.problems("up")[0]
    with pytest.raises(StaleArtifactError, match=r"a\.npy: checksum"):
        run.require("up")
    with pytest.raises(StaleArtifactError, match=r"a\.npy: checksum"):
        _chain(run, calls, settings={"x": 3})
    assert calls == ["up", "down"], "a stage that would read the edited artifact refuses to build"


def test_record_without_mtime_falls_back_to_checksums(tmp_path, monkeypatch):
    run, calls = RunDir(tmp_path), []
    _chain(run, calls)
    for stage in ("up", "down"):
        rec = run.record(stage)
        for meta in rec["artifacts"].values():
            del meta["mtime_ns"]
        save_json(run.record_path(stage), {**rec, "format_version": 1})
    digests = []
    monkeypatch.setattr(rundir, "file_digest", lambda p, chunk=0: digests.append(p) or file_digest(p))
    _chain(run, calls)
    assert calls == ["up", "down"] and digests, "fresh, decided by checksums"
    data = run.path("b.npy").read_bytes()
    run.path("b.npy").write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    _chain(run, calls)
    assert calls == ["up", "down", "down"]
    assert "mtime_ns" in run.record("down")["artifacts"]["b.npy"]
