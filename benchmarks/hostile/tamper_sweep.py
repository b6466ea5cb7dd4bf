"""Tamper with every artifact of a small run directory and check what every command does with it.

Each case copies a finished run directory (corpus, embed, cluster, one plan, a report), damages one
file (or replaces one folder by a link), then runs one command on the copy. An outcome is one of

* ``error``: exit status 2 and one line ``clusterclip: error: ...`` (no traceback);
* ``correct``: exit 0 and the result equals the undamaged run's (a re-run rebuilt what was damaged, or
  the command never reads that file), or for ``status`` the damaged file is named in its output;
* ``silent``: exit 0 and a different result, or ``status`` not naming the damage: a silent wrong result;
* ``traceback``: any other exception, or a multi-line error;
* ``outside``: something outside the run directory (behind a planted link) was written or deleted.

``python benchmarks/hostile/tamper_sweep.py`` prints the table recorded in RESULTS.md; ``tests/test_tamper_sweep.py``
runs the same sweep and asserts there is no ``silent``, ``traceback`` or ``outside`` outcome. Its lineage
sweep (``benchmarks/hostile/lineage_sweep.py``) changes a run instead of damaging it: adds, refits, continuations,
killed adds and re-runs, checking that no document is lost or doubled and every cap holds over a chain.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import multiprocessing
import os
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MUTATIONS = ("truncate", "flip", "zero", "delete", "pickle", "symlink")
COMMANDS = ("status", "verify", "report", "plan", "export", "sampler", "run")
BAD = ("silent", "traceback", "outside")

TOPICS = {
    "cooking": "recipe oven bake flour sugar butter dough knead simmer sauce garlic onion pepper salt",
    "astronomy": "galaxy star orbit planet telescope nebula comet gravity light-year supernova moon",
    "finance": "stock bond market interest inflation dividend portfolio equity trader bank loan",
    "sailing": "boat sail wind harbour keel mast rudder anchor tide knot deck crew",
}
RUN_ARGS = ["--k", "4", "--embedder", "hashing", "--strategies", "clusterclip", "--budget", "300",
            "--budget-unit", "docs", "-q"]
PLAN_ARGS = ["--strategy", "clusterclip", "--budget", "300", "-q"]


@dataclass(frozen=True)
class Outcome:
    target: str
    mutation: str
    command: str
    kind: str
    detail: str
    seconds: float = 0.0


def _corpus(path: Path, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="utf-8") as fh:
        for topic, n in zip(TOPICS, (90, 40, 25, 15), strict=True):
            words = TOPICS[topic].split()
            for i in range(n):
                text = " ".join(rng.choice(words, size=int(rng.integers(20, 60))))
                fh.write(json.dumps({"id": f"{topic}-{i}", "text": text, "domain": topic}) + "\n")
    return path


def _cli(argv: list[str]) -> tuple[int | None, str, str, BaseException | None]:
    """Run the CLI in this process: (exit status, stdout, stderr, unexpected exception)."""
    from clusterclip.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc: int | None = main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 2
        except BaseException as exc:
            return None, out.getvalue(), err.getvalue(), exc
    return rc, out.getvalue(), err.getvalue(), None


def _tree(root: Path) -> dict[str, str]:
    """``{relative path: sha256 or link target}`` of everything under ``root`` (links not followed)."""
    found: dict[str, str] = {}
    if not root.exists():
        return found
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                found[rel] = "-> " + os.readlink(p)
            else:
                found[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return found


def _plan_dir(run: Path) -> Path:
    (plan,) = sorted((run / "plans").iterdir())
    return plan


def _recorded(run: Path) -> dict[str, str]:
    """Every artifact named in a stage record, with its recorded SHA-256."""
    found: dict[str, str] = {}
    for rec_path in [*run.glob("*.json"), *run.glob("plans/*/plan.json")]:
        try:
            rec = json.loads(rec_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for rel, meta in rec.get("artifacts", {}).items() if isinstance(rec, dict) else ():
            found[rel] = meta["sha256"]
    return found


def _normalise_report(html: str, run: Path) -> str:
    html = html.replace(str(run), "RUN")
    html = re.sub(r"generated [0-9: -]+", "generated T", html)
    html = re.sub(r"report built in [0-9.]+ s", "report built in T", html)
    html = re.sub(r'(report \(this page\)</td><td class="num") data-v="[0-9.e-]+">[0-9.]+ s', r"\1>T", html)
    return re.sub(r"<dc:date>[^<]*</dc:date>", "", html)


class Baseline:
    """A finished run directory and what every command produces on it, undamaged."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.run = work / "base" / "run"
        corpus = _corpus(work / "corpus.jsonl")
        self.run_argv = ["run", str(corpus), "--out", str(self.run), *RUN_ARGS]
        for argv in (self.run_argv, ["report", str(self.run), "-q"]):
            rc, _, err, exc = _cli(argv)
            if rc != 0 or exc is not None:
                raise RuntimeError(f"baseline {argv[0]} failed: {err or exc}")
        self.plan = _plan_dir(self.run).name
        self.recorded = _recorded(self.run)
        self.files = _tree(self.run)
        self.export = self._export(self.run, work / "base" / "export")
        self.order = self._sample(self.run)
        self.report = self._report(self.run)
        self.status = _cli(["status", str(self.run), "--verify"])[1].replace(str(self.run), "RUN")

    def targets(self) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
        """``(relative path, mutations, commands)``: every recorded artifact, record and derived file with
        every mutation against every command; the lock and the folders the run writes into, replaced by
        links. The report's own outputs are read by nothing but ``status`` and ``report``, which rebuilds
        them whatever their bytes, so they get one content change (a flip), deletion and a link."""
        records = (r for r in self.files if r.endswith(".json") and not r.startswith("report/"))
        files = sorted({*self.recorded, *records})
        folders = ["corpus", "embeddings", f"plans/{self.plan}", "report", ".lock"]
        report_only = ("status", "verify", "report")
        report_out = ("flip", "delete", "symlink")
        return ([(rel, report_out, report_only) if rel.startswith("report/") else (rel, MUTATIONS, COMMANDS)
                 for rel in files]
                + [(rel, ("symlink",), COMMANDS) for rel in folders])

    @staticmethod
    def _export(run: Path, out: Path) -> dict[str, str] | str:
        rc, _, err, exc = _cli(["export", str(run), "--dest", str(out), "-q"])
        if exc is not None or rc != 0:
            return f"export failed: {err.strip() or exc!r}"
        return {k: v for k, v in _tree(out).items() if k not in ("export.json", ".lock")}

    @staticmethod
    def _sample(run: Path) -> list[int]:
        from clusterclip.torch import ClusterClipSampler

        return list(ClusterClipSampler(run, rank=0, world_size=1))

    @staticmethod
    def _report(run: Path) -> str:
        return _normalise_report((run / "report" / "report.html").read_text(encoding="utf-8"), run)


