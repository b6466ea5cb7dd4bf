"""A real S3 endpoint on 127.0.0.1: moto's server mode (``moto[server]`` of the test extra) in a process of its own,
for the object-storage tests (the session fixture of ``conftest.py``) and ``benchmarks/scale/bench_object_store.py``."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request


def start_s3_server(timeout: float = 60.0) -> tuple[subprocess.Popen, str]:
    """The server's process and URL, once it answers (a free port of 127.0.0.1); the caller terminates it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return proc, url
        except urllib.error.HTTPError:  # it answers
            return proc, url
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.terminate()
                raise RuntimeError("the moto S3 server did not start") from None
            time.sleep(0.2)
