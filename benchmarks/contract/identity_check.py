"""Digest every artifact a fixed set of commands writes, so two commits can be compared byte for byte.

Runs, into OUT: `clusterclip run` on ../shared/data/minipile-1k.jsonl (three default plans plus a spread,
a temperature and a token-budget plan), a continuation, `dedup` and a `--duplicates group-cap` plan, exports
in every format that needs no tokenizer, `add` of a second file and one more plan. Prints ``{relative path:
sha256}`` as JSON. Records are digested too, without the fields that differ between two runs of the same
commands (times, seconds, modification times); run both commits into the same OUT path, since records hold
the input paths.

    python benchmarks/contract/identity_check.py OUT > digests.json    # on each commit, then diff the two files
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "minipile-1k.jsonl"
SKIP_SUFFIXES = (".html", ".png", ".lock")
VOLATILE = frozenset({"finished_at", "seconds", "mtime_ns", "created_at", "started_at", "fit_seconds",
                      "pairwise_seconds"})
"""Record fields that differ between two runs of the same commands."""
ROOT_PLAN = "clusterclip-R4-tokens-B2epochs-s0"
"""The ClusterClip plan `clusterclip run` builds by default (two epochs of tokens), continued and exported."""
FIXED_MTIME_NS = 1_700_000_000_000_000_000
"""The modification time given to the inputs, so that two runs fingerprint them alike."""


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
    for path in (first, second):  # the corpus record fingerprints its inputs' modification times
        os.utime(path, ns=(FIXED_MTIME_NS, FIXED_MTIME_NS))
    clusterclip("run", str(first), "--out", str(run), "--k", "12")
    clusterclip("plan", str(run), "--strategy", "clusterclip", "--order", "spread", "--max-repeat", "3")
    clusterclip("plan", str(run), "--strategy", "temperature", "--tau", "0.3", "--budget", "2000")
    clusterclip("plan", str(run), "--strategy", "clusterclip", "--budget", "300000", "--budget-unit", "tokens")
    clusterclip("plan", str(run), "--continue", ROOT_PLAN, "--consumed", "400", "--max-repeat", "3")
    clusterclip("dedup", str(run))
    clusterclip("plan", str(run), "--strategy", "clusterclip", "--duplicates", "group-cap")
    for fmt in ("jsonl", "parquet", "hf"):
        clusterclip("export", str(run), "--plan", ROOT_PLAN, "--format", fmt,
                    "--dest", str(root / f"export-{fmt}"))
    clusterclip("add", str(run), str(second))
    clusterclip("plan", str(run), "--strategy", "uniform", "--seed", "3")
    json.dump(digests(root), sys.stdout, indent=1, sort_keys=True)


def digests(root: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under ``root`` but reports and the lock (records without
    their volatile fields)."""
    found = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if rel.endswith(SKIP_SUFFIXES) or "/report/" in rel:
            continue
        data = path.read_bytes()
        if rel.endswith(".json"):
            data = json.dumps(_stable(json.loads(data)), sort_keys=True).encode()
        found[rel] = hashlib.sha256(data).hexdigest()
    return found


def _stable(value: object) -> object:
    """``value`` without the :data:`VOLATILE` fields, at any depth."""
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main(sys.argv[1])
