"""Processes as Linux's ``/proc`` lists them: for the tests (and the hostile sweep) that check that no process a
command started outlives it."""

from __future__ import annotations

from pathlib import Path

PARENT, GROUP = 1, 2
"""Fields of ``/proc/PID/stat`` after the command name: the parent's pid, the process group."""


def processes(field: int, value: int) -> list[int]:
    """The pids whose ``/proc/PID/stat`` field ``field`` (:data:`PARENT`, :data:`GROUP`) is ``value``."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[field]) == value:
                out.append(int(entry.name))
    return out


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, which only its parent or a reaping init removes, does not)."""
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def cmdline(pid: int) -> str:
    """The command line of ``pid``, for messages ("?" once it is gone)."""
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:120]
    except OSError:
        return "?"
