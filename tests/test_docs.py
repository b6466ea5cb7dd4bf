"""What the README and docs/ name exists: every ``import`` of clusterclip in their Python blocks imports, and every
dotted ``clusterclip.…`` name in backticks resolves to a module or an attribute of one."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
DOTTED = re.compile(r"`(clusterclip(?:\.\w+)+)")
FILES = (".json", ".npy", ".md", ".py", ".html")
"""Backticked names that are file names, not Python names (``clusterclip.json``)."""


def _imports(page: Path) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of every clusterclip import in the page's Python blocks (inside functions too)."""
    found = []
    for block in BLOCK.findall(page.read_text(encoding="utf-8")):
        for line in block.splitlines():
            line = line.strip()
            if not (line.startswith("from clusterclip") or line.startswith("import clusterclip")):
                continue
            node = ast.parse(line).body[0]
            if isinstance(node, ast.ImportFrom):
                found.append((str(node.module), [a.name for a in node.names]))
            elif isinstance(node, ast.Import):
                found += [(a.name, []) for a in node.names]
    return found


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_imports_a_page_shows_work(page):
    pytest.importorskip("torch")
    for module, names in _imports(page):
        if module.startswith(("clusterclip.torch.hf", "clusterclip.export.megatron_dataset")):
            continue  # need transformers or megatron-core, imported by their own tests
        mod = importlib.import_module(module)
        missing = [n for n in names if not hasattr(mod, n) and not _resolves(f"{module}.{n}")]
        assert not missing, f"{page.name}: `from {module} import {', '.join(missing)}` fails"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_names_a_page_mentions_exist(page):
    pytest.importorskip("torch")
    names = sorted(set(DOTTED.findall(page.read_text(encoding="utf-8"))))
    skip = ("clusterclip.torch.hf", "clusterclip.export.megatron_dataset")
    unknown = [n for n in names if not n.startswith(skip) and not n.endswith(FILES) and not _resolves(n)]
    assert not unknown, f"{page.name} names what does not exist: {unknown}"
