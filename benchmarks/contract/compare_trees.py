"""Compare two output trees of the same commands (before and after a change) file by file.

A file is byte-identical; or, for a JSON file, identical once the timing fields are set aside (``timing``), or once
what derives from files' modification times is set aside too (``mtime``: the artifacts' ``mtime_ns``, and an
``inputs_hash``/``upstream``/``data_hash`` built from a fingerprint of inputs that a command rewrote, such as an
experiment's split files; a record's size and SHA-256 of ``results.json`` or ``report.html``, which hold timings);
or, for a text file, identical once its timing figures are (``text-timing``); else it differs. Writer locks are
skipped (they hold a process id).

    python benchmarks/contract/compare_trees.py BEFORE AFTER
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

TIMING = {"finished_at", "seconds", "started_at", "updated_at", "seconds_this_session", "fit_seconds",
          "pairwise_seconds"}
MTIME = {"mtime_ns", "inputs_hash", "upstream", "data_hash", "argv"}  # argv: the interpreter's path to the code
TIMED_ARTIFACTS = ("experiment.json", "report.json")
"""Records that list a file holding timings (``results.json``, ``report.html``): their checksums are set aside."""


def scrub(obj: Any, drop: set[str]) -> Any:
    """``obj`` without the keys ``drop``, at any depth (compared as JSON text: key order counts)."""
    if isinstance(obj, dict):
        return {k: scrub(v, drop) for k, v in obj.items() if k not in drop}
    if isinstance(obj, list):
        return [scrub(v, drop) for v in obj]
    return obj


def untimed(text: bytes) -> bytes:
    """A report or status text without its timing figures (and the report's planner seconds row)."""
    text = re.sub(rb"<tr><td><b>seconds</b></td>.*?</tr>", b"T", text)
    return re.sub(rb"[0-9.]+ ?s\b|data-v=\"[0-9.]+\"|generated [0-9: -]+", b"T", text)


def kind(path: Path, x: bytes, y: bytes) -> str:
    if x == y:
        return "identical"
    if path.suffix == ".json":
        jx, jy = json.loads(x), json.loads(y)
        if json.dumps(scrub(jx, TIMING)) == json.dumps(scrub(jy, TIMING)):
            return "timing"
        drop = TIMING | MTIME | ({"sha256", "size"} if path.name in TIMED_ARTIFACTS else set())
        return "mtime" if json.dumps(scrub(jx, drop)) == json.dumps(scrub(jy, drop)) else "DIFFER"
    return "text-timing" if untimed(x) == untimed(y) else "DIFFER"


def main(before: Path, after: Path) -> int:
    files = sorted(p.relative_to(before) for p in before.rglob("*") if p.is_file() and p.name != ".lock")
    others = sorted(p.relative_to(after) for p in after.rglob("*") if p.is_file() and p.name != ".lock")
    found: dict[str, list[str]] = {k: [] for k in ("identical", "timing", "mtime", "text-timing", "DIFFER")}
    for rel in sorted(set(files) & set(others)):
        found[kind(rel, (before / rel).read_bytes(), (after / rel).read_bytes())].append(str(rel))
    lonely = sorted(map(str, set(files) ^ set(others)))
    print(f"{len(files)} files (locks aside): " + ", ".join(f"{k} {len(v)}" for k, v in found.items())
          + f", in one tree only {len(lonely)}")
    for k in ("timing", "mtime", "text-timing", "DIFFER"):
        print(f"{k}: {', '.join(found[k]) or '-'}")
    return 1 if found["DIFFER"] or lonely else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
