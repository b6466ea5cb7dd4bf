"""Build benchmark corpora with a ground truth: from freely licensed Debian packages, and from files on this machine.

Every corpus is JSON lines, gzip (``id``, ``text``, ``domain``, ``source``) like ``../shared/data/minipile``:

* ``debdocs``    -- software documentation from seven packages (Perl pods, PostgreSQL and SQLite HTML, git's
  AsciiDoc, the Debian Administrator's Handbook, Tcl man pages, R's info manuals); ``domain`` is the package.
* ``glossaries`` -- six dictd dictionaries (WordNet, FOLDOC, V.E.R.A., the Jargon File, the Devil's
  Dictionary, the elements); ``domain`` is the dictionary.
* ``polyglot``   -- a corpus unlike English prose, from files already on this machine (no network): source code
  (one domain per language: Python stdlib, C headers, JavaScript, Perl, shell, CMake), text in other languages
  (one domain per language: translated man pages plus the translations of ``.mo`` catalogs), Debian
  changelogs, and a small domain of symbol-heavy tables (glibc charmaps and locale sources). Domain sizes are
  skewed on purpose: a few large domains and a long tail of small ones.
* ``manpages``   -- English man pages installed on this machine (no network), ``domain`` the manual section
  (1 user commands, 2 system calls, 3 library functions, 5 file formats, 7 overviews, 8 administration; section 4
  and 6 are too small to keep): English reference prose of one register whose domains differ in topic, not in
  language, capped so that section 1 dominates.
* ``stdlib``     -- clusterclip's default corpus (docstrings of the Python standard library, read by
  ``clusterclip.corpus.default_corpus.stdlib_documents``); ``domain`` is the module's top-level package.

``debdocs`` and ``glossaries``: packages are fetched with ``apt-get download`` (versions pinned to whatever the
archive serves: the README written next to the output records them), unpacked with ``dpkg-deb -x``, turned into
paragraphs, and cut into documents of 120-700 words on paragraph boundaries. Large domains are capped by a
seeded sample so the mixture stays imbalanced but the corpora hold a few thousand documents. Output is
deterministic for a given set of package versions and ``--seed``.

``polyglot``: code is cut into documents of 50-300 lines on blank-line boundaries (preferring a boundary before
an unindented line, such as a top-level ``def``), prose into 120-700 "words" (whitespace words, plus one word per
two CJK/kana/Thai characters, scripts written without spaces) on paragraph boundaries, changelogs and tables
into 30-200 / 50-300 lines. Identical files are read once, identical documents kept once. Output is
deterministic for the files installed on the machine and ``--seed``; the README records the owning Debian
packages and their versions.

``README.md`` in the output folder describes every corpus built there (each build writes ``<name>.meta.json``;
the README is rebuilt from all of them).

    python benchmarks/corpora/build_corpora.py --out benchmarks/out/corpora                       # all
    python benchmarks/corpora/build_corpora.py --corpus polyglot --out benchmarks/out/corpora     # no network
    python benchmarks/corpora/build_corpora.py --corpus stdlib --out benchmarks/out/corpora       # no network
    python benchmarks/corpora/build_corpora.py --corpus manpages --out benchmarks/out/corpora     # no network
"""

from __future__ import annotations

import argparse
import fnmatch
import glob
import gzip
import hashlib
import html
import json
import os
import re
import struct
import subprocess
import sys
import sysconfig
import tempfile
import zlib
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


# ---------------------------------------------------------------------------------------------------------------
# polyglot: a corpus unlike English prose, from files already on this machine


@dataclass(frozen=True)
class LocalDomain:
    """A ``polyglot`` class: absolute globs (``{stdlib}`` is the running interpreter's standard library), each
    with the reader that turns a matching file into documents, a licence note and a cap on documents."""

    name: str
    kind: str
    licence: str
    sources: tuple[tuple[str, str], ...]
    cap: int


