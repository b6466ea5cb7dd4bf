"""Settings: every option is declared once, on its config dataclass, and validated on construction.

A config is a frozen dataclass that derives from :class:`Settings` and declares its fields with
:func:`setting`: the default, a help text, the allowed ``choices``, a ``check`` (see the range helpers
:func:`at_least`, :func:`between`, :func:`finite`, :func:`optional`, :func:`each`) and, when it is not
``--field-name``, the command-line ``flag``. Construction runs every check and raises
:class:`SettingsError` naming the parameter (``k must be an integer >= 1, got 0``); cross-field rules go
in ``__post_init__`` after ``super().__post_init__()``, and rules that depend on data (``k`` at most the
number of documents) are functions that raise :class:`SettingsError` with the same parameter name.

The command line never re-declares an option: :func:`add_arguments` adds a dataclass' fields to an
``argparse`` parser (defaults, choices, help and types from the fields), :func:`from_args` builds the
config back from the parsed namespace, and :func:`error_message` prints a :class:`SettingsError` with the
flag in place of the parameter name (``--k must be ...``). For presets, ``add_arguments(..., unset=True)``
leaves options that were not given out of the namespace and ``from_args(..., base=preset)`` replaces
only the given ones. A config whose errors must be a subclass (``PlanConfigError``) sets ``error_class``.

Example::

    @dataclass(frozen=True)
    class FitConfig(Settings):
        k: int | None = setting(None, check=optional(at_least(1)), help="clusters (default: sqrt(N/2))")
        seed: int = setting(0, check=at_least(0), flag="--fit-seed", help="k-means seed")
        init: str = setting("kmeans++", choices=("kmeans++", "random"), help="centroid seeding")

    add_arguments(parser, FitConfig)              # --k, --fit-seed, --init
    config = from_args(FitConfig, parser.parse_args())
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import types
import typing
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, ClassVar, TypeVar

import numpy as np

from clusterclip.errors import ClusterClipError, cli_text, option_ref

__all__ = [
    "INT32_MAX",
    "Check",
    "Settings",
    "SettingsError",
    "add_arguments",
    "at_least",
    "between",
    "check_settings",
    "each",
    "error_message",
    "finite",
    "flag_of",
    "from_args",
    "is_int",
    "is_text",
    "one_of",
    "option",
    "optional",
    "setting",
    "uint64",
]

Check = Callable[[Any], str | None]
"""A check takes a value and returns what is wrong with it (``"must be ..., got ..."``), or None."""

T = TypeVar("T")
_REF = re.compile(r"\{(\w+)\}")


class SettingsError(ClusterClipError, ValueError):
    """An option with a value that cannot be used; ``param`` is its name (a dataclass field).

    The message is ``"<param> <problem>"`` (just ``problem`` when ``param`` is empty: an error about input
    data rather than one option). ``problem`` may name other parameters as ``{name}``; they are rendered as
    names here and as flags by :func:`error_message`. ``owner`` is the config class the
    parameter belongs to, when known (it decides the flag, e.g. ``ClusterConfig.seed`` -> ``--cluster-seed``).
    """

    def __init__(self, param: str, problem: str, owner: type | None = None) -> None:
        self.param = param
        self.problem = problem
        self.owner = owner
        super().__init__(self.render())

    def render(self, name: Callable[[str], str] = str) -> str:
        """The message with every parameter name passed through ``name`` (e.g. to a flag)."""
        problem = _REF.sub(lambda m: name(m.group(1)), self.problem)
        return f"{name(self.param)} {problem}" if self.param else problem

    def __reduce__(self) -> tuple[type, tuple[str, str, type | None]]:
        return type(self), (self.param, self.problem, self.owner)


# ------------------------------------------------------------------------------------------- checks


def is_int(x: Any) -> bool:
    """True for Python and numpy integers, not for ``bool``."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return is_int(x) or isinstance(x, (float, np.floating))


