"""Cut every document of a JSONL corpus into pieces of ``--words`` words: more rows of real text, each
keeping its document's fields (``id`` gets ``#N``), for benchmarks that need 10^5 rows or more.

    python benchmarks/corpora/chunk_corpus.py ../shared/data/minipile.jsonl.gz runs/minipile-chunks.jsonl --words 80
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", type=Path, help="JSONL or JSONL.gz with a text field")
    ap.add_argument("out", type=Path)
    ap.add_argument("--words", type=int, default=80)
    ap.add_argument("--text-field", default="text")
    args = ap.parse_args()
    opener = gzip.open if args.corpus.suffix == ".gz" else open
    args.out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with opener(args.corpus, "rt", encoding="utf-8") as src, open(args.out, "w", encoding="utf-8") as out:
        for line in src:
            record = json.loads(line)
            words = record[args.text_field].split(" ")
            for part, start in enumerate(range(0, len(words), args.words)):
                piece = {**record, args.text_field: " ".join(words[start:start + args.words])}
                if "id" in record:
                    piece["id"] = f"{record['id']}#{part}"
                out.write(json.dumps(piece) + "\n")
                n += 1
    print(f"{n:,} pieces written to {args.out}")


if __name__ == "__main__":
    main()
