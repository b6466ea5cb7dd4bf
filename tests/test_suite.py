"""The suite's plumbing (:mod:`tests.suite`): a stopped run says what it had, and tests that share a machine-wide
resource are grouped to run on one xdist worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.suite import group_of
from tests.test_docs import command_lines

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
            assert proc.wait(60) in (2, 143)  # interrupted as after Ctrl-C, or at the deadline after the signal
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


def test_tests_that_share_ray_or_torch_ports_are_grouped():
    def group(nodeid: str) -> str:
        return group_of(nodeid, ROOT)

    assert group("tests/test_engines.py::test_no_more_workers_than_cores") == "tests/test_engines.py"
    assert group("tests/test_engines.py::test_ray_processes_end_when_the_command_is_killed") == "ray"
    assert group("tests/test_ray_engine.py::test_ray_engine_matches_local") == "ray"  # the ray_local fixture
    assert group("tests/test_ray_engine.py::test_unknown_engine_is_rejected") == "tests/test_ray_engine.py"
    readme = "tests/test_docs.py::test_a_readme_command_runs_as_written"
    ray_lines = [i for i in _readme_ids() if "engine-ray" in i]
    assert len(ray_lines) == sum("--engine ray" in line for line in command_lines(ROOT / "README.md")) >= 2
    assert {group(f"{readme}[{i}]") for i in ray_lines} == {"ray"}
    assert group(f"{readme}[18-status runs/web]") == "tests/test_docs.py"
    assert group("tests/test_resume_loops.py::test_two_ranks_resumed_at_one_and_three_ranks") == "distributed"
    assert group("tests/test_cli_grammar.py::test_former_spellings_run_end_to_end") == "tests/test_cli_grammar.py"


def _readme_ids() -> list[str]:
    from tests.test_docs import README_LINES

    return [p.id for p in README_LINES]