def at_least(lo: float, *, integer: bool = True, at_most: int | None = None) -> Check:
    """A number ``>= lo`` (and ``<= at_most``: e.g. the 32-bit parameters of faiss); an integer unless
    ``integer=False``."""
    kind = "an integer" if integer else "a number"

    def check(x: Any) -> str | None:
        ok = is_int(x) if integer else _is_number(x) and math.isfinite(x)
        if at_most is not None and ok and not lo <= x <= at_most:
            return f"must be {kind} in [{lo:g}, {at_most}], got {x!r}"
        return None if ok and x >= lo else f"must be {kind} >= {lo:g}, got {x!r}"

    return check


INT32_MAX = (1 << 31) - 1
"""The largest value of a C ``int`` (faiss' k-means parameters)."""


def uint64() -> Check:
    """An integer in ``[0, 2**64)``: a seed that native hashing libraries (rensa) take as an unsigned 64-bit word."""

    def check(x: Any) -> str | None:
        return None if is_int(x) and 0 <= x < 1 << 64 else f"must be an integer in [0, 2**64), got {x!r}"

    check.wide = True  # type: ignore[attr-defined]
    return check


def between(lo: float, hi: float, *, closed: bool = False) -> Check:
    """A number in the open interval ``(lo, hi)``, or ``[lo, hi]`` when ``closed``."""

    def check(x: Any) -> str | None:
        if _is_number(x) and (lo <= x <= hi if closed else lo < x < hi):
            return None
        return f"must be in {'[' if closed else '('}{lo:g}, {hi:g}{']' if closed else ')'}, got {x!r}"

    return check


def finite() -> Check:
    """Any finite number."""
    return lambda x: None if _is_number(x) and math.isfinite(x) else f"must be a finite number, got {x!r}"


def one_of(choices: Iterable[Any]) -> Check:
    """One of ``choices``."""
    allowed = tuple(choices)
    listed = ", ".join(map(str, allowed))
    return lambda x: None if x in allowed else f"must be one of {listed}, got {x!r}"


def optional(check: Check) -> Check:
    """None, or a value that passes ``check``."""

    def opt(x: Any) -> str | None:
        problem = None if x is None else check(x)
        return problem and problem.replace(", got", " (or None), got", 1)

    return opt


def is_text(x: Any) -> str | None:
    """A non-empty string."""
    return None if isinstance(x, str) and x else f"must be a non-empty string, got {x!r}"


def each(check: Check, *, nonempty: bool = True, distinct: bool = False) -> Check:
    """A tuple or list whose items all pass ``check`` (and which has at least one item if ``nonempty``, no
    item twice if ``distinct``: a seed listed twice would count one measurement as two)."""

    def check_all(xs: Any) -> str | None:
        if not isinstance(xs, (tuple, list)) or (nonempty and not xs):
            return f"must be a {'non-empty ' if nonempty else ''}list, got {xs!r}"
        for x in xs:
            problem = check(x)
            if problem:
                return f"items {problem}"
        if distinct:
            twice = sorted({x for x in xs if xs.count(x) > 1}, key=str)
            if twice:
                return f"lists {', '.join(map(str, twice))} more than once, got {xs!r}"
        return None

    return check_all


# ------------------------------------------------------------------------------------ declarations