CODE_LINES, CHANGELOG_LINES, TABLE_LINES = (50, 300), (30, 200), (50, 300)
_MO_MAN_LICENCE = ("licence of each owning package (translations: manpages-l10n GPL-3+, dpkg/apt GPL-2+, "
                   "coreutils/tar/grep GPL-3+, glib/gtk LGPL-2.1+, ...)")
# (language directory, cap): a few large languages, a long tail of small ones; four scripts without spaces
# (ja, zh_CN, th) or with their own alphabet (ru, uk, el, ka, he, ta, hi, ko).
POLYGLOT_LANGUAGES: tuple[tuple[str, int], ...] = (
    ("de", 900), ("fr", 900), ("ru", 700), ("ja", 600), ("zh_CN", 500), ("es", 400), ("uk", 300), ("pl", 250),
    ("it", 200), ("ko", 150), ("tr", 120), ("el", 100), ("ka", 80), ("vi", 70), ("th", 50), ("he", 40),
    ("ta", 30), ("hi", 25))
POLYGLOT: list[LocalDomain] = [
    LocalDomain("code-python", "code", "PSF-2.0 (CPython standard library)", (("{stdlib}/**/*.py", "code"),),
                3500),
    LocalDomain("code-c", "code", "licence of each owning package (linux-libc-dev GPL-2 WITH Linux-syscall-note, "
                "libc6-dev LGPL-2.1+, ...)", (("/usr/include/**/*.h", "code"),), 2500),
    LocalDomain("changelogs", "changelog", "licence of each package (Debian changelogs)",
                (("/usr/share/doc/*/changelog.Debian.gz", "changelog"), ("/usr/share/doc/*/changelog.gz", "changelog")),
                1500),
    LocalDomain("code-javascript", "code", "npm Artistic-2.0, its bundled modules MIT/ISC/BSD (Debian nodejs)",
                (("/usr/lib/node_modules/**/*.js", "code"), ("/usr/lib/node_modules/**/*.cjs", "code"),
                 ("/usr/lib/node_modules/**/*.mjs", "code")), 1200),
    LocalDomain("code-perl", "code", "GPL-1+ or Artistic (perl), GPL-2+ (dpkg), BSD-2-Clause (debconf)",
                (("/usr/share/perl/*/**/*.pm", "perl"), ("/usr/share/perl5/**/*.pm", "perl"),
                 ("/usr/lib/x86_64-linux-gnu/perl*/**/*.pm", "perl")), 500),
    LocalDomain("code-shell", "code", "licence of each owning package (GPL-2+ mostly)",
                (("/usr/bin/*", "shell"), ("/usr/sbin/*", "shell"), ("/usr/lib/**/*.sh", "shell"),
                 ("/usr/share/**/*.sh", "shell"), ("/usr/share/bash-completion/completions/*", "shell")), 250),
    LocalDomain("code-cmake", "code", "BSD-3-Clause (cmake-data)", (("/usr/share/cmake-*/Modules/**/*.cmake", "code"),),
                200),
    *[LocalDomain(f"lang-{lang}", "prose", _MO_MAN_LICENCE,
                  ((f"/usr/share/man/{lang}/**/*.gz", "man"), (f"/usr/share/locale/{lang}/LC_MESSAGES/*.mo", "mo")),
                  cap) for lang, cap in POLYGLOT_LANGUAGES],
    LocalDomain("symbols", "table", "glibc locales: LGPL-2.1+, locale data without copyright claim",
                (("/usr/share/i18n/charmaps/*.gz", "table"), ("/usr/share/i18n/locales/*", "table")), 120),
]

