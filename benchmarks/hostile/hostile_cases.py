"""The cases of ``benchmarks/hostile/hostile_sweep.py``: what a hostile user does to every command.

A case is a command line (or a Python snippet for the readers of an export), the base it runs on (a finished
run with duplicate groups and exports, copied per case), what may be changed first, and what the right outcome
is: ``ok`` (exit 0, and the result passes the case's check), ``error`` (one line, exit 2), or ``either``.
Families: ``options`` (every numeric option of every command at values out of any range), ``paths`` (inputs
and run directories that are missing, empty, FIFOs, devices, files, folders), ``exports`` (tampered exports
read by every reader), ``kills`` (SIGKILL at points of run, add, dedup and export, then the same command again:
the bytes of an uninterrupted run), ``concurrent`` (two commands on one run directory at once).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

Setup = Callable[[Path], None]
Check = Callable[[Path], "str | None"]


@dataclass(frozen=True)
class Case:
    family: str
    name: str
    argv: list[str] | None = None            # after `clusterclip`; {run} {dest} {corpus} {new} {case} filled in
    code: str | None = None                  # or a Python snippet (readers), run with `python -c`
    expect: str = "either"                   # ok | error | either
    setup: Setup | None = None               # changes the case's copy first
    check: Check | None = None               # on exit 0: None when right, else what is wrong (silent)
    fault: str | None = None                 # CLUSTERCLIP_FAULT for a kill case (then argv again, see rerun)
    kill_after: float | None = None          # or SIGKILL the command (its process only) after this many seconds
    rerun: list[str] | None = None           # kill cases: the command that finishes (default: argv)
    reference: str | None = None             # kill cases: the base folder whose artifact bytes it must end with
    compare: str = "run"                     # kill cases: the case folder to compare
    pair: list[str] | None = None            # concurrent cases: the second command
    timeout: float = 240.0
    env: dict[str, str] = field(default_factory=dict)
    run_base: str = "run"                    # the base run directory copied for the case


RUN_DIR_COMMANDS = {
    "cluster": ["cluster", "{run}", "--force", "-q"],
    "plan": ["plan", "{run}", "--strategy", "uniform", "--budget", "200", "-q"],
    "dedup": ["dedup", "{run}", "--force", "-q"],
    "add": ["add", "{run}", "{new}", "-q"],
    "export": ["export", "{run}", "--plan", "{plan}", "--dest", "{case}/out", "-q"],
    "report": ["report", "{run}", "-q"],
    "status": ["status", "{run}", "--verify"],
}
CREATING_COMMANDS = {
    "run": ["run", "{corpus}", "--out", "{case}/new", "--embedder", "hashing", "--k", "4", "-q"],
    "embed": ["embed", "{corpus}", "--out", "{case}/new", "--embedder", "hashing", "-q"],
}
SLOW_COMMANDS = {
    "tune": ["tune", "{corpus}", "--out", "{case}/new", "--max-minutes", "1", "-q"],
    "experiment": ["experiment", "{corpus}", "--out", "{case}/new", "-q"],
}
INT_VALUES = ("-1", "0", "1e300", "abc", str(2**64))
FLOAT_VALUES = ("-1", "nan", "inf", "1e300", "abc")
REFUSED_EVERYWHERE = ("abc", "nan", "1e300", str(2**64))


NUMERIC_TYPES = {"int", "float", "_count_or_all", "_ints", "_floats", "<lambda>"}


def numeric_options() -> Iterator[tuple[str, str, str]]:
    """``(command, flag, type name)`` of every option of every subcommand that takes a number (or a list)."""
    from clusterclip.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        for action in p._actions:
            flags = [s for s in action.option_strings if s.startswith("--")]
            if flags and action.nargs != 0 and getattr(action.type, "__name__", "") in NUMERIC_TYPES:
                yield name, flags[0], action.type.__name__


def option_cases() -> Iterator[Case]:
    commands = {**RUN_DIR_COMMANDS, **CREATING_COMMANDS, **SLOW_COMMANDS}
    for command, flag, kind in numeric_options():
        base = commands.get(command)
        if base is None:
            continue
        slow = command in SLOW_COMMANDS
        values = ("abc", "nan", "1e300") if slow else FLOAT_VALUES if kind == "float" else INT_VALUES
        for value in values:
            argv = [*(a for a in base if a != "-q"), flag, value, "-q"]
            refused = value in REFUSED_EVERYWHERE and not (value == str(2**64) and "seed" in flag)
            yield Case("options", f"{command} {flag} {value}", argv, expect="error" if refused else "either",
                       timeout=150.0 if slow else 240.0)


def _fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def path_cases() -> Iterator[Case]:
    def corpus_as(kind: str) -> Setup:
        def setup(case: Path) -> None:
            target = case / "input.jsonl"
            if kind == "fifo":
                _fifo(target)
            elif kind == "empty":
                target.write_bytes(b"")
            elif kind == "garbage":
                target.write_bytes(os.urandom(4096))
            elif kind == "folder":
                target.mkdir()
            elif kind == "bad-json":
                target.write_text('{"text": "fine"}\n{"text": \n')
            elif kind == "no-text":
                target.write_text('{"body": "no text field"}\n' * 5)
            elif kind == "nul":
                target.write_text('{"text": "a\\u0000b c d"}\n' * 30)
        return setup

    for command, base in {**CREATING_COMMANDS, "add": RUN_DIR_COMMANDS["add"]}.items():
        for kind in ("fifo", "empty", "garbage", "folder", "bad-json", "no-text", "missing"):
            argv = [("{case}/input.jsonl" if a in ("{corpus}", "{new}") else a) for a in base]
            yield Case("paths", f"{command} input {kind}", argv, expect="error",
                       setup=None if kind == "missing" else corpus_as(kind), timeout=60)
        twice = [a for a in base]
        i = twice.index("{corpus}" if "{corpus}" in twice else "{new}")
        twice.insert(i, twice[i])
        yield Case("paths", f"{command} input twice", twice, expect="error")
        yield Case("paths", f"{command} input /dev/zero",
                   [("/dev/zero" if a in ("{corpus}", "{new}") else a) for a in base], expect="error", timeout=60)

    def run_dir_as(kind: str) -> Setup:
        def setup(case: Path) -> None:
            run = case / "run"
            if kind == "missing":
                shutil.rmtree(run)
            elif kind == "file":
                shutil.rmtree(run)
                run.write_text("not a run\n")
            elif kind == "empty":
                shutil.rmtree(run)
                run.mkdir()
            elif kind == "lock-folder":
                (run / ".lock").unlink(missing_ok=True)
                (run / ".lock").mkdir()
            elif kind == "foreign":
                shutil.rmtree(run)
                run.mkdir()
                (run / "notes.txt").write_text("someone else's folder\n")
        return setup

    for command, argv in RUN_DIR_COMMANDS.items():
        for kind in ("missing", "file", "empty", "lock-folder", "foreign"):
            expect = "either" if kind == "lock-folder" and command in ("status", "export") else "error"
            yield Case("paths", f"{command} run-dir {kind}", argv, expect=expect, setup=run_dir_as(kind), timeout=60)
    for kind in ("file", "inside-run", "non-empty"):
        def dest(case: Path, kind: str = kind) -> None:
            if kind == "file":
                (case / "out").write_text("x\n")
            elif kind == "non-empty":
                (case / "out").mkdir()
                (case / "out" / "mine.txt").write_text("keep me\n")
        argv = list(RUN_DIR_COMMANDS["export"])
        if kind == "inside-run":
            argv[argv.index("{case}/out")] = "{run}/plans"
        yield Case("paths", f"export dest {kind}", argv, expect="error", setup=dest,
                   check=None, timeout=60)


def write_json(path: Path, edit: Callable[[dict], None]) -> None:
    obj = json.loads(path.read_text())
    edit(obj)
    path.write_text(json.dumps(obj))


FORMATS = ("jsonl", "parquet", "hf", "litdata", "megatron")
ONE_LINE = ("import sys\nfrom clusterclip.errors import ClusterClipError\ntry:\n{body}\n"
            "except ClusterClipError as exc:\n    sys.exit(print('clusterclip: error:', exc, file=sys.stderr) or 2)")
"""A reader called as a trainer calls it: a ClusterClipError (one line) is the refusal; anything else is not."""
READERS = {
    "read_export": "from clusterclip.contract.export import read_export\nprint(read_export({folder!r}).rows)",
    "check_export": "from clusterclip.contract.export import check_export, read_export\n"
                    "print(check_export({folder!r}, {identity!r}).rows)",
    "from_export": "from clusterclip.torch import ClusterClipSampler\n"
                   "s = ClusterClipSampler.from_export({folder!r}, rank=0, world_size=1)\nprint(len(list(s)))",
}


def _part(folder: Path) -> Path:
    """The export's largest data file (what a trainer reads rows from)."""
    files = [p for p in folder.rglob("*") if p.is_file() and p.name != "export.json" and not p.name.endswith(".json")]
    return max(files, key=lambda p: p.stat().st_size)


