"""The suite's plumbing (:mod:`tests.suite`): a stopped run says what it had, and tests that share a machine-wide
resource are grouped to run on one xdist worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.suite import group_of

ROOT = Path(__file__).resolve().parents[1]
TESTS = """
import time

import pytest


def test_quick():
    pass


@pytest.mark.skip(reason="shown as skipped")
def test_skipped():
    pass


def test_sleeps():
    time.sleep(120)
"""
WRAPPER = """
import subprocess, sys
subprocess.Popen(sys.argv[1:])
import time
time.sleep(600)
"""


def _pytest(tmp_path: Path, *args: str) -> list[str]:
    (tmp_path / "test_tiny.py").write_text(TESTS)
    return [sys.executable, "-m", "pytest", "-p", "tests.suite", "-p", "no:cacheprovider", "-v", "-o",
            "timeout=0", "--rootdir", str(tmp_path), "-c", os.devnull, *args, str(tmp_path / "test_tiny.py")]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}


def _wait_for(path: Path, text: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = path.read_text(errors="replace") if path.exists() else ""
        if text in out:
            return out
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not in {path.read_text(errors='replace') if path.exists() else ''}")


@pytest.mark.parametrize("workers", [[], ["-n", "2", "--dist", "loadgroup"]], ids=["serial", "xdist"])
def test_sigterm_prints_the_counts_and_the_running_test(tmp_path, workers):
    if workers:
        pytest.importorskip("xdist")
    log = tmp_path / "log"
    with log.open("w") as out:
        proc = subprocess.Popen(_pytest(tmp_path, *workers), stdout=out, stderr=subprocess.STDOUT, env=_env(),
                                cwd=tmp_path)
        try:
            _wait_for(log, "PASSED")
            time.sleep(1.5)  # test_sleeps has started
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 2  # interrupted, as after Ctrl-C
        finally:
            if proc.poll() is None:
                proc.kill()
    text = log.read_text()
    assert "stopped by SIGTERM after" in text, text
    assert "2 tests run of 3 collected (1 passed, 0 failed, 1 skipped, 0 errors)" in text, text
    assert "running: test_tiny.py::test_sleeps" in text, text
    assert "slowest so far:" in text and "test_tiny.py::test_quick" in text


def test_the_end_of_the_parent_process_stops_the_run_with_the_summary(tmp_path):
    log = tmp_path / "log"
    with log.open("w") as out:
        parent = subprocess.Popen([sys.executable, "-c", WRAPPER, *_pytest(tmp_path, "--stop-with-parent")],
                                  stdout=out, stderr=subprocess.STDOUT, env=_env(), cwd=tmp_path)
        try:
            _wait_for(log, "PASSED")
            time.sleep(1.5)
            parent.kill()  # as `make` killed with SIGKILL: pytest is left running, reparented
            parent.wait(10)
            text = _wait_for(log, "1 passed", timeout=60)
        finally:
            if parent.poll() is None:
                parent.kill()
    assert "stopped by the end of its parent process" in text, text
    assert "running: test_tiny.py::test_sleeps" in text


def _item(module: str, function: object, params: dict | None = None, fixtures: tuple[str, ...] = ()) -> object:
    """What :func:`group_of` reads of a collected test."""
    return SimpleNamespace(fspath=ROOT / "tests" / module, function=function, fixturenames=fixtures,
                           callspec=SimpleNamespace(params=params) if params is not None else None)


def test_tests_that_share_ray_or_torch_ports_are_grouped():
    from tests import test_docs, test_engines

    assert group_of(_item("test_engines.py", test_engines.test_no_more_workers_than_cores)) == "test_engines.py"
    assert group_of(_item("test_engines.py", test_engines.test_ray_processes_end_when_the_command_is_killed)) == "ray"
    assert group_of(_item("test_x.py", test_suite_plain, fixtures=("ray_local",))) == "ray"
    readme = test_docs.test_a_readme_command_runs_as_written
    assert group_of(_item("test_docs.py", readme, {"line": "clusterclip run d --out r --engine ray"})) == "ray"
    assert group_of(_item("test_docs.py", readme, {"line": "clusterclip status runs/web"})) == "test_docs.py"
    assert group_of(_item("test_resume_loops.py", test_suite_plain)) == "distributed"


def test_suite_plain():
    """A test that uses nothing shared (and a function for the grouping test to look at)."""