_NOSPACE = re.compile(r"[\u0e00-\u0e7f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def text_units(text: str) -> int:
    """Length in words: whitespace-separated words plus one per two characters of scripts written without
    spaces (CJK ideographs, kana, Thai), so Japanese and Chinese documents get sensible lengths too."""
    return len(text.split()) + len(_NOSPACE.findall(text)) // 2


def chunk_units(paragraphs: list[str], lo: int = MIN_WORDS, hi: int = MAX_WORDS, sep: str = "\n\n") -> Iterator[str]:
    """Documents of ``lo..hi`` :func:`text_units` from consecutive paragraphs (a paragraph over ``hi`` is its own
    document, cut at ``hi`` whitespace words or, without spaces, at ``2 * hi`` characters)."""
    cur: list[str] = []
    n = 0
    for para in paragraphs:
        size = text_units(para)
        if size > hi:
            if n >= lo:
                yield sep.join(cur)
            cur, n = [], 0
            words = para.split()
            step_chars = 2 * hi
            pieces = ([" ".join(words[i:i + hi]) for i in range(0, len(words), hi)] if len(words) > hi // 2
                      else [para[i:i + step_chars] for i in range(0, len(para), step_chars)])
            for piece in pieces:
                if text_units(piece) >= lo:
                    yield piece
            continue
        if n + size > hi:
            if n >= lo:
                yield sep.join(cur)
            cur, n = [], 0
        cur.append(para)
        n += size
    if n >= lo:
        yield sep.join(cur)


def chunk_lines(text: str, lo: int, hi: int) -> Iterator[str]:
    """Documents of ``lo..hi`` lines from a file, cut at blank lines (runs of blank lines become one), preferring,
    once a document has ``(lo + hi) / 2`` lines, to cut before a block that starts unindented (a top-level
    ``def``, ``sub``, function or struct). Blocks longer than ``hi`` are cut every ``hi`` lines; a remainder
    under ``lo`` lines at the end of the file is dropped."""
    blocks: list[list[str]] = []
    block: list[str] = []
    for line in text.splitlines():
        line = line.rstrip()
        if line.strip():
            block.append(line[:400])
        elif block:
            blocks.append(block)
            block = []
    if block:
        blocks.append(block)
    soft = (lo + hi) // 2
    doc: list[str] = []
    for block in blocks:
        size = len(doc)
        if size >= lo and (size + 1 + len(block) > hi or (size >= soft and not block[0][:1].isspace())):
            yield "\n".join(doc)
            doc = []
        doc += ([""] if doc else []) + block
        while len(doc) > hi:
            yield "\n".join(doc[:hi])
            doc = doc[hi:]
            while doc and not doc[0]:
                doc = doc[1:]
    if len(doc) >= lo:
        yield "\n".join(doc)


def _decode(data: bytes) -> str | None:
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError):
            return None
    if b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


_FONT_MACRO = re.compile(r"^\.(B|I|BR|RB|IR|RI|BI|IB|SM|SB)\s+(.*)$")
_HEADING_MACRO = re.compile(r"^\.(SH|SS)\s*(.*)$")


def nroff_paragraphs(text: str) -> list[str]:
    """A man page's text like :func:`read_nroff`, but keeping the words of font macros (``.B word``) and
    headings (``.SH``), and removing more escapes (``\\%``, ``\\:``, ``\\c``, ``\\[..]``, ``\\*(..``)."""
    lines = []
    for line in text.splitlines():
        if line.startswith((".\\\"", "'\\\"", '.\\"')):
            continue
        heading = _HEADING_MACRO.match(line)
        font = _FONT_MACRO.match(line)
        if heading:
            lines += ["", heading.group(2).replace('"', ""), ""]
            continue
        if font:
            line = font.group(2).replace('"', "")
        elif line.startswith((".", "'")):
            lines.append("")
            continue
        line = re.sub(r"\\f(\[[^]]*\]|\(..|.)", "", line)
        line = re.sub(r"\\\*\(..|\\\*\[[^]]*\]|\\\(..|\\\[[^]]*\]|\\\*.|\\[&|^%:c]", "", line)
        line = line.replace("\\-", "-").replace("\\ ", " ").replace("\\e", "\\")
        lines.append(line)
    return _paragraphs("\n".join(lines))