def tamper(kind: str, other: str) -> Setup:
    def setup(case: Path) -> None:
        folder = case / "export"
        record = folder / "export.json"
        if kind == "append-row":
            with _part(folder).open("ab") as fh:
                fh.write(b'{"text": "one more row"}\n')
        elif kind == "truncate-part":
            part = _part(folder)
            part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])
        elif kind == "delete-part":
            _part(folder).unlink()
        elif kind == "rows+1":
            write_json(record, lambda r: r.update(rows=r["rows"] + 1))
        elif kind == "identity-edited":
            write_json(record, lambda r: r["identity"].update(plan_identity="0" * 16))
        elif kind == "no-record":
            record.unlink()
        elif kind == "other-record":
            shutil.copy(case / other / "export.json", record)
        elif kind == "record-linked":
            shutil.move(record, case / "export.json")
            record.symlink_to(case / "export.json")
        elif kind == "extra-file":
            (folder / "notes.txt").write_text("mine\n")
    return setup


TAMPERS = {"append-row": "error", "truncate-part": "error", "delete-part": "error", "rows+1": "error",
           "identity-edited": "error", "no-record": "error", "other-record": "error", "record-linked": "ok",
           "extra-file": "ok"}


def export_cases(identity: str) -> Iterator[Case]:
    """Every tamper of every format's export, read by every reader (``{identity}``: the plan's, for
    ``check_export``)."""
    for fmt in FORMATS:
        for kind, expect in TAMPERS.items():
            for reader, code in READERS.items():
                body = "\n".join("    " + line for line in code.format(folder="{case}/export", identity=identity)
                                  .splitlines())
                snippet = ONE_LINE.format(body=body)
                yield Case("exports", f"{fmt} {kind} {reader}", code=snippet, expect=expect,
                           setup=tamper(kind, f"export-{fmt}-other"), env={"EXPORT_FORMAT": fmt})


