"""Exceptions that the CLI turns into one-line messages instead of tracebacks.

An option with an unusable value raises :class:`clusterclip.settings.SettingsError`, a
:class:`ClusterClipError` that names the parameter (the CLI prints its flag instead).
"""

from __future__ import annotations


class ClusterClipError(Exception):
    """Base class of every error caused by user input or run-directory state (not by a bug)."""


class BadRecordError(ClusterClipError):
    """A corpus record that cannot be used: names the file, line (or row) and the problem."""

    def __init__(self, source: str, location: int | None, problem: str) -> None:
        problem = " ".join("".join(c if c.isprintable() else " " for c in problem).split())
        self.source = source
        self.location = location
        self.problem = problem
        where = f"{source}:{location}" if location is not None else source
        super().__init__(f"{where}: {problem}")

    def __reduce__(self) -> tuple[type, tuple[str, int | None, str]]:
        return type(self), (self.source, self.location, self.problem)


class InfeasiblePlanError(ClusterClipError):
    """The requested budget cannot be met under the repetition cap."""