def mo_messages(data: bytes) -> list[str]:
    """The translations in a GNU ``.mo`` catalog, in catalog order: first plural form, decoded with the
    catalog's charset; untranslated copies (translation == original) and the header are skipped."""
    if len(data) < 28:
        return []
    magic = struct.unpack("<I", data[:4])[0]
    end = "<" if magic == 0x950412DE else ">" if magic == 0xDE120495 else None
    if end is None:
        return []
    _, count, orig_at, trans_at = struct.unpack(end + "4I", data[4:20])
    pairs = []
    for i in range(count):
        olen, ooff = struct.unpack(end + "2I", data[orig_at + 8 * i:orig_at + 8 * i + 8])
        tlen, toff = struct.unpack(end + "2I", data[trans_at + 8 * i:trans_at + 8 * i + 8])
        pairs.append((data[ooff:ooff + olen], data[toff:toff + tlen]))
    charset = "utf-8"
    for msgid, msgstr in pairs:
        if msgid == b"":
            found = re.search(rb"charset=([-\w]+)", msgstr)
            if found:
                charset = found.group(1).decode("ascii")
    out = []
    for msgid, msgstr in pairs:
        if not msgid:
            continue
        first = msgstr.split(b"\x00")[0]
        original = msgid.split(b"\x04")[-1].split(b"\x00")[0]
        if not first.strip() or first == original:
            continue
        try:
            out.append(first.decode(charset).strip())
        except (UnicodeDecodeError, LookupError):
            continue
    return out


MANPAGE_SECTIONS: tuple[tuple[str, str, int], ...] = (
    ("1", "user-commands", 1800), ("3", "library-functions", 700), ("8", "administration", 400),
    ("2", "system-calls", 300), ("7", "overviews", 250), ("5", "file-formats", 150))
"""(section, domain name, cap): man1 dominates as it does on disk; a tail of small sections."""
MANPAGES: list[LocalDomain] = [
    LocalDomain(f"man{sec}-{name}", "prose", "licence of each owning package (man-pages project: GPL / BSD / "
                "verbatim-copy per page; coreutils GPL-3+, ...)", ((f"/usr/share/man/man{sec}/*.gz", "man"),), cap)
    for sec, name, cap in MANPAGE_SECTIONS]

_POD = re.compile(r"^=[a-zA-Z].*?(?:^=cut\b.*?$|\Z)", re.M | re.S)
_SHELL_BANG = re.compile(r"^#!\s*\S*?\b(sh|bash|dash|ksh|zsh)\b")


def local_documents(path: Path, reader: str) -> list[str]:
    """Documents of one file for a ``polyglot`` reader: ``code``, ``perl`` (POD removed), ``shell`` (only sh/bash
    scripts), ``changelog``, ``table``, ``man`` or ``mo``; an unreadable or non-UTF-8 file gives none."""
    try:
        data = path.read_bytes()
    except OSError:
        return []
    if reader == "mo":
        return list(chunk_units(mo_messages(data), sep="\n"))
    text = _decode(data)
    if text is None:
        return []
    if reader == "man":
        return list(chunk_units(nroff_paragraphs(text)))
    if reader == "shell":
        shebang = _SHELL_BANG.match(text)
        if not (shebang or path.suffix == ".sh" or "bash-completion" in path.parts):
            return []
        return list(chunk_lines(text, *CODE_LINES))
    if reader in ("code", "perl"):
        if max((len(line) for line in text.splitlines()), default=0) > 1000:  # minified or generated
            return []
        if reader == "perl":
            text = _POD.sub("", text)
        return list(chunk_lines(text, *CODE_LINES))
    if reader == "changelog":
        return list(chunk_lines(text, *CHANGELOG_LINES))
    if reader == "table":
        return list(chunk_lines(text, *TABLE_LINES))
    raise ValueError(f"unknown reader {reader!r}")