RUN_FAULTS = ("part-00000.parquet:before", "tokens.npy:after", "shard-00000.npy:after", "confidence-00000.npy:after",
              "labels.npy:before", "sizes.npy:after", "plan.npy:before", "mixture.npy:after", "summary.json:before")
ADD_FAULTS = ("part-00001.parquet:after", "add-journal.json:after", "tokens.npy:after", "labels.npy:after",
              "corpus.json:after", "neighbour.npy:after", "signatures.npy:after", "group.npy:before",
              "dedup.json:after", "drift.json:after")
DEDUP_FAULTS = ("neighbour.npy:before", "similarity.npy:after", "signatures.npy:after", "lexical_pairs.npy:before",
                "group.npy:after", "kept.npy:before", "removed.parquet:after", "dedup.json:before")
EXPORT_FAULTS = ("identity.json:after", "export.json:before", "export.json:after")


def kill_cases() -> Iterator[Case]:
    run = [*CREATING_COMMANDS["run"][:-1], "--strategies", "clusterclip,random", "--budget", "300", "-q"]
    for fault in RUN_FAULTS:
        yield Case("kills", f"run {fault}", run, fault=fault, reference="fresh", compare="new")
    for fault in ADD_FAULTS:
        yield Case("kills", f"add {fault}", RUN_DIR_COMMANDS["add"], fault=fault, reference="added")
    for fault in ADD_FAULTS[1:3] + ADD_FAULTS[4:9]:
        yield Case("kills", f"add {fault} then abort", RUN_DIR_COMMANDS["add"], fault=fault, reference="run",
                   rerun=["add", "{run}", "--abort"])
    for fault in DEDUP_FAULTS:
        yield Case("kills", f"dedup {fault}", RUN_DIR_COMMANDS["dedup"], fault=fault, reference="run")
    export = ["export", "{run}", "--plan", "{plan}", "--dest", "{case}/out", "--format", "parquet",
              "--shard-size", "100", "-q"]
    for fault in EXPORT_FAULTS:
        yield Case("kills", f"export {fault}", export, fault=fault, reference="export-parquet-small", compare="out")
        yield Case("kills", f"export --workers 2 {fault}", [*export[:-1], "--memory-mb", "1", "--workers", "2", "-q"],
                   fault=fault, reference="export-parquet-small", compare="out")
    big_export = [("{bigplan}" if a == "{plan}" else a) for a in export]
    for after in (1.0, 2.0, 3.0, 4.0):
        yield Case("kills", f"export --workers 2 kill -9 at {after} s",
                   [*big_export[:-1], "--memory-mb", "1", "--workers", "2", "-q"], fault="", kill_after=after,
                   reference="export-big", compare="out", run_base="big")
        yield Case("kills", f"dedup kill -9 at {after / 2} s", RUN_DIR_COMMANDS["dedup"], fault="",
                   kill_after=after / 2, reference="big", run_base="big")