def setting(default: Any = dataclasses.MISSING, *, help: str, choices: Iterable[Any] | None = None,
            check: Check | None = None, flag: str | None = None, parse: Callable[[str], Any] | None = None,
            factory: Callable[[], Any] | None = None, cli_none: str | None = None) -> Any:
    """A dataclass field with its help text, choices, check, command-line flag and argument parser.

    ``choices`` adds a :func:`one_of` check; ``parse`` turns the command-line string into the value
    (default: the field's type, e.g. ``int`` for ``int | None``); ``factory`` replaces ``default``
    for mutable defaults. ``cli_none`` says how the command line writes None when ``parse`` maps some
    value to it (``"0 for all"``): error messages for the command line name it instead of None.
    """
    meta = {"help": help, "choices": tuple(choices) if choices is not None else None,
            "check": check, "flag": flag, "parse": parse, "cli_none": cli_none}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def check_settings(obj: Any) -> None:
    """Run the checks of every field of the dataclass instance ``obj``; raise on the first failure
    (its ``error_class``, default :class:`SettingsError`)."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        choices = f.metadata.get("choices")
        problem = one_of(choices)(value) if choices is not None else None
        check = f.metadata.get("check")
        problem = problem or (check(value) if check is not None else None)
        if problem is None and not getattr(check, "wide", False):
            problem = _beyond_64_bits(value)
        if problem:
            raise getattr(obj, "error_class", SettingsError)(f.name, problem, type(obj))


def _beyond_64_bits(value: Any) -> str | None:
    """Every integer setting fits a signed 64-bit word (NumPy, faiss and the native libraries take no more), so
    2**64 is one line naming the option, not an OverflowError deep inside a stage."""
    values = value if isinstance(value, (list, tuple)) else (value,)
    big = next((v for v in values if is_int(v) and not -(1 << 63) <= v < 1 << 63), None)
    return None if big is None else f"must fit 64 bits (|x| < 2**63), got {big!r}"


class Settings:
    """Base of config dataclasses: construction validates every field declared with :func:`setting`.

    Subclasses with rules across fields override ``__post_init__`` and call ``super().__post_init__()``
    first; they raise ``self.error_class(name, problem, type(self))``. ``error_class`` is the
    :class:`SettingsError` subclass raised (e.g. ``PlanConfigError``).
    """

    error_class: ClassVar[type[SettingsError]] = SettingsError
    API_ARGUMENT: ClassVar[str | None] = None
    """The argument of the Python API that takes this config (``corpus`` of ``run_pipeline``), for messages."""

    def __post_init__(self) -> None:
        check_settings(self)


# ---------------------------------------------------------------------------------- command line


def flag_of(cls: type | None, name: str) -> str:
    """The command-line flag of field ``name`` of ``cls``: its declared ``flag``, else ``--name-with-dashes``."""
    if cls is not None and dataclasses.is_dataclass(cls):
        f = {f.name: f for f in dataclasses.fields(cls)}.get(name)
        if f is not None and f.metadata.get("flag"):
            return str(f.metadata["flag"])
    return "--" + name.replace("_", "-")


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _parser_type(cls: type, f: dataclasses.Field) -> Callable[[str], Any] | None:
    if f.metadata.get("parse") is not None:
        return f.metadata["parse"]
    hint = typing.get_type_hints(cls)[f.name]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next((a for a in typing.get_args(hint) if a is not type(None)), str)
    return hint if hint in (int, float) else None


def _cli_fields(cls: type, names: Iterable[str] | None) -> list[dataclasses.Field]:
    by_name = {f.name: f for f in dataclasses.fields(cls)}
    chosen = list(names) if names is not None else [n for n, f in by_name.items() if "help" in f.metadata]
    missing = [n for n in chosen if n not in by_name or "help" not in by_name[n].metadata]
    if missing:
        raise TypeError(f"{cls.__name__}: no setting() declaration for {', '.join(missing)}")
    return [by_name[n] for n in chosen]


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _shown(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, (tuple, list)) else str(value)


def add_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup, cls: type,
                  fields: Iterable[str] | None = None,
                  overrides: Mapping[str, Mapping[str, Any]] | None = None, *, unset: bool = False) -> None:
    """Add one option per field of ``cls`` (``fields``: which, in this order; default: every ``setting``).

    Flag, default, choices, type and help come from the declaration; ``overrides`` maps a field name
    to keyword arguments of ``add_argument`` that replace the derived ones for this parser only. With
    ``unset``, an option not given stays out of the namespace (its default is only shown in the help),
    so that ``from_args(..., base=preset)`` keeps the preset's value.
    """
    for f in _cli_fields(cls, fields):
        flag, text = flag_of(cls, f.name), f.metadata["help"]
        if unset and "(default:" not in text:
            default = _default(f)
            shown = f.metadata["cli_none"].split(" for ")[0] if default is None and f.metadata.get("cli_none") \
                else _shown(default)
            text = f"{text} (default: {shown})"
        kw: dict[str, Any] = {"default": argparse.SUPPRESS if unset else _default(f), "help": text,
                              "dest": _dest(flag)}
        if f.metadata.get("choices") is not None:
            kw["choices"] = f.metadata["choices"]
            if len(",".join(map(str, kw["choices"]))) > _WIDE_CHOICES:  # the usage line would pass the terminal
                kw["metavar"] = f.name.upper()
                kw["help"] = f"{kw['help']} (one of: {', '.join(map(str, kw['choices']))})"
        parse = _parser_type(cls, f)
        if parse is not None:
            kw["type"] = parse
        kw.update((overrides or {}).get(f.name, {}))
        parser.add_argument(flag, **kw)


_WIDE_CHOICES = 48
"""Choices longer than this (joined by commas) are shown as the field's name in the usage and listed in the help."""