def _expand(pattern: str) -> list[Path]:
    """Regular files (not symlinks) matching an absolute glob, sorted; ``**`` walks directories without following
    symlinks (``glob``'s ``**`` follows them, into loops and huge trees); ``{stdlib}`` is the interpreter's
    standard library. Paths under ``site-packages``, ``__pycache__`` and Perl's generated ``unicore`` are left out."""
    pattern = pattern.replace("{stdlib}", sysconfig.get_paths()["stdlib"])
    if "/**/" in pattern:
        head, tail = pattern.split("/**/", 1)
        found = []
        for root in sorted(glob.glob(head)):
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames.sort()
                found += [os.path.join(dirpath, f) for f in filenames if fnmatch.fnmatchcase(f, tail)]
    else:
        found = glob.glob(pattern)
    skip = {"site-packages", "dist-packages", "unicore", "__pycache__"}
    paths = [Path(p) for p in sorted(set(found))]
    return [p for p in paths if not skip.intersection(p.parts) and p.is_file() and not p.is_symlink()]


def dpkg_owners() -> tuple[dict[str, str], dict[str, str]]:
    """Path -> owning Debian package (from ``/var/lib/dpkg/info/*.list``) and package -> installed version."""
    owners: dict[str, str] = {}
    for lst in sorted(Path("/var/lib/dpkg/info").glob("*.list")):
        pkg = lst.name.removesuffix(".list").split(":")[0]
        for line in lst.read_text(encoding="utf-8", errors="replace").splitlines():
            owners.setdefault(line, pkg)
    versions: dict[str, str] = {}
    status = Path("/var/lib/dpkg/status")
    if status.is_file():
        for entry in status.read_text(encoding="utf-8", errors="replace").split("\n\n"):
            fields = dict(re.findall(r"^(Package|Version): (.*)$", entry, re.M))
            if "Package" in fields and "Version" in fields:
                versions[fields["Package"]] = fields["Version"]
    return owners, versions


def _owner(path: Path, owners: dict[str, str]) -> str:
    if str(path) in owners:
        return owners[str(path)]
    stdlib = sysconfig.get_paths()["stdlib"]
    if str(path).startswith(stdlib):
        return f"CPython {sys.version.split()[0]} ({stdlib})"
    return "(not in the dpkg database)"


