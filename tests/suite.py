"""The suite's own plumbing, a pytest plugin (``conftest.py`` takes its hooks; ``-p tests.suite`` loads it
elsewhere): which tests may run side by side under pytest-xdist, and what a stopped run prints.

**Groups.** ``make test`` runs ``pytest -n auto --dist loadgroup``, whose scheduler here (:func:`group_of`) runs
each group of tests on one worker, in order. By default a test module is its own group, so its module- and
session-scoped fixtures (a tamper sweep's run, the core install's virtual environment) are built once, not once per
worker. Tests that share a machine-wide resource form one group across modules: ``ray`` (local Ray instances and
two-node clusters share ``/tmp/ray`` and its ``session_latest`` link, and some tests look for Ray processes) and
``distributed`` (multi-process torch groups on 127.0.0.1 ports picked a moment before they are bound).

**A stopped run.** SIGTERM or SIGINT (a CI time limit, Ctrl-C, ``make`` passing on its own SIGTERM), or, with
``--stop-with-parent``, the end of the process that started pytest (``make`` killed with SIGKILL), prints what the run
had: the counts so far out of the tests collected, the tests running and for how long, and the slowest finished
ones; then pytest stops as after Ctrl-C (its own summary follows, exit status 2). A run that has not ended 20 s
later, or a second signal, exits at once.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import os
import re
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

RAY = re.compile(r"""importorskip\(["']ray|engine=["']ray|["']--engine["'], ["']ray|--engine ray|ray_session|"""
                 r"""two_node_cluster|ray_tasks|ray_local""")
"""What marks a test function as one that starts or reaches Ray (in its source, fixtures included)."""
RAY_PARAMS = "engine-ray"
"""What marks a parametrized test's id as one on Ray (``tests/test_docs.py`` names its README lines so)."""
DISTRIBUTED = re.compile(r"MASTER_PORT")
"""What marks a module whose tests start multi-process torch groups."""
GRACE_S = 20.0
SLOWEST = 5


def group_of(nodeid: str, root: Path) -> str:
    """The group of the test ``nodeid`` (relative to ``root``): ``ray``, ``distributed``, or its module's path.

    Decided from the node id and the module's source alone: the controller of an xdist run collects nothing (and
    pytest 9 no longer lets xdist's ``xdist_group`` rename node ids, so its own ``loadgroup`` groups nothing).
    """
    path, _, rest = nodeid.partition("::")
    name, _, params = rest.split("::")[-1].partition("[")
    if RAY_PARAMS in params or RAY.search(_functions(root / path).get(name, "")):
        return "ray"
    if DISTRIBUTED.search(_functions(root / path).get("", "")):
        return "distributed"
    return path


@functools.cache
def _functions(path: Path) -> dict[str, str]:
    """The source of every function of a test module by name (classes' methods included), and the whole
    module's under ``""``."""
    try:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (OSError, SyntaxError, ValueError):
        return {}
    found = {node.name: ast.get_source_segment(text, node) or "" for node in ast.walk(tree)
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return {**found, "": text}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``: each group (:func:`group_of`) runs on one worker, in collection order."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SuiteGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid, config.rootpath)

    return SuiteGroups(config, log)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--stop-with-parent", action="store_true",
                     help="stop the run, printing what it had, when the process that started pytest ends (make)")


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: the controller counts and handles signals
        return
    watch = SuiteWatch(config)
    config.pluginmanager.register(watch, "suite-watch")
    watch.install(with_parent=config.getoption("--stop-with-parent"))


def _duration(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f} s"
    return f"{seconds:.0f} s" if seconds < 120 else f"{int(seconds // 60)} min {int(seconds % 60)} s"


class SuiteWatch:
    """Counts outcomes and tracks the running tests (on the controller, with or without xdist), and prints them
    when the run is stopped."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.started = time.monotonic()
        self.collected: int | None = None
        self.outcomes: Counter[str] = Counter()
        self.running: dict[str, float] = {}
        self.finished: list[tuple[float, str]] = []
        self.stopping = False
        self.parent_gone: int | None = None
        self.pid = os.getpid()

    # ------------------------------------------------------------------------------------------ what ran

    @pytest.hookimpl
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if session.items:
            self.collected = len(session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.collected = len(ids)

    @pytest.hookimpl
    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self.running[nodeid] = time.monotonic()

    @pytest.hookimpl
    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        started = self.running.pop(nodeid, None)
        if started is not None:
            self.finished.append((time.monotonic() - started, nodeid))

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.outcomes["failed" if report.when == "call" else "errors"] += 1
        elif report.skipped:
            self.outcomes["skipped"] += 1
        elif report.when == "call":
            self.outcomes["passed"] += 1

    def summary(self, why: str) -> str:
        """What the run had when it was stopped, a few lines."""
        done = sum(self.outcomes[k] for k in ("passed", "failed", "skipped"))
        counts = ", ".join(f"{self.outcomes[k]:,} {k}" for k in ("passed", "failed", "skipped", "errors"))
        of = f" of {self.collected:,} collected" if self.collected else ""
        now = time.monotonic()
        lines = [f"stopped by {why} after {_duration(now - self.started)}: {done:,} tests run{of} ({counts})"]
        lines += [f"  running: {nodeid} (for {_duration(now - t0)})" for nodeid, t0 in self.running.items()]
        if not self.running:
            lines.append("  running: none")
        lines += [f"  slowest so far: {_duration(s)} {nodeid}" for s, nodeid in sorted(self.finished)[::-1][:SLOWEST]]
        return "\n".join(lines)

    # ------------------------------------------------------------------------------------------ stopping

    def install(self, with_parent: bool) -> None:
        """Handle SIGTERM and SIGINT; with ``with_parent``, treat the end of the parent process as a SIGTERM."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        if with_parent:
            parent = os.getppid()
            threading.Thread(target=self._watch_parent, args=(parent,), name="suite-watch", daemon=True).start()

    def _watch_parent(self, parent: int) -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        self.parent_gone = parent
        os.kill(os.getpid(), signal.SIGTERM)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if os.getpid() != self.pid:  # a forked child (a DataLoader worker) inherited the handler: die as by default
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        name = signal.Signals(signum).name
        if self.parent_gone is not None:
            name = f"the end of its parent process (pid {self.parent_gone})"
        self._print(self.summary(name))
        if self.stopping:
            os._exit(128 + signum)
        self.stopping = True
        threading.Thread(target=self._deadline, args=(signum,), name="suite-deadline", daemon=True).start()
        raise KeyboardInterrupt

    def _deadline(self, signum: int) -> None:
        time.sleep(GRACE_S)
        self._print(f"the run did not end within {GRACE_S:.0f} s of the signal: exiting now")
        os._exit(128 + signum)

    def _print(self, text: str) -> None:
        """Write to the terminal, also in the middle of a test whose output pytest captures."""
        capman = self.config.pluginmanager.getplugin("capturemanager")
        with contextlib.suppress(OSError, ValueError), \
                capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
            sys.stderr.write(f"\n{text}\n")
            sys.stderr.flush()
