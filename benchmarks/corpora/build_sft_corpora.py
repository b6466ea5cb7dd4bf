"""Build instruction corpora (chat records) from files on this machine, for ``clusterclip experiment --objective sft``.

Every corpus is JSON lines, gzip: ``{"id", "messages": [user, assistant], "domain"}`` (the OpenAI/Hugging Face chat
format, read by ``--record-kind auto``). No network; the output is deterministic for the files installed and
``--seed``.

* ``manpages``   -- "What does `CMD OPTION` do?" -> the option's paragraph of CMD's man page (``.TP``/``.IP`` items
  of ``/usr/share/man/man{1,8}`` whose tag starts with ``-``); ``domain`` is the section of the Debian package
  owning the page (utils, admin, net, misc ...; sections with fewer than ``--min-domain`` pairs are ``other``).
  Pages of a package are capped by a seeded sample (``--pages-per-package``), options per page by
  ``--options-per-page``: google-cloud-cli (section misc) ships 16,631 gcloud pages here, which the cap keeps
  from swamping the rest (the mixture stays skewed, as real instruction sets are).
* ``docstrings`` -- "What does `MODULE.NAME(SIGNATURE)` do?" -> the docstring's description (the text before its
  first section such as ``Parameters``) of every documented function and method of the Python standard library
  and of numpy, scipy, sklearn and pyarrow (parsed with ``ast``, nothing imported); ``domain`` is the library or
  the standard library's top-level package (those under ``--min-domain`` pairs: ``stdlib``).
* ``debian``     -- "What is the Debian package `PKG`?" -> its description (``/var/lib/dpkg/status``); ``domain`` is
  its section (a small corpus: one record per installed package).

Answers identical to an earlier one are dropped (inherited docstrings, shared option texts).

    python benchmarks/corpora/build_sft_corpora.py --out benchmarks/out/sft
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import random
import re
import sys
import sysconfig
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_corpora import _decode, dpkg_owners

Pair = tuple[str, str, str]
"""(question, answer, domain)."""
MIN_WORDS = 6
_ITEM = re.compile(r"^\.(TP|IP)\b\s*(.*)$")
_BREAK = re.compile(r"^\.(TP|IP|PP|P|LP|SH|SS|HP|RS|RE|TQ|nf|fi|in|br|sp|PD)\b")
_FONT = re.compile(r"^\.(B|I|BR|RB|IR|RI|BI|IB|SM|SB)\s+(.*)$")


def _clean(line: str) -> str:
    """A line of groff without its font changes and escapes."""
    line = re.sub(r"\\f(\[[^]]*\]|\(..|.)", "", line)
    line = re.sub(r"\\\*\(..|\\\*\[[^]]*\]|\\\(..|\\\[[^]]*\]|\\\*.|\\[&|^%:c/,]", "", line)
    return line.replace("\\-", "-").replace("\\ ", " ").replace("\\e", "\\").replace('"', "").strip()


def _text(line: str) -> str:
    font = _FONT.match(line)
    return _clean(font.group(2)) if font else ("" if line.startswith((".", "'")) else _clean(line))


def man_options(source: str) -> Iterator[tuple[str, str]]:
    """``(tag, description)`` of every option item (``.TP`` tag line, or ``.IP "tag"``) of a man page's source."""
    lines = source.splitlines()
    i = 0
    while i < len(lines):
        item = _ITEM.match(lines[i])
        i += 1
        if not item:
            continue
        if item.group(1) == "IP":
            tag = _clean(item.group(2).rsplit(" ", 1)[0] if re.search(r"\s\d+\w?$", item.group(2)) else item.group(2))
        else:
            while i < len(lines) and lines[i].startswith(".") and not _FONT.match(lines[i]):
                i += 1  # a .TP followed by requests (.PD, .B, .TQ ...): its tag is the next text line
            tag = _text(lines[i]) if i < len(lines) else ""
            i += 1
        body = []
        while i < len(lines) and not _BREAK.match(lines[i]):
            body.append(_text(lines[i]))
            i += 1
        text = " ".join(w for w in " ".join(body).split())
        if tag.startswith("-") and len(text.split()) >= MIN_WORDS:
            yield tag, text


def sections() -> dict[str, str]:
    """Installed Debian package -> its section (``/var/lib/dpkg/status``)."""
    status = Path("/var/lib/dpkg/status").read_text(encoding="utf-8", errors="replace")
    found = (dict(re.findall(r"^(Package|Section): (.*)$", e, re.M)) for e in status.split("\n\n"))
    return {f["Package"]: f["Section"] for f in found if "Package" in f and "Section" in f}


def manpages(seed: int, pages_per_package: int, options_per_page: int) -> Iterator[Pair]:
    owners, _ = dpkg_owners()
    section_of = sections()
    by_package: dict[str, list[Path]] = {}
    for section in ("man1", "man8"):
        for page in sorted(Path("/usr/share/man", section).glob("*.gz")):
            by_package.setdefault(owners.get(str(page), "unknown").split(":")[0], []).append(page)
    rng = random.Random(seed)
    for package, pages in sorted(by_package.items()):
        for page in sorted(rng.sample(pages, min(pages_per_package, len(pages)))):
            source = _decode(page.read_bytes())
            if source is None:
                continue
            command = page.name.split(".")[0].replace("_", " ")
            options = list(man_options(source))
            for tag, text in sorted(rng.sample(options, min(options_per_page, len(options)))):
                yield f"What does `{command} {tag}` do?", text, section_of.get(package, "unknown")