def from_args(cls: type[T], args: argparse.Namespace, fields: Iterable[str] | None = None, *,
              base: T | None = None, **values: Any) -> T:
    """Build ``cls`` from the options :func:`add_arguments` added; ``values`` set other fields or replace.

    With ``base``, the result is ``base`` with the options present in ``args`` (and ``values``) replaced.
    """
    kwargs = {f.name: getattr(args, _dest(flag_of(cls, f.name))) for f in _cli_fields(cls, fields)
              if hasattr(args, _dest(flag_of(cls, f.name)))}
    if base is not None:
        return dataclasses.replace(base, **{**kwargs, **values})
    return cls(**{**kwargs, **values})


def option(cls: type, name: str) -> str:
    """Setting ``name`` of ``cls`` as an error message names it (:func:`clusterclip.errors.option_ref`): as the
    Python API passes it (``corpus=CorpusConfig(text_field=...)``, with the argument ``cls.API_ARGUMENT`` that takes
    the config) and by its command-line flag (``--text-field``)."""
    argument = getattr(cls, "API_ARGUMENT", None)
    python = f"{cls.__name__}({name}=...)"
    return option_ref(f"{argument}={python}" if argument else python, flag_of(cls, name))


def error_message(exc: BaseException, flag: Callable[[str], str] | None = None) -> str:
    """The one-line message of a user error, naming command-line flags instead of parameter names
    (``flag`` maps a name to its flag; default :func:`flag_of` the error's owner) and the command-line
    spelling of None where the option declares one (``cli_none``)."""
    if not isinstance(exc, SettingsError):
        return cli_text(getattr(exc, "template", str(exc)))
    text = cli_text(exc.render(flag or (lambda name: flag_of(exc.owner, name))))
    fields = {f.name: f for f in dataclasses.fields(exc.owner)} \
        if exc.owner is not None and dataclasses.is_dataclass(exc.owner) else {}
    spelled = fields[exc.param].metadata.get("cli_none") if exc.param in fields else None
    return text.replace("(or None)", f"(or {spelled})", 1) if spelled else text


def command_flags(cls: type, values: Mapping[str, Any], names: Iterable[str] | None = None,
                  defaults: Mapping[str, Any] | None = None, always: Collection[str] = ()) -> list[str]:
    """``[--flag, value, ...]`` of the settings of ``cls`` in ``values`` that differ from their defaults
    (``defaults``, else the declared ones; ``always`` listed whatever their value), in declaration order
    or that of ``names``: the options of a command line that rebuilds a stage with these settings."""
    declared = {f.name: _default(f) for f in dataclasses.fields(cls)}
    out: list[str] = []
    for f in _cli_fields(cls, None if names is None else dict.fromkeys(names)):
        value = values.get(f.name)
        default = (defaults or {}).get(f.name, declared.get(f.name))
        if value is None or (value == default and f.name not in always):
            continue
        if isinstance(value, bool):
            out.append(flag_of(cls, f.name))
            continue
        out += [flag_of(cls, f.name), _shown(f"{value:g}" if isinstance(value, float) else value)]
    return out
