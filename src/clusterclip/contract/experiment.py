"""Where ``clusterclip experiment`` and ``clusterclip tune`` keep their work and results inside a run directory
(names only; the report reads the results through them)."""

from __future__ import annotations

EXPERIMENT_DIR = "experiment"
"""``clusterclip experiment``'s work: a run directory of its own whose one stage is :data:`EXPERIMENT_STAGE`."""
EXPERIMENT_STAGE = "experiment"
EXPERIMENT_RESULTS = "experiment/results.json"
TUNE_DIR = "tune"
"""``clusterclip tune``'s work: ``splits/<seed>/`` run directories, ``runs/<hash>.json`` proxy runs."""
TUNE_RESULTS = "tune/results.json"
TUNE_RUNS = "tune/runs"
TUNE_SEARCH_STAGE = "search"
"""The stage of the tune directory whose record (``tune/search.json``) lists ``results.json``."""
