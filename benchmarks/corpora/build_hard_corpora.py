"""Four more benchmark corpora, unlike the earlier ones, from Debian packages (``apt-get download``, unpacked).

Every corpus is JSON lines, gzip (``id``, ``text``, ``domain``, ``source``), like ``build_corpora.py``'s. All text
comes from the packages listed in :data:`CORPORA` (downloaded into a work folder, unpacked with ``dpkg-deb -x``),
none from the build machine's own files, so a corpus depends only on the archive's package versions (the README
written beside the output records them) and ``--seed``:

* ``scripts``  -- reference pages in CJK, Cyrillic and Polish script: the man pages of ``manpages-ja``,
  ``manpages-zh`` (simplified and traditional), ``manpages-ru``, ``manpages-uk`` and ``manpages-pl`` (with their
  ``-dev`` parts); ``domain`` is language and section group (``ja-commands``: sections 1, 6, 8; ``ja-api``: 2, 3;
  ``ja-files``: 4, 5, 7), so a clustering must separate topics *within* a script, not only scripts.
* ``codezoo``  -- source code in 17 programming languages none of the earlier corpora had (Go, Rust, Ruby, Tcl,
  Scheme, Emacs Lisp, Lua, PHP, TypeScript, Erlang, Octave, Prolog, Nim, Vim script, LaTeX, C++, Django's
  Python), documents of 20-400 lines; ``domain`` is the language; a 15x skew (Go 3,000 documents, PHP 200).
* ``shortlong`` -- very short and very long documents: single changelog entries, single translated interface
  messages (Russian, Japanese, Chinese), single Japanese-English and English-Russian dictionary entries, one-line
  docstring summaries (3-60 words) beside whole English man pages, whole C++ headers, whole Go files, whole Japanese
  man pages (1,500 to 60,000 characters); ``domain`` is the source; 15x skew.
* ``catalogs`` -- the translated messages of 18 programs' gettext catalogs in every language they ship (coreutils,
  apt, dpkg, GTK, GLib, Django, ISO country and language names, keyboard layouts, ...), documents of 20-300 words
  of one catalog in one language; ``domain`` is the *program*, so the documents of one domain are in dozens of
  languages and scripts: a clustering must find the topic through what translations keep (option names, format
  strings, identifiers, loan words).

Domains over their cap keep a seeded sample (seed mixed with the domain name). Identical files are read once,
identical documents kept once per domain.

    python benchmarks/corpora/build_hard_corpora.py --out benchmarks/out/corpora                 # all four
    python benchmarks/corpora/build_hard_corpora.py --corpus scripts --out benchmarks/out/corpora --work /tmp/debs
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_corpora import (
    _decode,
    chunk_lines,
    chunk_units,
    mo_messages,
    nroff_paragraphs,
    read_dict,
    text_units,
    write_corpus,
    write_meta,
    write_readme,
)


@dataclass(frozen=True)
class Source:
    """One ground-truth class: Debian packages, globs inside them (``**`` walks folders), a reader and a cap."""

    domain: str
    packages: tuple[str, ...]
    globs: tuple[str, ...]
    reader: str
    cap: int
    licence: str = "licence of the package (see its copyright file)"


def _man(lang: str, sections: str) -> tuple[str, ...]:
    return tuple(f"usr/share/man/{lang}/man{s}/*" for s in sections)


_SCRIPT_DOMAINS = (  # (domain, language folder, packages, man sections, cap): topics within a script
    ("ja-commands", "ja", ("manpages-ja",), "168", 1900), ("ja-api", "ja", ("manpages-ja-dev",), "23", 1300),
    ("ja-files", "ja", ("manpages-ja",), "457", 800),
    ("zh_CN-commands", "zh_CN", ("manpages-zh",), "168", 600), ("zh_CN-api", "zh_CN", ("manpages-zh",), "23", 250),
    ("zh_CN-files", "zh_CN", ("manpages-zh",), "457", 500),
    ("zh_TW-commands", "zh_TW", ("manpages-zh",), "168", 500), ("zh_TW-files", "zh_TW", ("manpages-zh",), "23457", 120),
    ("ru-api", "ru", ("manpages-ru-dev",), "23", 900), ("ru-files", "ru", ("manpages-ru",), "14578", 450),
    ("uk-commands", "uk", ("manpages-uk", "manpages-uk-dev"), "12345678", 450),
    ("pl-commands", "pl", ("manpages-pl",), "168", 570), ("pl-files", "pl", ("manpages-pl", "manpages-pl-dev"), "23457",
                                                           200),
)
SCRIPTS = [Source(domain, pkgs, _man(lang, secs), "man", cap, "GPL-2+ and others (man-pages licences)")
           for domain, lang, pkgs, secs, cap in _SCRIPT_DOMAINS]

CODEZOO = [
    Source("go", ("golang-1.19-src",), ("usr/share/go-1.19/src/**/*.go",), "code", 3000, "BSD-3-Clause"),
    Source("cpp", ("libstdc++-12-dev",), ("usr/include/c++/12/**/*",), "code", 1500, "GPL-3+ with GCC exception"),
    Source("rust", ("librust-serde-dev", "librust-regex-dev", "librust-syn-dev", "librust-tokio-dev",
                    "librust-clap-dev"), ("usr/share/cargo/registry/**/*.rs",), "code", 1200, "MIT or Apache-2.0"),
    Source("ruby", ("libruby3.1",), ("usr/lib/ruby/3.1.0/**/*.rb",), "code", 1000, "Ruby or BSD-2-Clause"),
    Source("elisp", ("emacs-el",), ("usr/share/emacs/*/lisp/**/*.el.gz",), "code", 800, "GPL-3+"),
    Source("python-django", ("python3-django",), ("usr/lib/python3/dist-packages/django/**/*.py",), "code", 800,
           "BSD-3-Clause"),
    Source("typescript", ("node-typescript",), ("usr/share/nodejs/typescript/lib/*.d.ts",), "code", 600,
           "Apache-2.0"),
    Source("erlang", ("erlang-src",), ("usr/lib/erlang/lib/**/*.erl",), "code", 500, "Apache-2.0"),
    Source("tcl", ("tcllib",), ("usr/share/tcltk/tcllib*/**/*.tcl",), "code", 400, "BSD-style (Tcl)"),
    Source("scheme", ("guile-3.0-libs",), ("usr/share/guile/3.0/**/*.scm",), "code", 350, "LGPL-3+"),
    Source("vim", ("vim-runtime",), ("usr/share/vim/vim*/**/*.vim",), "code", 300, "Vim licence"),
    Source("octave", ("octave-common",), ("usr/share/octave/*/m/**/*.m",), "code", 300, "GPL-3+"),
    Source("latex", ("texlive-latex-base",), ("usr/share/texlive/texmf-dist/tex/latex/**/*.sty",
                                             "usr/share/texlive/texmf-dist/tex/latex/**/*.cls"), "code", 250,
           "LPPL-1.3c"),
    Source("nim", ("nim",), ("usr/lib/nim/**/*.nim",), "code", 250, "MIT"),
    Source("prolog", ("swi-prolog-core",), ("usr/lib/swi-prolog/library/**/*.pl",), "code", 200, "BSD-2-Clause"),
    Source("lua", ("lua-penlight", "lua-ldoc", "lua-busted", "lua-luassert", "lua-say", "lua-cliargs", "lua-term",
                   "lua-mediator"), ("usr/share/lua/**/*.lua",), "code", 200, "MIT"),
    Source("php", ("php-pear",), ("usr/share/php/**/*.php",), "code", 200, "BSD-2-Clause"),
]

_CATALOGS = (  # (domain, package, catalog file names)
    ("coreutils", "coreutils", ("coreutils.mo",)), ("apt", "apt", ("apt.mo", "apt-utils.mo", "libapt-pkg6.0.mo")),
    ("dpkg", "dpkg", ("dpkg.mo", "dpkg-dev.mo")), ("bash", "bash", ("bash.mo",)), ("tar", "tar", ("tar.mo",)),
    ("grep", "grep", ("grep.mo",)), ("sed", "sed", ("sed.mo",)), ("findutils", "findutils", ("findutils.mo",)),
    ("wget", "wget", ("wget.mo", "wget-gnulib.mo")), ("gnupg", "gnupg-l10n", ("gnupg2.mo",)),
    ("gtk", "libgtk-3-common", ("gtk30.mo", "gtk30-properties.mo")), ("glib", "libglib2.0-data", ("glib20.mo",)),
    ("gstreamer", "libgstreamer1.0-0", ("gstreamer-1.0.mo",)), ("django", "python3-django", ("django.mo",)),
    ("countries", "iso-codes", ("iso_3166-1.mo",)), ("languages", "iso-codes", ("iso_639-2.mo",)),
    ("keyboard-layouts", "xkb-data", ("xkeyboard-config.mo",)), ("vim", "vim-runtime", ("vim.mo",)),
)
_CATALOG_CAPS = {"gtk": 1500, "glib": 1000, "coreutils": 1000, "django": 800, "apt": 700, "dpkg": 700, "bash": 500,
                 "tar": 400, "wget": 400, "gnupg": 400, "vim": 350, "gstreamer": 300, "findutils": 250, "grep": 150,
                 "sed": 120, "countries": 300, "languages": 200, "keyboard-layouts": 100}
CATALOGS = [Source(name, (pkg,), tuple(f"usr/**/LC_MESSAGES/{f}" for f in files), "mo-chunks",
                   _CATALOG_CAPS[name], "licence of the package") for name, pkg, files in _CATALOGS]

_CHANGELOGS = ("usr/share/doc/*/changelog.Debian.gz",)
_CHANGELOG_PACKAGES = tuple(sorted({p for s in (*SCRIPTS, *CODEZOO, *CATALOGS) for p in s.packages}
                                   | {"manpages", "manpages-dev", "dict-freedict-jpn-eng", "dict-freedict-eng-rus"}))
"""Every package of the four corpora: the changelog entries of all of them (identical changelogs read once)."""
SHORTLONG = [
    Source("changelog-entry", _CHANGELOG_PACKAGES, _CHANGELOGS,
           "changelog-entry", 1500, "licence of each package (Debian changelogs)"),
    Source("message-ru", ("coreutils", "apt", "dpkg", "bash", "tar", "libgtk-3-common", "libglib2.0-data"),
           ("usr/share/locale/ru/LC_MESSAGES/*.mo",), "mo-single", 1500, "licence of each package"),
    Source("message-ja", ("coreutils", "apt", "dpkg", "bash", "tar", "libgtk-3-common", "libglib2.0-data"),
           ("usr/share/locale/ja/LC_MESSAGES/*.mo",), "mo-single", 1200, "licence of each package"),
    Source("message-zh", ("coreutils", "apt", "dpkg", "bash", "tar", "libgtk-3-common", "libglib2.0-data"),
           ("usr/share/locale/zh_CN/LC_MESSAGES/*.mo", "usr/share/locale/zh_TW/LC_MESSAGES/*.mo"), "mo-single", 800,
           "licence of each package"),
    Source("dict-jpn-eng", ("dict-freedict-jpn-eng",), ("usr/share/dictd/*.index",), "dict-entry", 1500,
           "CC-BY-SA-3.0 (FreeDict / EDICT)"),
    Source("dict-eng-rus", ("dict-freedict-eng-rus",), ("usr/share/dictd/*.index",), "dict-entry", 600, "GPL-2+"),
    Source("docstring-summary", ("python3-django",), ("usr/lib/python3/dist-packages/django/**/*.py",),
           "docstring-summary", 1000, "BSD-3-Clause"),
    Source("man-en-whole", ("manpages", "manpages-dev"), ("usr/share/man/man*/*",), "man-whole", 700,
           "man-pages licences (GPL-2+, BSD, ...)"),
    Source("cpp-header-whole", ("libstdc++-12-dev",), ("usr/include/c++/12/**/*",), "code-whole", 300,
           "GPL-3+ with GCC exception"),
    Source("go-file-whole", ("golang-1.19-src",), ("usr/share/go-1.19/src/**/*.go",), "code-whole", 400,
           "BSD-3-Clause"),
    Source("ja-man-whole", ("manpages-ja", "manpages-ja-dev"), ("usr/share/man/ja/man*/*",), "man-whole", 100,
           "GPL-2+ and others (man-pages licences)"),
]

CORPORA: dict[str, list[Source]] = {"scripts": SCRIPTS, "codezoo": CODEZOO, "shortlong": SHORTLONG,
                                    "catalogs": CATALOGS}
CODE_LINES = (20, 400)
WHOLE_CHARS = (1500, 60_000)
"""Whole documents: at least this many characters, cut at the upper bound (at a line end)."""
SHORT_WORDS = (3, 60)


_NROFF_LEFTOVERS = re.compile(r"\\[,/&|^%]|\\s[-+]?\d|\\f[BIRP]")
MAX_BACKSLASHES = 0.02
"""A man page document with more backslashes than this share of its characters is nroff macro code (the Tcl pages
of ``manpages-zh`` define their own macros), not text: dropped."""


def _man_text(text: str) -> list[str]:
    """A man page's paragraphs (``nroff_paragraphs``) without the italic corrections and size or font escapes
    that ``groff``-generated translations leave (``\\,OPTION\\/``, ``\\s-1GDB\\s0``)."""
    return [p for p in (_NROFF_LEFTOVERS.sub("", q).strip() for q in nroff_paragraphs(text)) if p]


def _whole(text: str) -> str | None:
    if len(text) < WHOLE_CHARS[0]:
        return None
    if len(text) <= WHOLE_CHARS[1]:
        return text
    cut = text.rfind("\n", 0, WHOLE_CHARS[1])
    return text[:cut if cut > WHOLE_CHARS[0] else WHOLE_CHARS[1]]


def changelog_entries(text: str) -> list[str]:
    """The entries of a Debian changelog: from a ``package (version) ...`` line to its `` -- maintainer`` line."""
    out, cur = [], []
    for line in text.splitlines():
        cur.append(line.rstrip())
        if line.startswith(" -- "):
            entry = "\n".join(x for x in cur if x.strip())
            if entry:
                out.append(entry)
            cur = []
    return out


def docstring_summaries(text: str) -> list[str]:
    """The first paragraph of every docstring (module, class, function) of a Python file."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node)
            if doc:
                out.append(" ".join(doc.split("\n\n")[0].split()))
    return out


