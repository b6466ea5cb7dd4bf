"""The planner stays readable: small modules and short functions (the limits of the redesign issue)."""

from __future__ import annotations

import ast
from pathlib import Path

PLAN = Path(__file__).resolve().parent.parent / "src" / "clusterclip" / "plan"


def _functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def test_plan_modules_under_300_lines_and_functions_under_60():
    files = sorted(PLAN.glob("*.py"))
    assert files, PLAN
    for path in files:
        text = path.read_text()
        assert len(text.splitlines()) <= 300, f"{path.name} has {len(text.splitlines())} lines"
        for fn in _functions(ast.parse(text)):
            length = fn.end_lineno - fn.lineno + 1
            assert length <= 60, f"{path.name}:{fn.lineno} {fn.name} is {length} lines"
