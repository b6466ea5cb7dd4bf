"""The embedded default corpus: docstrings of the Python standard library installed with the interpreter
(real English text, available offline everywhere), read when no inputs are given."""

from __future__ import annotations

import ast
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from clusterclip.corpus.records import DocBatch, Document, ReadOptions, ReadStats, read_documents

DEFAULT_CORPUS = "stdlib-docstrings"
_SKIP_DIRS = {"test", "tests", "idlelib", "site-packages", "dist-packages", "lib2to3", "turtledemo",
              "__pycache__", "ensurepip", "venv"}


def stdlib_documents(min_words: int = 25, root: str | None = None) -> Iterator[DocBatch]:
    """The embedded default corpus: docstrings of the standard library, one per module/class/function.

    Sources are parsed with :mod:`ast` (nothing is imported, so no side effects). A docstring needs at
    least ``min_words`` words to count as a document; the group is the top-level module name.
    """
    docs = _stdlib_docstrings(Path(root or sysconfig.get_paths()["stdlib"]), min_words)
    return read_documents(((DEFAULT_CORPUS, None, doc) for doc in docs), _as_is, ReadOptions(), ReadStats())


def _as_is(doc: Document, opts: ReadOptions, source: str, loc: int | None) -> Document:
    return doc


def _stdlib_docstrings(base: Path, min_words: int) -> Iterator[Document]:
    files = sorted(p for p in base.rglob("*.py") if not _SKIP_DIRS.intersection(p.relative_to(base).parts))
    for path in files:
        rel = path.relative_to(base).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        if not parts:
            continue
        module = ".".join(parts)
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError, UnicodeDecodeError):
            continue
        for qualname, doc in _docstrings(tree, module):
            if len(doc.split()) >= min_words:
                yield qualname, f"{qualname}\n\n{doc}", parts[0].lstrip("_") or parts[0]


def _docstrings(tree: ast.Module, module: str) -> Iterator[tuple[str, str]]:
    doc = ast.get_docstring(tree)
    if doc:
        yield module, doc
    stack: list[tuple[str, ast.AST]] = [(module, tree)]
    while stack:
        prefix, node = stack.pop(0)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}.{child.name}"
                doc = ast.get_docstring(child)
                if doc:
                    yield name, doc
                if isinstance(child, ast.ClassDef):
                    stack.append((name, child))