def _short(docs: list[str]) -> list[str]:
    return [d for d in docs if SHORT_WORDS[0] <= text_units(d) <= SHORT_WORDS[1]]


def read_source(path: Path, reader: str) -> list[str]:
    """The documents of one file for ``reader``; an unreadable, binary or non-UTF-8 file gives none."""
    data = path.read_bytes()
    if reader == "dict-entry":
        return _short(read_dict(path))
    if reader in ("mo-single", "mo-chunks"):
        messages = mo_messages(data)
        return _short(messages) if reader == "mo-single" else list(chunk_units(messages, 20, 300, sep="\n"))
    text = _decode(data)
    if text is None:
        return []
    if reader == "man":
        return [d for d in chunk_units(_man_text(text), 60, 700) if d.count("\\") < MAX_BACKSLASHES * len(d)]
    if reader == "man-whole":
        whole = _whole("\n\n".join(_man_text(text)))
        return [whole] if whole and whole.count("\\") < MAX_BACKSLASHES * len(whole) else []
    if max((len(line) for line in text.splitlines()), default=0) > 1000:  # minified or generated
        return []
    if reader == "code":
        return list(chunk_lines(text, *CODE_LINES))
    if reader == "code-whole":
        whole = _whole(text)
        return [whole] if whole else []
    if reader == "changelog-entry":
        return [e for e in changelog_entries(text) if text_units(e) <= 2 * SHORT_WORDS[1]]
    if reader == "docstring-summary":
        return _short(docstring_summaries(text))
    raise ValueError(f"unknown reader {reader!r}")


