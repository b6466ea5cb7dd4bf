"""Build benchmark corpora with a ground truth from freely licensed Debian packages (never committed).

Two corpora, each JSON lines (``id``, ``text``, ``domain``, ``source``) like ``../shared/data/minipile``:

* ``debdocs``    -- software documentation from seven packages (Perl pods, PostgreSQL and SQLite HTML, git's
  AsciiDoc, the Debian Administrator's Handbook, Tcl man pages, R's info manuals); ``domain`` is the package.
* ``glossaries`` -- six dictd dictionaries (WordNet, FOLDOC, V.E.R.A., the Jargon File, the Devil's
  Dictionary, the elements); ``domain`` is the dictionary.

Packages are fetched with ``apt-get download`` (versions pinned to whatever the archive serves: the README
written next to the output records them), unpacked with ``dpkg-deb -x``, turned into paragraphs, and cut
into documents of 120-700 words on paragraph boundaries. Large domains are capped by a seeded sample so
the mixture stays imbalanced but the corpora hold a few thousand documents. Output is deterministic for a
given set of package versions and ``--seed``.

    python benchmarks/build_corpora.py --out benchmarks/out/corpora
"""

from __future__ import annotations

import argparse
import gzip
import html
import json
import re
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MIN_WORDS, MAX_WORDS = 120, 700


@dataclass(frozen=True)
class Domain:
    """One ground-truth class: a package, the files to read in it, how to read them, and a cap on documents."""

    name: str
    package: str
    licence: str
    glob: str
    reader: str
    cap: int


CORPORA: dict[str, list[Domain]] = {
    "debdocs": [
        Domain("perl", "perl-doc", "GPL-1+ or Artistic", "usr/share/perl/*/pod/*.pod", "pod", 1800),
        Domain("postgresql", "postgresql-doc-15", "PostgreSQL (BSD-style)",
               "usr/share/doc/postgresql-doc-15/html/*.html", "html", 1200),
        Domain("git", "git-doc", "GPL-2", "usr/share/doc/git-doc/*.txt", "text", 600),
        Domain("debian-handbook", "debian-handbook", "GPL-2+ or CC-BY-SA-3.0",
               "usr/share/doc/debian-handbook/html/en-US/*.html", "html", 450),
        Domain("sqlite", "sqlite3-doc", "public domain", "usr/share/doc/sqlite3/**/*.html", "html", 350),
        Domain("tcl", "tcl8.6-doc", "Tcl/Tk licence (BSD-style)", "usr/share/man/man3/*.gz", "nroff", 200),
        Domain("r-manuals", "r-doc-info", "GPL-2", "usr/share/info/*.gz", "info", 120),
    ],
    "glossaries": [
        Domain("wordnet", "dict-wn", "WordNet 3.0 licence (permissive)", "usr/share/dictd/wn.index", "dict", 1500),
        Domain("foldoc", "dict-foldoc", "GFDL-1.1+", "usr/share/dictd/foldoc.index", "dict", 1100),
        Domain("vera", "dict-vera", "GFDL-1.1+ (no invariant sections)", "usr/share/dictd/vera.index", "dict",
               350),
        Domain("jargon", "dict-jargon", "public domain", "usr/share/dictd/jargon.index", "dict", 200),
        Domain("devil", "dict-devil", "public domain", "usr/share/dictd/devil.index", "dict", 90),
        Domain("elements", "dict-elements", "GPL-3 (data public domain)", "usr/share/dictd/elements.index", "dict",
               40),
    ],
}


def _read(path: Path) -> str:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace")


def _paragraphs(text: str) -> list[str]:
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if p.strip()]


_BLOCK = re.compile(r"</?(p|div|h[1-6]|li|tr|pre|br|dt|dd|table|blockquote|section)\b[^>]*>", re.I)


def read_html(path: Path) -> list[str]:
    """Text of an HTML page, a paragraph per block element; scripts, styles and navigation dropped."""
    text = re.sub(r"<(script|style|head|nav)\b.*?</\1>", " ", _read(path), flags=re.S | re.I)
    text = re.sub(r"<div[^>]*class=\"(navheader|navfooter|toc)\".*?</div>", " ", text, flags=re.S | re.I)
    text = _BLOCK.sub("\n\n", text)
    return _paragraphs(html.unescape(re.sub(r"<[^>]+>", " ", text)))


def read_pod(path: Path) -> list[str]:
    """Perl POD: headings kept as text, other commands dropped, formatting codes unwrapped."""
    out = []
    for para in re.split(r"\n\s*\n", _read(path)):
        if para.startswith("=") and not para.startswith(("=head", "=item")):
            continue
        para = re.sub(r"^=(head\d|item)\s*", "", para)
        for _ in range(3):
            para = re.sub(r"[A-Z]<<+\s*(.*?)\s*>>+|[A-Z]<([^<>]*)>", lambda m: m.group(1) or m.group(2) or "", para)
        out.extend(_paragraphs(para))
    return out


def read_nroff(path: Path) -> list[str]:
    """A man page's running text: requests (``.XX``) end paragraphs, escapes are removed."""
    lines = []
    for line in _read(path).splitlines():
        if line.startswith((".", "'")):
            lines.append("")
            continue
        line = re.sub(r"\\f(\[[^]]*\]|\(..|.)", "", line)
        line = re.sub(r"\\\(..|\\\*.|\\[&|^]", "", line).replace("\\-", "-").replace("\\e", "\\")
        lines.append(line)
    return _paragraphs("\n".join(lines))


def read_info(path: Path) -> list[str]:
    """GNU info: node headers, menus and separators dropped."""
    keep = [line for line in _read(path).splitlines()
            if not line.startswith(("\x1f", "File: ", "* ", "Tag Table", "End Tag Table"))]
    return _paragraphs("\n".join(keep))


