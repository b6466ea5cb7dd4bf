"""The local engine's worker processes: never more than the cores, and never outliving the process that started
them (``kill -9`` of an ``export --workers 2`` once left both workers running, reparented to init)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.procs import GROUP, PARENT, alive, cmdline, processes

SCRIPT = """
import sys, time
from clusterclip.engines import ordered_map
print("started", flush=True)
for _ in ordered_map(time.sleep, [(60,)] * 4, workers=2):
    pass
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_end_when_their_parent_is_killed():
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
        deadline = time.monotonic() + 60
        workers: list[int] = []
        while time.monotonic() < deadline:  # the pool's two workers (and the resource tracker) have started
            workers = [p for p in processes(PARENT, proc.pid) if "spawn_main" in (Path("/proc") / str(p) / "cmdline")
                       .read_bytes().decode(errors="replace")]
            if len(workers) >= 2:
                break
            time.sleep(0.2)
        assert len(workers) == 2, workers
        time.sleep(1.0)  # both in their first call
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(alive(p) for p in workers):
            time.sleep(0.2)
        assert not any(alive(p) for p in workers), "a worker outlived the process that started it"
    finally:
        if proc.poll() is None:
            proc.kill()


def test_no_more_workers_than_cores(monkeypatch):
    """--workers 1000 on two cores starts two processes, not a thousand."""
    import concurrent.futures

    from clusterclip import engines

    started: list[int] = []
    real = concurrent.futures.ProcessPoolExecutor

    def recording(max_workers: int, **kw):
        started.append(max_workers)
        return real(max_workers=max_workers, **kw)

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", recording)
    monkeypatch.setattr(engines, "available_cores", lambda: 2)
    assert list(engines.ordered_map(abs, [(-i,) for i in range(50)], workers=1000)) == list(range(50))
    assert started == [2]


def test_a_ray_address_where_nothing_listens_is_one_line_within_seconds():
    import socket

    from clusterclip.engines import ray_session
    from clusterclip.errors import ClusterClipError

    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    start = time.monotonic()
    refused = rf"cannot connect to the Ray cluster at 127\.0\.0\.1:{port}: nothing answers there \(Connection refused\)"
    with pytest.raises(ClusterClipError, match=refused), ray_session(f"127.0.0.1:{port}"):
        pass
    assert time.monotonic() - start < 60  # Ray alone retries such an address for minutes


RAY_SCRIPT = """
import time
from clusterclip.engines import EngineConfig, ray_tasks
def nap(seconds):
    time.sleep(seconds)
with EngineConfig(engine="ray").session() as ray:
    print("started", ray._private.worker._global_node.get_session_dir_path(), flush=True)
    ray_tasks(nap, [(120,)] * 2)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ray_processes_end_when_the_command_is_killed():
    """``kill -9`` of a command on the Ray engine: its head node (GCS, raylet, dashboard, agents) and task workers
    all exit, within a minute (zombies, which only a reaping init removes, are not counted). The session folder
    that the killed command could not remove is removed here."""
    pytest.importorskip("ray")
    from clusterclip.ray_session import remove_session

    proc = subprocess.Popen([sys.executable, "-c", RAY_SCRIPT], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    session = None
    try:
        assert proc.stdout is not None
        started, _, folder = proc.stdout.readline().strip().partition(" ")
        assert started == "started"
        session = Path(folder)
        time.sleep(3.0)  # the tasks are running
        group = [p for p in processes(GROUP, proc.pid) if p != proc.pid]
        assert group, "no Ray process found"
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and any(alive(p) for p in group):
            time.sleep(1.0)
        assert not [p for p in group if alive(p)], [cmdline(p) for p in group if alive(p)]
    finally:
        for p in processes(GROUP, proc.pid):
            if alive(p):
                os.kill(p, signal.SIGKILL)
        remove_session(session)