def write_corpus(out: Path, name: str, records: list[dict[str, str]]) -> None:
    """``out/<name>.jsonl.gz`` with ids ``<name>-NNNNNN`` in record order (gzip without a timestamp)."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{name}.jsonl.gz", "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        for i, rec in enumerate(records):
            gz.write((json.dumps({"id": f"{name}-{i:06d}", **rec}, ensure_ascii=False) + "\n").encode())


def build_polyglot(out: Path, seed: int, domains: list[LocalDomain] = POLYGLOT,
                   name: str = "polyglot") -> list[dict[str, object]]:
    """Write ``out/<name>.jsonl.gz`` from files on this machine (``polyglot``, or ``manpages`` with
    :data:`MANPAGES`); returns one row of statistics per domain.

    Files are read in sorted order; a file whose bytes were already read (by any domain) is skipped, a
    document already kept in the domain is dropped. Domains over their cap keep a seeded sample (the seed
    mixes ``seed`` with the domain name, so the domains are independent of each other)."""
    owners, versions = dpkg_owners()
    seen_files: set[bytes] = set()
    records: list[dict[str, str]] = []
    stats: list[dict[str, object]] = []
    for dom in domains:
        docs: list[tuple[str, str, str]] = []
        seen_docs: set[str] = set()
        files = 0
        for pattern, reader in dom.sources:
            for path in _expand(pattern):
                try:
                    key = hashlib.sha1(path.read_bytes()).digest()
                except OSError:
                    continue
                if key in seen_files:
                    continue
                seen_files.add(key)
                got = [d for d in local_documents(path, reader) if d not in seen_docs]
                seen_docs.update(got)
                files += bool(got)
                docs.extend((str(path), _owner(path, owners), d) for d in got)
        total = len(docs)
        if total > dom.cap:
            rng = np.random.default_rng([seed, zlib.crc32(dom.name.encode())])
            docs = [docs[i] for i in np.sort(rng.choice(total, size=dom.cap, replace=False))]
        records.extend({"domain": dom.name, "source": src, "text": text} for src, _, text in docs)
        by_pkg: dict[str, int] = {}
        for _, pkg, _ in docs:
            by_pkg[pkg] = by_pkg.get(pkg, 0) + 1
        top = sorted(by_pkg.items(), key=lambda kv: (-kv[1], kv[0]))
        packages = ", ".join(f"{p} {versions.get(p, '')}".strip() + f" ({n})" for p, n in top[:4])
        if len(top) > 4:
            packages += f", {len(top) - 4} more"
        stats.append({"domain": dom.name, "kind": dom.kind, "sources": " ".join(f"`{g}`" for g, _ in dom.sources),
                      "packages": packages, "licence": dom.licence, "docs": len(docs), "available": total,
                      "files": files, "words": sum(text_units(t) for _, _, t in docs)})
    write_corpus(out, name, records)
    return stats


def build_stdlib(out: Path) -> list[dict[str, object]]:
    """Write ``out/stdlib.jsonl.gz``: clusterclip's default corpus (standard-library docstrings), ``domain`` = the
    top-level package of the module, ``source`` = the docstring's qualified name."""
    from clusterclip.corpus.default_corpus import stdlib_documents

    records = [{"domain": str(group), "source": doc_id, "text": text} for batch in stdlib_documents()
               for doc_id, text, group in zip(batch.ids, batch.texts, batch.groups, strict=True)]
    write_corpus(out, "stdlib", records)
    counts: dict[str, list[int]] = {}
    for r in records:
        c = counts.setdefault(r["domain"], [0, 0])
        c[0] += 1
        c[1] += len(r["text"].split())
    return [{"domain": d, "docs": n, "words": w} for d, (n, w) in sorted(counts.items(), key=lambda kv: (-kv[1][0],
                                                                                                            kv[0]))]


# ---------------------------------------------------------------------------------------------------------------
# README: one section per corpus built in the folder (from the <name>.meta.json files)

APT_INTRO = ("From Debian packages (`apt-get download`). Documents are 120-700 words, paragraph-aligned; `domain` is "
             "the ground truth (the source package or dictionary); large domains are capped by a seeded sample "
             "(`available` is the count before the cap).")
POLYGLOT_INTRO = (
    "From files already installed on the build machine (no network), so its content depends on that machine: "
    "`packages` names the owning Debian packages (with the installed version and the documents each gave). "
    "Code is cut into 50-300 line documents on blank-line boundaries (preferring a cut before an unindented "
    "line), changelogs into 30-200 lines, the symbol tables into 50-300 lines, prose (man pages rendered from "
    "nroff; the translated strings of `.mo` catalogs, one per line, untranslated ones dropped) into 120-700 "
    "words (CJK and Thai characters count half a word). `lang-*` domains are the language of the text (man "
    "pages and catalogs together). Identical files are read once; `available` is the count before the seeded cap.")
STDLIB_INTRO = ("clusterclip's default corpus (`clusterclip.corpus.default_corpus.stdlib_documents`: docstrings of at "
                "least 25 words of the running Python's standard library, PSF-2.0); `domain` is the module's "
                "top-level package.")