def _files(root: Path, pattern: str) -> list[Path]:
    """Regular files (no symlinks) under ``root`` matching ``pattern``; ``**`` walks folders without following
    symlinks; sorted."""
    if "/**/" not in pattern:
        found = [Path(p) for p in root.glob(pattern)]
    else:
        head, tail = pattern.split("/**/", 1)
        found = []
        for top in sorted(root.glob(head)):
            for dirpath, dirnames, filenames in os.walk(top):
                dirnames.sort()
                found += [Path(dirpath, f) for f in filenames if Path(dirpath, f).match(tail)]
    return sorted(p for p in found if p.is_file() and not p.is_symlink())


def unpack(packages: list[str], work: Path) -> dict[str, str]:
    """``apt-get download`` the ``packages`` not yet in ``work/debs`` and unpack each into ``work/<package>``;
    returns their versions."""
    debs = work / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    have = {d.name.split("_")[0] for d in debs.glob("*.deb")}
    missing = sorted(set(packages) - have)
    if missing:
        subprocess.run(["apt-get", "download", *missing], cwd=debs, check=True, capture_output=True)
    versions = {}
    for deb in sorted(debs.glob("*.deb")):
        name = deb.name.split("_")[0]
        if name not in packages:
            continue
        versions[name] = subprocess.run(["dpkg-deb", "-f", str(deb), "Version"], check=True, capture_output=True,
                                        text=True).stdout.strip()
        if not (work / name).is_dir():
            subprocess.run(["dpkg-deb", "-x", str(deb), str(work / f"{name}.tmp")], check=True)
            (work / f"{name}.tmp").rename(work / name)
    return versions