def _mutate(path: Path, mutation: str, outside: Path) -> None:
    if mutation == "delete":
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    elif mutation == "symlink":
        copy = outside / path.name
        if path.is_dir():
            shutil.copytree(path, copy, symlinks=True)
            shutil.rmtree(path)
        else:
            shutil.copy2(path, copy)
            path.unlink()
        path.symlink_to(copy, target_is_directory=copy.is_dir())
    else:
        data = path.read_bytes()
        if mutation == "truncate":
            data = data[: len(data) // 2]
        elif mutation == "flip":
            data = data[:-1] + bytes([data[-1] ^ 0x01]) if data else b"\x01"
        elif mutation == "zero":
            data = bytes(len(data))
        elif mutation == "pickle":
            buf = io.BytesIO()
            np.save(buf, np.array([{"payload": 1}, None], dtype=object), allow_pickle=True)
            data = buf.getvalue()
        path.write_bytes(data)


def _one_error_line(err: str) -> bool:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    return bool(lines) and lines[-1].startswith("clusterclip: error:") and "Traceback" not in err


def _judge(base: Baseline, case: Path, target: str, command: str) -> tuple[str, str]:
    """Run ``command`` on the damaged copy ``case``; returns (outcome kind, detail)."""
    if command == "sampler":
        from clusterclip.errors import ClusterClipError

        try:
            order = base._sample(case)
        except ClusterClipError as exc:
            msg = str(exc)
            return ("error", msg) if "\n" not in msg else ("traceback", f"multi-line: {msg[:200]}")
        except Exception as exc:
            return "traceback", f"{type(exc).__name__}: {exc}"[:300]
        return ("correct", "same order") if order == base.order else ("silent", "sampler yields a different order")
    argv = {
        "status": ["status", str(case)],
        "verify": ["status", str(case), "--verify"],
        "report": ["report", str(case), "-q"],
        "plan": ["plan", str(case), *PLAN_ARGS],
        "export": ["export", str(case), "--dest", str(case.parent / "export"), "-q"],
        "run": [*base.run_argv[:3], str(case), *RUN_ARGS],
    }[command]
    rc, out, err, exc = _cli(argv)
    if exc is not None:
        return "traceback", f"{type(exc).__name__}: {exc}"[:300]
    if rc == 2 or (command in ("status", "verify") and rc == 1):
        if rc == 1:
            flagged = _names(out.replace(str(case), "RUN"), target, base.status)
            return ("correct", "status flags it") if flagged else ("silent", "exit 1, damage not named")
        return ("error", err.strip().splitlines()[-1]) if _one_error_line(err) else ("traceback", err[-300:])
    if rc != 0:
        return "traceback", f"exit {rc}: {err[-300:]}"
    return _correct(base, case, target, command, out)


WARNINGS = ("stale", "missing", "modified", "corrupt", "truncated", "mismatch", "link", "does not match",
            "not finished", "has not run", "left out", "problem")
STAGE_RECORDS = ("corpus.json", "embed.json", "cluster.json")


def _names(out: str, target: str, baseline: str = "") -> bool:
    """Whether ``out`` names the damage: the damaged path, or a warning word, more often than ``baseline``."""
    low, base = out.lower(), baseline.lower()
    return out.count(target) > baseline.count(target) or any(low.count(w) > base.count(w) for w in WARNINGS)


def _correct(base: Baseline, case: Path, target: str, command: str, out: str) -> tuple[str, str]:
    if command in ("status", "verify"):
        if _names(out.replace(str(case), "RUN"), target, base.status):
            return "correct", "damage named"
        if target == "report.json" and not (case / target).exists():
            return "correct", "no report record: the report is simply not built"
        if target in base.recorded or target in STAGE_RECORDS or target.endswith("/plan.json"):
            return "silent", "exit 0 without naming the damage"
        return "correct", "not an artifact"
    if command == "report":
        path = case / "report" / "report.html"
        html = _normalise_report(path.read_text(encoding="utf-8"), case) if path.is_file() else ""
        if html == base.report:
            return "correct", "same report"
        return ("correct", "report flags it") if html and _names(html, target, base.report) else \
            ("silent", "report differs")
    if command == "export":
        got = {k: v for k, v in _tree(case.parent / "export").items() if k not in ("export.json", ".lock")}
        return ("correct", "same export") if got == base.export else ("silent", "exported files differ")
    now = _recorded(case)
    wanted = {r: s for r, s in base.recorded.items()
              if not r.startswith("report/") and (command == "run" or r.startswith("plans/"))}
    bad = [r for r, s in wanted.items() if now.get(r) != s or _sha(case / r) != s]
    return ("correct", "rebuilt identical") if not bad else ("silent", f"differs: {', '.join(bad[:3])}")


def _sha(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def sweep(work: Path, commands: tuple[str, ...] = COMMANDS, workers: int | None = None,
          on_case: Callable[[Outcome], None] | None = None) -> tuple[Baseline, list[Outcome]]:
    """Every (target, mutation, command) case on copies of one baseline run under ``work``, spread over
    ``workers`` processes (default: one per CPU core)."""
    base = Baseline(work)
    cases = [(base, work, target, mutation, command) for target, mutations, allowed in base.targets()
             for mutation in mutations for command in commands if command in allowed]
    workers = workers or os.cpu_count() or 1
    outcomes: list[Outcome] = []
    if workers == 1:
        results: Iterator[Outcome] = (_case(*c) for c in cases)
        for outcome in results:
            outcomes.append(outcome)
            if on_case:
                on_case(outcome)
        return base, outcomes
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for outcome in pool.map(_case_star, cases, chunksize=8):
            outcomes.append(outcome)
            if on_case:
                on_case(outcome)
    return base, outcomes


def _case_star(args: tuple[Baseline, Path, str, str, str]) -> Outcome:
    return _case(*args)


def _case(base: Baseline, work: Path, target: str, mutation: str, command: str) -> Outcome:
    with _scratch(work) as scratch:
        case, outside = scratch / "run", scratch / "outside"
        shutil.copytree(base.run, case, symlinks=True)
        outside.mkdir()
        if not (case / target).exists() and not (case / target).is_symlink():
            return Outcome(target, mutation, command, "correct", "target absent")
        _mutate(case / target, mutation, outside)
        before = _tree(outside)
        t0 = time.perf_counter()
        kind, detail = _judge(base, case, target, command)
        seconds = time.perf_counter() - t0
        if _tree(outside) != before:
            kind, detail = "outside", f"wrote outside the run directory ({detail})"
        return Outcome(target, mutation, command, kind, detail, seconds)


@contextlib.contextmanager
def _scratch(work: Path) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="case-", dir=work))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def summarise(outcomes: list[Outcome]) -> str:
    """Markdown: outcomes per command, then every bad case."""
    counts = Counter((o.command, o.kind) for o in outcomes)
    kinds = ("error", "correct", *BAD)
    lines = ["| command | cases | " + " | ".join(kinds) + " | seconds |", "|---|---|" + "---|" * (len(kinds) + 1)]
    for cmd in dict.fromkeys(o.command for o in outcomes):
        mine = [o for o in outcomes if o.command == cmd]
        lines.append(f"| {cmd} | {len(mine)} | " + " | ".join(str(counts[(cmd, k)]) for k in kinds)
                     + f" | {sum(o.seconds for o in mine):.1f} |")
    bad = [o for o in outcomes if o.kind in BAD]
    if bad:
        lines += ["", "| target | mutation | command | outcome | detail |", "|---|---|---|---|---|"]
        lines += [f"| {o.target} | {o.mutation} | {o.command} | {o.kind} | {o.detail.replace('|', '/')[:160]} |"
                  for o in bad]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commands", default=",".join(COMMANDS), help="comma-separated subset of " + ",".join(COMMANDS))
    ap.add_argument("--workers", type=int, default=None, help="processes (default: one per CPU core)")
    ap.add_argument("--json", help="also write every outcome to this JSON file")
    a = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tamper-") as tmp:
        _, outcomes = sweep(Path(tmp), tuple(a.commands.split(",")), a.workers)
    print(summarise(outcomes))
    print(f"\n{len(outcomes)} cases in {time.perf_counter() - t0:.1f} s")
    if a.json:
        Path(a.json).write_text(json.dumps([o.__dict__ for o in outcomes], indent=1), encoding="utf-8")
    return 1 if any(o.kind in BAD for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