def write_meta(out: Path, name: str, command: str, intro: str, columns: list[str], rows: list[dict[str, object]],
               extra: dict[str, object] | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    meta = {"name": name, "command": command, "intro": intro, "columns": columns, "rows": rows, **(extra or {})}
    (out / f"{name}.meta.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def write_readme(out: Path) -> None:
    """``out/README.md`` from every ``<name>.meta.json`` in ``out`` (corpora built there at any time)."""
    lines = ["# Benchmark corpora built by `benchmarks/corpora/build_corpora.py`", "",
             "Not to be committed: rebuild them with the commands below. Every file is JSON lines, gzip, with "
             "`id`, `text`, `domain` (the ground truth) and `source`.", ""]
    for meta_path in sorted(out.glob("*.meta.json")):
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        cols: list[str] = meta["columns"]
        rows: list[dict[str, object]] = meta["rows"]
        lines += [f"## {meta['name']}", "", f"Built with `{meta['command']}`. {meta['intro']}", "",
                  "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for r in rows:
            lines.append("| " + " | ".join(f"{r[c]:,}" if isinstance(r.get(c), int) else str(r.get(c, ""))
                                           for c in cols) + " |")
        total = {c: sum(int(r[c]) for r in rows) for c in cols if c in ("docs", "words", "available", "files")}
        lines.append("| **total** (" + f"{len(rows)} domains) | " + " | ".join(
            f"{total[c]:,}" if c in total else "" for c in cols[1:]) + " |")
        lines.append("")
    (out / "README.md").write_text("\n".join(lines), encoding="utf-8")


APT_COLUMNS = ["domain", "package", "version", "licence", "docs", "available", "words"]
POLYGLOT_COLUMNS = ["domain", "kind", "docs", "available", "files", "words", "sources", "packages", "licence"]
LOCAL_CORPORA = ("polyglot", "manpages", "stdlib")
MANPAGES_INTRO = ("English man pages installed on the build machine (no network), rendered from nroff and cut into "
                  "120-700 words on paragraph boundaries; `domain` is the manual section. Identical files are read "
                  "once; `available` is the count before the seeded cap.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out/corpora"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus", choices=sorted([*CORPORA, *LOCAL_CORPORA]), action="append", help="default: all")
    args = ap.parse_args()
    names = args.corpus or sorted([*CORPORA, *LOCAL_CORPORA])
    command = lambda n: f"python benchmarks/corpora/build_corpora.py --corpus {n} --out {args.out} --seed {args.seed}"  # noqa: E731
    apt_names = [n for n in names if n in CORPORA]
    counts: dict[str, dict[str, object]] = {}
    if apt_names:
        packages = sorted({d.package for n in apt_names for d in CORPORA[n]})
        with tempfile.TemporaryDirectory(prefix="clusterclip-corpora-") as tmp:
            versions = unpack(packages, Path(tmp))
            for n in apt_names:
                rows = build(n, CORPORA[n], Path(tmp), args.out, args.seed)
                for r in rows:
                    r["version"] = versions.get(str(r["package"]), "?")
                write_meta(args.out, n, command(n), APT_INTRO, APT_COLUMNS, rows)
                counts[n] = {str(r["domain"]): r["docs"] for r in rows}
    if "polyglot" in names:
        rows = build_polyglot(args.out, args.seed)
        write_meta(args.out, "polyglot", command("polyglot"), POLYGLOT_INTRO, POLYGLOT_COLUMNS, rows)
        counts["polyglot"] = {str(r["domain"]): r["docs"] for r in rows}
    if "manpages" in names:
        rows = build_polyglot(args.out, args.seed, MANPAGES, "manpages")
        write_meta(args.out, "manpages", command("manpages"), MANPAGES_INTRO, POLYGLOT_COLUMNS, rows)
        counts["manpages"] = {str(r["domain"]): r["docs"] for r in rows}
    if "stdlib" in names:
        rows = build_stdlib(args.out)
        write_meta(args.out, "stdlib", command("stdlib"), STDLIB_INTRO, ["domain", "docs", "words"], rows)
        counts["stdlib"] = {"domains": len(rows), "docs": sum(int(r["docs"]) for r in rows)}
    write_readme(args.out)
    for n, c in counts.items():
        print(n, c)


if __name__ == "__main__":
    main()