CONCURRENT = {
    "plan+plan": (RUN_DIR_COMMANDS["plan"], ["plan", "{run}", "--strategy", "random", "--budget", "150", "-q"]),
    "plan+export": (RUN_DIR_COMMANDS["plan"], RUN_DIR_COMMANDS["export"]),
    "dedup+plan": (RUN_DIR_COMMANDS["dedup"], RUN_DIR_COMMANDS["plan"]),
    "add+plan": (RUN_DIR_COMMANDS["add"], RUN_DIR_COMMANDS["plan"]),
    "add+dedup": (RUN_DIR_COMMANDS["add"], RUN_DIR_COMMANDS["dedup"]),
    "cluster+export": (RUN_DIR_COMMANDS["cluster"], RUN_DIR_COMMANDS["export"]),
    "report+plan": (RUN_DIR_COMMANDS["report"], ["plan", "{run}", "--strategy", "uniform", "--force", "-q"]),
    "status+add": (RUN_DIR_COMMANDS["status"], RUN_DIR_COMMANDS["add"]),
    "export+export": (RUN_DIR_COMMANDS["export"], RUN_DIR_COMMANDS["export"]),
    "add+add": (RUN_DIR_COMMANDS["add"], RUN_DIR_COMMANDS["add"]),
}


def concurrent_cases() -> Iterator[Case]:
    for name, (first, second) in CONCURRENT.items():
        for repeat in range(2):
            yield Case("concurrent", f"{name} #{repeat}", first, pair=second)


def all_cases(identity: str) -> list[Case]:
    return [*option_cases(), *path_cases(), *export_cases(identity), *kill_cases(), *concurrent_cases()]
