"""A mixed corpus from files on this machine: technical prose, code, non-English text and ASCII art.

Built for the near-duplicate benchmark (``benchmarks/dedup/dedup_quality.py``) when ``polyglot`` (built by
``benchmarks/corpora/build_corpora.py``) is not at hand: a corpus unlike minipile, whose minority parts (other
languages, ASCII art) have most of their words outside a vocabulary fitted on the whole. JSON lines
(``id``, ``text``, ``domain``, ``source``), gzip, deterministic for a machine's files and ``--seed``.

    python benchmarks/corpora/build_mixed_corpus.py --out benchmarks/out/corpora/mixed.jsonl.gz

Domains (each capped by a seeded sample of its files/blocks):

* ``man-en``: English man pages (nroff text, paragraphs cut into 40-400 word documents; at most 10 pages of
  one command family, e.g. ``gcloud-*``);
* ``man-<lang>``: man pages in other languages (``/usr/share/man/{de,fr,pt,pt_BR,it,es,pl,ru,uk,ja,zh_CN,...}``),
  cut into 15-300 word documents, so short ones too;
* ``changelog``: Debian changelogs and NEWS files from ``/usr/share/doc`` (newlines kept);
* ``python``, ``c-header``: source files cut into blocks of 15-120 lines (newlines and indentation kept);
* ``ascii-art``: blocks of text from docs and sources whose non-space characters are mostly symbols
  (tables, banners, diagrams), plus seeded synthetic drawings (boxes, lines, shaded areas, banner letters).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_corpora import _paragraphs

SYMBOLS = set("-|+/\\_=*#<>^.:'`()[]{}~o@$%&!,;\"")
LANGS = ("de", "fr", "pt", "pt_BR", "it", "es", "pl", "nl", "ru", "uk", "ja", "zh_CN", "cs", "sv", "tr", "hu")


def _read(path: Path) -> str:
    try:
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
    except (OSError, EOFError, gzip.BadGzipFile):
        return ""
    return data.decode("utf-8", errors="replace")


_MARKS = {"'": "\u0301", "`": "\u0300", "^": "\u0302", "~": "\u0303", ":": "\u0308", ",": "\u0327",
          "o": "\u030a", "v": "\u030c"}
_GLYPHS = {"ss": "ß", "ae": "æ", "AE": "Æ", "o/": "ø", "O/": "Ø", "em": "—", "en": "–", "hy": "-", "aq": "'",
           "dq": '"', "lq": "“", "rq": "”", "Fo": "«", "Fc": "»", "bu": "•", "co": "©", "rg": "®", "mu": "×"}


def _glyph(name: str) -> str:
    """A groff glyph (``\\(xx`` or ``\\[xx]``): accented letters, a few symbols, ``uXXXX`` code points."""
    import unicodedata

    if name.startswith("u") and re.fullmatch(r"u[0-9A-Fa-f]{4,6}", name):
        return chr(int(name[1:], 16))
    if len(name) == 2 and name[0] in _MARKS and name[1].isalpha():
        return unicodedata.normalize("NFC", name[1] + _MARKS[name[0]])
    return _GLYPHS.get(name, "")


def read_man(path: Path) -> list[str]:
    """A man page's running text (as ``build_corpora.read_nroff``, with groff's accent glyphs decoded)."""
    text = re.sub(r"\\\(([^ \n]{2})|\\\[([^]\n]*)\]", lambda m: _glyph(m.group(1) or m.group(2)), _read(path))
    lines = []
    for line in text.splitlines():
        if line.startswith((".", "'")):
            lines.append("")
            continue
        line = re.sub(r"\\f(\[[^]]*\]|\(..|.)", "", line)
        line = re.sub(r"\\\*.|\\[&|^]", "", line).replace("\\-", "-").replace("\\e", "\\")
        lines.append(line)
    return _paragraphs("\n".join(lines))


def prose_docs(paragraphs: list[str], rng: np.random.Generator, lo: int, hi: int) -> Iterator[str]:
    """Consecutive paragraphs joined into documents of a random target length in ``lo..hi`` words."""
    cur: list[str] = []
    n, target = 0, int(rng.integers(lo, hi))
    for para in paragraphs:
        words = para.split()
        if not words:
            continue
        cur.append(" ".join(words[:hi]))
        n += min(len(words), hi)
        if n >= target:
            yield "\n\n".join(cur)
            cur, n, target = [], 0, int(rng.integers(lo, hi))
    if n >= lo:
        yield "\n\n".join(cur)


def line_docs(text: str, rng: np.random.Generator, lo: int = 15, hi: int = 120) -> Iterator[str]:
    """A file cut into blocks of ``lo..hi`` lines (newlines kept); blocks with little text are skipped."""
    lines = text.splitlines()
    a = 0
    while a < len(lines):
        b = a + int(rng.integers(lo, hi))
        block = "\n".join(lines[a:b]).strip("\n")
        if len(block.split()) >= 20:
            yield block
        a = b


def art_blocks(text: str) -> Iterator[str]:
    """Blank-line separated blocks of 3+ lines whose non-space characters are >= 60 % symbols."""
    for blk in re.split(r"\n[ \t]*\n", text):
        lines = [line.rstrip() for line in blk.split("\n") if line.strip()]
        if len(lines) < 3:
            continue
        chars = [c for c in "".join(lines) if not c.isspace()]
        if len(chars) >= 30 and sum(c in SYMBOLS for c in chars) / len(chars) >= 0.6:
            yield "\n".join(lines)


def synthetic_art(rng: np.random.Generator) -> str:
    """A seeded drawing: boxes, lines, shaded areas and banner letters on a character canvas."""
    h, w = int(rng.integers(6, 24)), int(rng.integers(24, 72))
    canvas = np.full((h, w), " ", dtype="<U1")
    for _ in range(int(rng.integers(1, 6))):
        kind = rng.integers(4)
        y0, x0 = int(rng.integers(0, h - 2)), int(rng.integers(0, w - 3))
        y1, x1 = int(rng.integers(y0 + 2, h + 1)), int(rng.integers(x0 + 3, w + 1))
        if kind == 0:  # box
            canvas[y0, x0:x1] = canvas[y1 - 1, x0:x1] = rng.choice(list("-=~*#"))
            canvas[y0:y1, x0] = canvas[y0:y1, x1 - 1] = rng.choice(list("|!:#"))
            canvas[[y0, y0, y1 - 1, y1 - 1], [x0, x1 - 1, x0, x1 - 1]] = rng.choice(list("+*o."))
        elif kind == 1:  # shaded area
            fill = rng.choice(list("#*@%.:o+"), size=(y1 - y0, x1 - x0))
            mask = rng.random((y1 - y0, x1 - x0)) < rng.uniform(0.3, 0.9)
            canvas[y0:y1, x0:x1] = np.where(mask, fill, canvas[y0:y1, x0:x1])
        elif kind == 2:  # diagonal line
            ch = rng.choice(["/", "\\"])
            for i in range(min(y1 - y0, x1 - x0)):
                canvas[y0 + i, x0 + i if ch == "\\" else x1 - 1 - i] = ch
        else:  # banner letters (5 rows), each letter a seeded 5x5 bitmap
            if y0 + 5 > h:
                continue
            ink = rng.choice(list("#@*$%"))
            for k in range(min(int(rng.integers(2, 8)), (w - x0) // 6)):
                bitmap = np.random.default_rng(int(rng.integers(26)) + 1000).random((5, 5)) < 0.5
                canvas[y0:y0 + 5, x0 + 6 * k:x0 + 6 * k + 5][bitmap] = ink
    lines = ["".join(row).rstrip() for row in canvas]
    out = "\n".join(line for line in lines if line.strip())
    return out if out.strip() else "+--+\n|  |\n+--+"


def sample(items: list[str], cap: int, rng: np.random.Generator) -> list[str]:
    return items if len(items) <= cap else [items[i] for i in sorted(rng.choice(len(items), cap, replace=False))]


def files(root: str, pattern: str, limit: int, rng: np.random.Generator, per_family: int = 0) -> list[Path]:
    """A seeded sample of at most ``limit`` files of distinct content; ``per_family`` > 0 keeps at most that many
    files whose names
    share the part before the first ``-``, ``_`` or ``.`` (16,000 of the English man pages here are ``gcloud-*``:
    one template; they would make the corpus mostly natural near-duplicates)."""
    found, seen = [], set()
    for p in sorted(Path(root).glob(pattern)):  # one of each content (man pages are often installed under many names)
        digest = hash(_read(p)) if p.is_file() else None
        if digest is not None and digest not in seen:
            seen.add(digest)
            found.append(p)
    if per_family:
        fam: dict[str, list[Path]] = {}
        for p in found:
            fam.setdefault(re.split(r"[-_.]", p.name)[0], []).append(p)
        found = sorted(q for group in fam.values()
                       for q in (group if len(group) <= per_family else
                                 [group[i] for i in rng.choice(len(group), per_family, replace=False)]))
    return [found[i] for i in sorted(rng.choice(len(found), min(limit, len(found)), replace=False))] if found else []


def build(seed: int, scale: float) -> list[dict[str, str]]:
    rng = np.random.default_rng(seed)
    cap = lambda n: int(n * scale)  # noqa: E731
    domains: dict[str, list[str]] = {}
    en = [d for p in files("/usr/share/man", "man[1-8]/*.gz", 3000, rng, per_family=10)
          for d in prose_docs(read_man(p), rng, 40, 400)]
    domains["man-en"] = sample(en, cap(6500), rng)
    for lang in LANGS:
        docs = [d for p in files(f"/usr/share/man/{lang}", "man*/*.gz", 400, rng)
                for d in prose_docs(read_man(p), rng, 15, 300)]
        if docs:
            domains[f"man-{lang}"] = sample(docs, cap(700), rng)
    logs = [d for pat in ("*/changelog*", "*/NEWS*", "*/CHANGES*")
            for p in files("/usr/share/doc", pat, 1500, rng) for d in line_docs(_read(p), rng, 10, 80)]
    domains["changelog"] = sample(logs, cap(2500), rng)
    py_roots = [str(Path(os.__file__).parent), str(Path(np.__file__).parents[1])]
    py = [d for r in py_roots for p in files(r, "**/*.py", 2500, rng) for d in line_docs(_read(p), rng)]
    domains["python"] = sample(py, cap(4000), rng)
    hdr = [d for p in files("/usr/include", "**/*.h", 2500, rng) for d in line_docs(_read(p), rng)]
    domains["c-header"] = sample(hdr, cap(2500), rng)
    seen: set[str] = set()
    art = []
    for root, pattern in (("/usr/share/doc", "**/*"), (py_roots[0], "**/*.py"), (py_roots[1], "**/*.py"),
                          ("/usr/include", "**/*.h")):
        for p in sorted(Path(root).glob(pattern)):
            if p.is_file() and p.stat().st_size < 2_000_000:
                for b in art_blocks(_read(p)):
                    if b not in seen:
                        seen.add(b)
                        art.append(b)
    art = sample(art, cap(1000), rng) + [synthetic_art(rng) for _ in range(cap(700))]
    domains["ascii-art"] = art
    rows = []
    for name in sorted(domains):
        for i, text in enumerate(domains[name]):
            if text.strip():
                rows.append({"id": f"{name}-{i}", "text": text, "domain": name, "source": name})
    order = rng.permutation(len(rows))
    return [rows[i] for i in order]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every domain's cap")
    args = ap.parse_args()
    rows = build(args.seed, args.scale)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(args.out, "wt", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["domain"]] = counts.get(r["domain"], 0) + 1
    print(f"{len(rows)} documents -> {args.out}")
    for k, v in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"  {k}: {v}")


if __name__ == "__main__":
    main()
