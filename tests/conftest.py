"""Hypothesis profiles: CI runs derandomized (the same examples on every run), so a red CI is reproducible; the S3
server of the object-storage tests. The suite's groups for pytest-xdist and the summary of a stopped run come from
:mod:`tests.suite`."""

from __future__ import annotations

import os
import uuid

import pytest
from hypothesis import settings

from tests.suite import pytest_addoption, pytest_configure, pytest_xdist_make_scheduler

__all__ = ["pytest_addoption", "pytest_configure", "pytest_xdist_make_scheduler"]

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")


@pytest.fixture(scope="session")
def s3_server():
    """A real S3 endpoint on 127.0.0.1 (moto's server mode, ``moto[server]`` of the test extra), started once for the
    session and stopped after it: its URL."""
    pytest.importorskip("moto")
    pytest.importorskip("s3fs")
    from tests.s3_server import start_s3_server

    proc, url = start_s3_server()
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture
def s3(s3_server, monkeypatch):
    """A fresh bucket on the session's S3 server, the store's standard environment pointing at it (as a user's
    would: ``AWS_ENDPOINT_URL`` and keys); its ``s3://`` URL. Subprocesses inherit the environment."""
    import s3fs

    for name, value in {"AWS_ENDPOINT_URL": s3_server, "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(skip_instance_cache=True).mkdir(bucket)
    return f"s3://{bucket}"