def read_text(path: Path) -> list[str]:
    """Plain text or AsciiDoc: underlines of headings dropped."""
    return _paragraphs(re.sub(r"^[-=~^+]{3,}\s*$", "", _read(path), flags=re.M))


def _b64(s: str) -> int:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    n = 0
    for ch in s:
        n = n * 64 + alphabet.index(ch)
    return n


def read_dict(index: Path) -> list[str]:
    """Every entry of a dictd dictionary (``.index`` + ``.dict.dz``), in index order; one paragraph each."""
    data = gzip.decompress(index.with_name(index.name.replace(".index", ".dict.dz")).read_bytes())
    seen, out = set(), []
    for line in index.read_text(encoding="utf-8", errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or parts[0].startswith("00-database"):
            continue
        span = (_b64(parts[1]), _b64(parts[2]))
        if span in seen:
            continue
        seen.add(span)
        entry = " ".join(data[span[0]:span[0] + span[1]].decode("utf-8", errors="replace").split())
        if entry:
            out.append(entry)
    return out


READERS: dict[str, Callable[[Path], list[str]]] = {
    "html": read_html, "pod": read_pod, "nroff": read_nroff, "info": read_info, "text": read_text,
    "dict": read_dict}


def chunk(paragraphs: list[str]) -> Iterator[str]:
    """Documents of MIN_WORDS..MAX_WORDS words from consecutive paragraphs (long paragraphs are split)."""
    cur: list[str] = []
    n = 0
    for para in paragraphs:
        words = para.split()
        while len(words) > MAX_WORDS:
            if n >= MIN_WORDS:
                yield "\n\n".join(cur)
            cur, n = [], 0
            yield " ".join(words[:MAX_WORDS])
            words = words[MAX_WORDS:]
        if n + len(words) > MAX_WORDS:
            if n >= MIN_WORDS:
                yield "\n\n".join(cur)
            cur, n = [], 0
        cur.append(" ".join(words))
        n += len(words)
    if n >= MIN_WORDS:
        yield "\n\n".join(cur)


def unpack(packages: list[str], work: Path) -> dict[str, str]:
    """Download and unpack ``packages`` into ``work/<package>``; returns their versions."""
    debs = work / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    subprocess.run(["apt-get", "download", *packages], cwd=debs, check=True, capture_output=True)
    versions = {}
    for deb in sorted(debs.glob("*.deb")):
        name = deb.name.split("_")[0]
        versions[name] = subprocess.run(["dpkg-deb", "-f", str(deb), "Version"], check=True, capture_output=True,
                                        text=True).stdout.strip()
        subprocess.run(["dpkg-deb", "-x", str(deb), str(work / name)], check=True)
    return versions


def build(name: str, domains: list[Domain], work: Path, out: Path, seed: int) -> list[dict[str, object]]:
    """Write ``out/<name>.jsonl.gz``; returns one row of statistics per domain."""
    rng = np.random.default_rng(seed)
    records, stats = [], []
    for dom in domains:
        docs = []
        for path in sorted((work / dom.package).glob(dom.glob)):
            source = path.name.removesuffix(".gz")
            docs.extend((source, text) for text in chunk(READERS[dom.reader](path)))
        total = len(docs)
        if len(docs) > dom.cap:
            docs = [docs[i] for i in np.sort(rng.choice(len(docs), size=dom.cap, replace=False))]
        records.extend({"domain": dom.name, "source": s, "text": t} for s, t in docs)
        stats.append({"domain": dom.name, "package": dom.package, "licence": dom.licence, "docs": len(docs),
                      "available": total, "words": sum(len(t.split()) for _, t in docs)})
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{name}.jsonl.gz", "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        for i, rec in enumerate(records):
            gz.write((json.dumps({"id": f"{name}-{i:06d}", **rec}, ensure_ascii=False) + "\n").encode())
    return stats


def write_readme(out: Path, tables: dict[str, list[dict[str, object]]], versions: dict[str, str],
                 seed: int) -> None:
    lines = ["# Benchmark corpora built by `benchmarks/build_corpora.py`", "",
             f"Built with `python benchmarks/build_corpora.py --out {out} --seed {seed}` from Debian packages "
             "(`apt-get download`). Documents are 120-700 words, paragraph-aligned; `domain` is the ground truth "
             "(the source package or dictionary); large domains are capped by a seeded sample (`available` is "
             "the count before the cap). Not to be committed: rebuild them with the command above.", ""]
    for name, rows in tables.items():
        lines += [f"## {name}", "", "| domain | package | version | licence | docs | available | words |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['domain']} | {r['package']} | {versions.get(str(r['package']), '?')} | {r['licence']} | "
                  f"{r['docs']} | {r['available']} | {r['words']:,} |" for r in rows]
        lines += [f"| **total** | | | | {sum(int(r['docs']) for r in rows)} | | "
                  f"{sum(int(r['words']) for r in rows):,} |", ""]
    (out / "README.md").write_text("\n".join(lines), encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out/corpora"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus", choices=sorted(CORPORA), action="append", help="default: all")
    args = ap.parse_args()
    names = args.corpus or sorted(CORPORA)
    packages = sorted({d.package for n in names for d in CORPORA[n]})
    with tempfile.TemporaryDirectory(prefix="clusterclip-corpora-") as tmp:
        versions = unpack(packages, Path(tmp))
        tables = {n: build(n, CORPORA[n], Path(tmp), args.out, args.seed) for n in names}
    write_readme(args.out, tables, versions, args.seed)
    for n, rows in tables.items():
        print(n, {str(r["domain"]): r["docs"] for r in rows})


if __name__ == "__main__":
    main()
