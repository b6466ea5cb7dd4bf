"""The online mixer's artifact in a run directory, named once for the writer (:mod:`clusterclip.online.mixer`,
which needs PyTorch) and the readers that must not import it (the report)."""

from __future__ import annotations

ONLINE_RECORD = "online.json"
"""Beside a continuation's ``plan.json``: the controller state that chose its weights and the window behind it."""
