"""Digest every artifact a fixed set of commands writes, so two commits can be compared byte for byte.

Runs, into OUT: `clusterclip run` on ../shared/data/minipile-1k.jsonl (three default plans plus a spread,
a temperature and a token-budget plan), a continuation, `add` of a second file, and exports in every
format that needs no tokenizer. Prints ``{relative path: sha256}`` as JSON (records, whose times differ
between runs, are left out; their artifacts are not).

    python benchmarks/identity_check.py OUT > digests.json    # on each commit, then diff the two files
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "minipile-1k.jsonl"
SKIP_SUFFIXES = (".json", ".html", ".png", ".lock")


def clusterclip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "clusterclip", *args, "-q"], check=True, stdout=subprocess.DEVNULL)


def main(out: str) -> None:
    root = Path(out)
    run = root / "run"
    lines = DATA.read_text().splitlines()
    (root).mkdir(parents=True, exist_ok=True)
    first, second = root / "first.jsonl", root / "second.jsonl"
    first.write_text("\n".join(lines[:900]) + "\n")
    second.write_text("\n".join(lines[900:]) + "\n")
    clusterclip("run", str(first), "--out", str(run), "--k", "12")
    clusterclip("plan", str(run), "--strategy", "clusterclip", "--order", "spread", "--max-repeat", "3")
    clusterclip("plan", str(run), "--strategy", "temperature", "--tau", "0.3", "--budget", "2000")
    clusterclip("plan", str(run), "--strategy", "clusterclip", "--budget", "300000", "--budget-unit", "tokens")
    clusterclip("plan", str(run), "--continue", "clusterclip-R4-docs-Bepoch-s0", "--consumed", "400",
                "--max-repeat", "2")
    for fmt in ("jsonl", "parquet", "hf"):
        clusterclip("export", str(run), "--plan", "clusterclip-R4-docs-Bepoch-s0", "--format", fmt,
                    "--out", str(root / f"export-{fmt}"))
    clusterclip("add", str(run), str(second))
    clusterclip("plan", str(run), "--strategy", "uniform", "--seed", "3")
    json.dump(digests(root), sys.stdout, indent=1, sort_keys=True)


def digests(root: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under ``root`` but records, reports and the lock."""
    found = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if rel.endswith(SKIP_SUFFIXES) or "/report/" in rel:
            continue
        found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main(sys.argv[1])