def _documents(src: Source, work: Path, seen_files: set[bytes]) -> tuple[list[tuple[str, str, str]], int]:
    """``(package, path inside it, text)`` of every document of ``src`` and the number of files that gave one."""
    docs: list[tuple[str, str, str]] = []
    seen_docs: set[str] = set()
    files = 0
    for pkg in src.packages:
        for pattern in src.globs:
            for path in _files(work / pkg, pattern):
                key = hashlib.sha1(path.read_bytes()).digest() + src.reader.encode()
                if key in seen_files:
                    continue
                seen_files.add(key)
                got = [d for d in read_source(path, src.reader) if d not in seen_docs]
                seen_docs.update(got)
                files += bool(got)
                rel = str(path.relative_to(work / pkg))
                docs.extend((pkg, rel, d) for d in got)
    return docs, files


def build(name: str, sources: list[Source], work: Path, out: Path, seed: int,
          versions: dict[str, str]) -> list[dict[str, object]]:
    """Write ``out/<name>.jsonl.gz``; returns one row of statistics per domain."""
    records: list[dict[str, str]] = []
    stats: list[dict[str, object]] = []
    seen_files: set[bytes] = set()
    for src in sources:
        docs, files = _documents(src, work, seen_files)
        total = len(docs)
        if total > src.cap:
            rng = np.random.default_rng([seed, zlib.crc32(f"{name}/{src.domain}".encode())])
            docs = [docs[i] for i in np.sort(rng.choice(total, size=src.cap, replace=False))]
        records.extend({"domain": src.domain, "source": f"{pkg}:{rel}", "text": t} for pkg, rel, t in docs)
        chars = np.array([len(t) for _, _, t in docs] or [0])
        stats.append({"domain": src.domain, "packages": ", ".join(f"{p} {versions.get(p, '?')}" for p in src.packages),
                      "licence": src.licence, "reader": src.reader, "docs": len(docs), "available": total,
                      "files": files, "words": sum(text_units(t) for _, _, t in docs),
                      "median chars": int(np.median(chars))})
    write_corpus(out, name, records)
    return stats


