"""Finished proxy runs, kept as stages of the tune directory: proxy run ``<key>`` is the stage ``runs/<key>``
(record ``RUN/tune/runs/<key>.json``), written by :func:`~clusterclip.stages.run_stage` as it finishes.

The key hashes the runner's identity (the experiment's settings and the input files), the candidate's spec,
the split and the seed, so a killed search resumes with every finished run. A record's settings are the
spec, split and seed, its inputs hash that of the runner's identity, its ``metrics`` the run's losses: a
record copied from another corpus or experiment is not reused, and a damaged one is retrained (with a
warning), never fatal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clusterclip.contract.experiment import ProxyRunRecord
from clusterclip.stages import Built, Stage, run_stage
from clusterclip.store import RunDir, config_hash
from clusterclip.store.record import RecordError

log = logging.getLogger(__name__)
Pair = tuple[int, int]
"""(held-out split, seed)."""
RUNS = "runs"
"""The proxy runs' folder in the tune directory."""


def _settings(spec: dict[str, Any], pair: Pair) -> dict[str, Any]:
    return {"spec": spec, "split": pair[0], "seed": pair[1]}


class ProxyStages:
    """The proxy runs of a search, as stages of ``tune_dir`` whose inputs are ``identity``."""

    def __init__(self, tune_dir: Path, identity: dict[str, Any]) -> None:
        self.run = RunDir(tune_dir)
        self.identity = identity
        self.inputs = config_hash(identity)

    def key(self, spec: dict[str, Any], pair: Pair) -> str:
        """Hash of the run's full configuration: the runner's identity, candidate, split and seed."""
        bare = {k: v for k, v in spec.items() if k != "name"}
        return config_hash({**self.identity, "spec": bare, "split": pair[0], "seed": pair[1]})

    def name(self, spec: dict[str, Any], pair: Pair) -> str:
        """The stage name of a proxy run: ``runs/<key>``."""
        return f"{RUNS}/{self.key(spec, pair)}"

    def finished(self, spec: dict[str, Any], pair: Pair) -> dict[str, Any] | None:
        """The metrics of a proxy run whose record is fresh (same settings and inputs), else None."""
        name = self.name(spec, pair)
        if not self.run.is_fresh(name, _settings(spec, pair), self.inputs):
            return None
        try:
            return ProxyRunRecord.require(self.run, name, verify=False).metrics
        except RecordError as exc:  # a damaged record is trained again, as a missing one
            log.warning("%s: training it again", exc)
            return None

    def train(self, spec: dict[str, Any], pair: Pair, train: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Train a proxy run that is not finished (``train`` returns its metrics) and write its record."""
        stage = Stage(self.name(spec, pair), _settings(spec, pair), self.inputs,
                      lambda job: Built([], {"metrics": train()}), record=ProxyRunRecord)
        return run_stage(self.run, stage, force=True).metrics
