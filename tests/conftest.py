"""Hypothesis profiles: CI runs derandomized (the same examples on every run), so a red CI is reproducible."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")