COLUMNS = ["domain", "reader", "docs", "available", "files", "words", "median chars", "packages", "licence"]
INTRO = ("From Debian packages (`apt-get download`, unpacked with `dpkg-deb -x`; versions in `packages`), none of "
         "the build machine's own files. `domain` is the ground truth (see "
         "`benchmarks/corpora/build_hard_corpora.py`); domains over their cap keep a seeded sample (`available`: the "
         "count before the cap). Readers: `man` "
         "(nroff text in 60-700 words, CJK characters count half a word), `man-whole`, `code-whole` (whole files "
         "of 1,500-60,000 characters), `code` (20-400 lines cut at blank lines), `mo-chunks` (20-300 words of "
         "one catalog's translated messages), `mo-single`, `dict-entry`, `docstring-summary` and "
         "`changelog-entry` (one message, entry or summary of 3-60 words).")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out/corpora"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus", choices=sorted(CORPORA), action="append", help="default: all four")
    ap.add_argument("--work", type=Path, default=None, help="keep downloaded and unpacked packages here (reused by "
                    "the next build); default: a temporary folder")
    args = ap.parse_args(argv)
    names = args.corpus or sorted(CORPORA)
    packages = sorted({p for n in names for s in CORPORA[n] for p in s.packages})
    with tempfile.TemporaryDirectory(prefix="clusterclip-hard-") as tmp:
        work = args.work or Path(tmp)
        versions = unpack(packages, work)
        for n in names:
            rows = build(n, CORPORA[n], work, args.out, args.seed, versions)
            command = (f"python benchmarks/corpora/build_hard_corpora.py --corpus {n} --out {args.out} "
                       f"--seed {args.seed}")
            write_meta(args.out, n, command, INTRO, COLUMNS, rows)
            print(n, {str(r["domain"]): r["docs"] for r in rows}, flush=True)
    write_readme(args.out)


if __name__ == "__main__":
    main()
