"""The names of the run directory that belong to no stage: records, the lock, the rebuild commands, and the
files of commands that span stages (the add journal, the drift report, the run summary).

Names only: this module is data. Each stage's own files are named by its contract
(``clusterclip.<stage>.contract``); the contract of the whole run directory is ``docs/run-directory.md``.
"""

from __future__ import annotations

RUN = "{run}"
"""Stands for the run directory in the ``command`` a stage record holds (so a moved run still renders)."""
LOCK = ".lock"
COMMANDS = "commands.json"
"""The command line that last built each stage (``{stage: argv}``), kept beside the records so that a message
about a damaged record can still name the command that rebuilds it; read for messages only."""
SUMMARY = "summary.json"
ADD_JOURNAL = "add-journal.json"
"""Written before ``clusterclip add`` changes anything: the records it started from and its inputs, so a
killed add is finished by re-running it; removed once the grown records are written."""
DRIFT_REPORT = "drift.json"
"""The drift report of the latest ``clusterclip add`` (share of new documents far from every centroid)."""


def record(stage: str) -> str:
    """The record that marks ``stage`` finished (``plans/<name>/plan`` -> ``plans/<name>/plan.json``)."""
    return f"{stage}.json"


def command(stage: str) -> tuple[str, ...]:
    """The generic command that builds ``stage`` when neither its record nor ``commands.json`` names one;
    options it cannot know are shown as placeholders."""
    if stage in ("corpus", "embed"):
        return ("clusterclip", "embed", "INPUT...", "--out", RUN)
    if stage.startswith("plans/"):
        return ("clusterclip", "plan", RUN, "--strategy", "STRATEGY", "OPTIONS...")
    return ("clusterclip", stage.split("/")[0], RUN)
