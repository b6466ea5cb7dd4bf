"""Hypothesis profiles: CI runs derandomized (the same examples on every run), so a red CI is reproducible. The
suite's groups for pytest-xdist and the summary of a stopped run come from :mod:`tests.suite`."""

from __future__ import annotations

import os

from hypothesis import settings

from tests.suite import pytest_addoption, pytest_configure, pytest_xdist_make_scheduler

__all__ = ["pytest_addoption", "pytest_configure", "pytest_xdist_make_scheduler"]

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")