_SECTION = re.compile(r"\n\s*(Parameters|Returns|Yields|Raises|Examples?|Notes|See Also|Attributes|Arguments|Args|"
                      r"References|Warnings?|Other Parameters)\s*:?\s*\n", re.I)


def _description(doc: str) -> str:
    return " ".join(_SECTION.split("\n" + doc, maxsplit=1)[0].split())


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    try:
        return ast.unparse(node.args)
    except (ValueError, TypeError):
        return "..."


def docstring_pairs(root: Path, prefix: str, domain_of: dict[str, str]) -> Iterator[Pair]:
    """The documented functions and methods under ``root`` (module names from ``prefix``), tests and private names
    left out; ``domain_of`` maps a top-level name to its domain (absent: ``prefix`` or ``stdlib``)."""
    skip = {"test", "tests", "testing", "idlelib", "site-packages", "dist-packages", "lib2to3", "turtledemo",
            "__pycache__", "ensurepip", "venv", "_vendor", "externals"}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("").parts
        if skip.intersection(rel) or any(p.startswith("_") and p != "__init__" for p in rel):
            continue
        module = ".".join(p for p in (prefix, *rel) if p and p != "__init__")
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError, UnicodeDecodeError):
            continue
        top = module.split(".")[0]
        domain = domain_of.get(top, prefix or "stdlib")
        stack: list[tuple[str, ast.AST]] = [(module, tree)]
        while stack:
            name, node = stack.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef) and not child.name.startswith("_"):
                    stack.append((f"{name}.{child.name}", child))
                elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and not child.name.startswith("_"):
                    doc = ast.get_docstring(child)
                    text = _description(doc) if doc else ""
                    if len(text.split()) >= MIN_WORDS:
                        yield f"What does `{name}.{child.name}({_signature(child)})` do?", text, domain


def docstrings(min_domain: int) -> Iterator[Pair]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    pairs = list(docstring_pairs(stdlib, "", {}))
    tops = Counter(q.split("`")[1].split(".")[0] for q, _, _ in pairs)
    big = {t: t for t, n in tops.items() if n >= min_domain}
    yield from ((q, a, big.get(q.split("`")[1].split(".")[0], "stdlib")) for q, a, _ in pairs)
    site = Path(sysconfig.get_paths()["purelib"])
    for library in ("numpy", "scipy", "sklearn", "pyarrow"):
        if (site / library).is_dir():
            yield from docstring_pairs(site / library, library, {})


def debian() -> Iterator[Pair]:
    status = Path("/var/lib/dpkg/status").read_text(encoding="utf-8", errors="replace")
    for entry in status.split("\n\n"):
        fields = dict(re.findall(r"^(Package|Section): (.*)$", entry, re.M))
        described = re.search(r"^Description: (.*(?:\n .*)*)", entry, re.M)
        if "Package" not in fields or not described:
            continue
        lines = [line[1:] if line.startswith(" ") else line for line in described.group(1).splitlines()]
        text = "\n".join("" if line.strip() == "." else line for line in lines).strip()
        if len(text.split()) >= MIN_WORDS:
            yield f"What is the Debian package `{fields['Package']}`?", text, fields.get("Section", "unknown")


def write(out: Path, name: str, pairs: Iterator[Pair], min_domain: int) -> Counter[str]:
    """``out/<name>.jsonl.gz`` of the pairs whose answer is new; domains under ``min_domain`` pairs become ``other``."""
    seen: set[str] = set()
    kept = []
    for question, answer, domain in pairs:
        if answer not in seen:
            seen.add(answer)
            kept.append((question, answer, domain))
    sizes = Counter(d for _, _, d in kept)
    out.mkdir(parents=True, exist_ok=True)
    counts: Counter[str] = Counter()
    with open(out / f"{name}.jsonl.gz", "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        for i, (question, answer, domain) in enumerate(kept):
            domain = domain if sizes[domain] >= min_domain else "other"
            counts[domain] += 1
            record = {"id": f"{name}-{i:06d}", "messages": [{"role": "user", "content": question},
                                                            {"role": "assistant", "content": answer}],
                      "domain": domain}
            gz.write((json.dumps(record, ensure_ascii=False) + "\n").encode())
    return counts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("benchmarks/out/sft"))
    p.add_argument("--corpus", choices=("manpages", "docstrings", "debian", "all"), default="all")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pages-per-package", type=int, default=400)
    p.add_argument("--options-per-page", type=int, default=6)
    p.add_argument("--min-domain", type=int, default=90)
    a = p.parse_args()
    builds = {"manpages": lambda: manpages(a.seed, a.pages_per_package, a.options_per_page),
              "docstrings": lambda: docstrings(a.min_domain), "debian": debian}
    for name, build in builds.items():
        if a.corpus in (name, "all"):
            counts = write(a.out, name, build(), a.min_domain if name != "debian" else 20)
            print(f"{name}: {sum(counts.values()):,} pairs; " + ", ".join(f"{d} {n:,}" for d, n in
                                                                          counts.most_common()))


if __name__ == "__main__":
    main()
