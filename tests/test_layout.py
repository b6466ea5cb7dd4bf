"""The package stays readable and layered (docs/architecture.md): no import cycles, no import from a lower floor
to a higher one, small modules, short functions, a storage floor that imports no stage, stages that read each
other only through the contract package, and a contract package that imports only the floor.

Imports are read from the source (module level, inside functions and under ``TYPE_CHECKING`` alike, every
name of a ``from X import a, b``), so an import placed inside a function to dodge a cycle still counts as the
cycle it is.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "clusterclip"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
STORE = "clusterclip.store"
FLOOR = {"clusterclip.errors", STORE}
"""What the storage floor may import from the package: the error types and itself."""
CONTRACT_FLOOR = {"clusterclip", "clusterclip.errors", "clusterclip.settings", STORE}
"""What the contract package may import beyond itself: the floor, the error types and the settings."""
STAGES = ("corpus", "embed", "cluster", "dedup", "plan", "export", "report")
"""The stage packages: each reads the others only through the contract package."""
CONTRACT_PACKAGE = "clusterclip.contract"
"""Every stage's contract (``clusterclip.contract.<stage>``), below every stage."""
FLOORS: tuple[tuple[str, ...], ...] = (
    ("clusterclip", "errors", "progress"),
    ("mixture", "settings", "store"),
    ("charts", "contract", "ray_session", "stages"),
    ("engines", "plan"),
    ("cluster", "corpus", "dedup", "embed", "export", "online"),
    ("report", "torch"),
    ("experiment", "stage_table"),
    ("add",),
    ("summary",),
    ("pipeline",),
    ("cli",),
    ("__main__",),
)
"""The floors of the package, bottom first: each top-level module or folder (``clusterclip`` is the package's
``__init__``) imports only its own modules and those of lower floors, never one on its own floor or above."""


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imported(module: str, path: Path) -> Iterator[str]:
    """The package modules ``module`` imports (``from pkg import sub`` names the submodule)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            found = _resolve(target)
            if found and found != module and found.startswith("clusterclip"):
                yield found


def _graph() -> dict[str, set[str]]:
    return {m: set(_imported(m, p)) for m, p in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_counting_imports_inside_functions():
    assert MODULES, PACKAGE
    assert _cycles(_graph()) == []


def test_the_storage_floor_imports_no_stage():
    for module, imports in _graph().items():
        if module == STORE or module.startswith(STORE + "."):
            above = {m for m in imports if m not in FLOOR and not m.startswith(STORE + ".")}
            assert not above, f"{module} imports {sorted(above)}"


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in STAGES else None


def _closure(graph: dict[str, set[str]], roots: set[str]) -> set[str]:
    seen, todo = set(roots), list(roots)
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _in_floor(module: str) -> bool:
    return module in CONTRACT_FLOOR or module == CONTRACT_PACKAGE \
        or module.startswith((STORE + ".", CONTRACT_PACKAGE + "."))


def test_the_layering_reader_follows_every_name_of_an_import(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text("from clusterclip.contract.plan import PLANS_DIR\n"
                    "from clusterclip import errors, settings\n"
                    "from clusterclip.contract import cluster\n"
                    "from clusterclip.cluster import config, stage\n")
    assert set(_imported("clusterclip.probe", path)) == {
        "clusterclip.contract.plan", "clusterclip.errors", "clusterclip.settings", "clusterclip.contract.cluster",
        "clusterclip.cluster.config", "clusterclip.cluster.stage"}


def test_stages_import_each_other_only_through_the_contract_package():
    for module, imports in _graph().items():
        own = _stage(module)
        if own is None:
            continue
        crossing = {m for m in imports if _stage(m) not in (None, own)}
        assert not crossing, f"{module} imports {sorted(crossing)}: another stage, not its contract"


def test_the_contract_package_imports_only_the_floor():
    graph = _graph()
    contracts = {m for m in MODULES if m == CONTRACT_PACKAGE or m.startswith(CONTRACT_PACKAGE + ".")}
    assert {f"{CONTRACT_PACKAGE}.{s}" for s in STAGES} <= contracts
    for contract in contracts:
        beyond = {m for m in _closure(graph, {contract}) if not _in_floor(m)}
        assert not beyond, f"{contract} reaches {sorted(beyond)}"


@pytest.mark.parametrize(("user", "never"), [("plan", "dedup"), ("plan", "embed"), ("export", "dedup"),
                                             ("report", "export")])
def test_the_nevers_of_the_architecture_hold(user, never):
    """No module of ``user`` reaches a module of ``never``, however indirectly (their contracts are in the
    contract package)."""
    reached = _closure(_graph(), {m for m in MODULES if _stage(m) == user})
    assert not sorted(m for m in reached if _stage(m) == never), f"{user} reaches {never}"


def _unit(module: str) -> str:
    """The top-level module or folder ``module`` belongs to (``clusterclip`` for the package's ``__init__``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _upward(graph: dict[str, set[str]], floors: tuple[tuple[str, ...], ...]) -> list[str]:
    """Every import from a module to another unit on its own floor or above, as ``a (floor i) -> b (floor j)``."""
    floor = {unit: i for i, units in enumerate(floors) for unit in units}
    found = []
    for module, imports in sorted(graph.items()):
        here = floor[_unit(module)]
        for target in sorted(imports):
            if _unit(target) != _unit(module) and floor[_unit(target)] >= here:
                found.append(f"{module} (floor {here}) -> {target} (floor {floor[_unit(target)]})")
    return found


def test_the_floor_check_finds_an_import_back_up():
    graph = {"clusterclip.a.x": {"clusterclip.b.y"}, "clusterclip.b.y": {"clusterclip.c"},
             "clusterclip.c": {"clusterclip.b.z"}, "clusterclip.b.z": set()}
    assert _upward(graph, (("c",), ("b",), ("a",))) == ["clusterclip.c (floor 0) -> clusterclip.b.z (floor 1)"]
    assert _upward(graph, (("b",), ("c",), ("a",))) == ["clusterclip.b.y (floor 0) -> clusterclip.c (floor 1)"]
    assert _upward({"clusterclip.a": {"clusterclip.b"}, "clusterclip.b": set()}, (("a", "b"),)) != []


def test_every_module_is_on_a_floor_once():
    named = [unit for units in FLOORS for unit in units]
    assert len(named) == len(set(named)), named
    assert {_unit(m) for m in MODULES} == set(named)


def test_no_import_runs_from_a_lower_floor_to_a_higher_one():
    """Counting imports inside functions and under ``TYPE_CHECKING``: a module of one floor imports modules of
    lower floors only (the floors are :data:`FLOORS`; docs/architecture.md)."""
    upward = _upward(_graph(), FLOORS)
    assert not upward, "imports back up:\n" + "\n".join(upward)


def test_the_architecture_lists_the_floors():
    text = (SRC.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    listed = text.split("which this list must match:")[1].split("A new folder")[0]
    floors = [tuple("clusterclip" if n == "__init__" else n for n in re.findall(r"`([^`]+)`", f))
              for f in listed.split(";")]
    assert floors == list(FLOORS) and f"The {len(FLOORS)} floors" in text


def test_modules_and_functions_are_short():
    for module, path in MODULES.items():
        text = path.read_text()
        lines = len(text.splitlines())
        assert lines <= MAX_MODULE_LINES, f"{module} has {lines} lines"
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                assert length <= MAX_FUNCTION_LINES, f"{module}:{node.lineno} {node.name} is {length} lines"


def test_plan_modules_stay_under_300_lines():
    for path in sorted((PACKAGE / "plan").glob("*.py")):
        assert len(path.read_text().splitlines()) <= 300, path.name


RAW_PLAN_READ = re.compile(r"(load_json|json\.loads?|read_text|open)\(.*(PLAN_RECORD|plan\.json)"
                           r"|(PLAN_RECORD|plan\.json)\W.*\.(read_text|read_bytes|open)\(")
"""A line that opens or parses a plan's ``plan.json`` itself instead of reading it as its ``PlanRecord``."""


def _raw_plan_reads(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if RAW_PLAN_READ.search(line)]


def test_plan_records_are_read_typed_outside_the_contract_package():
    assert _raw_plan_reads('rec = json.loads((folder / "plan.json").read_text())\nx = load_json(p / PLAN_RECORD)')
    assert _raw_plan_reads("raw = (folder / PLAN_RECORD).read_text()")
    assert not _raw_plan_reads("rec = read_record(order.parent / PLAN_RECORD)\nok = (p / PLAN_RECORD).is_file()")
    found = {m: hits for m, path in MODULES.items() if not m.startswith(CONTRACT_PACKAGE + ".")
             and (hits := _raw_plan_reads(path.read_text()))}
    assert not found, f"plan.json read raw (read it with contract.plan_locate.read_record or PlanRecord): {found}"


RECORD_KEY_READ = re.compile(r"""\.config(\[|\.get\()|\[["']config["']\]|\.get\(["']config["']""")
"""A line that reads a record's settings (its ``config``) by key instead of as its contract's typed settings."""
RAW_RECORD_READ = re.compile(
    r"(load_json|json\.loads?|read_text|read_bytes|open)\(.*(DRIFT_REPORT|drift\.json|ONLINE_RECORD|online\.json"
    r"|MIXER_RECORD|mixer\.json|EXPERIMENT_RESULTS|TUNE_RESULTS|results\.json)"
    r"|(DRIFT_REPORT|ONLINE_RECORD|MIXER_RECORD|EXPERIMENT_RESULTS|TUNE_RESULTS)\W.*\.(read_text|read_bytes|open)\(")
"""A line that opens or parses ``drift.json``, ``online.json``, ``mixer.json`` or an experiment's or tune's
``results.json`` itself instead of reading it as its record (``DriftReport``, ``OnlineRecord``, ``MixerRecord``,
``ExperimentResults``, ``TuneResults``)."""
KEYED_BY_DESIGN = {
    "clusterclip.store": "the storage floor checks and rewrites every record's settings whole, knowing no stage",
    "clusterclip.stages": "the stage protocol rewrites a grown record's settings whole, knowing no stage",
    "clusterclip.embed.base": "a fitted embedder's own model file (its options), which no record is",
    "clusterclip.embed.static_vocab": "a static embedder's own model file (its options), which no record is",
}
"""Modules that read a ``config`` key that is no stage's typed settings, and why."""


def _record_reads(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if RECORD_KEY_READ.search(line) or RAW_RECORD_READ.search(line)]


def test_the_record_read_finder_finds_reads_by_key():
    assert _record_reads('x = rec.config["strategy"]\ny = corpus.config.get("inputs")\nz = results["config"]')
    assert _record_reads("n = results.get('config', {})\nd = load_json(run.path(A.DRIFT_REPORT))")
    assert _record_reads('s = json.loads((folder / "online.json").read_text())\nr = (out / TUNE_RESULTS).open()')
    assert not _record_reads("a = rec.config.strategy\nb = DriftReport.read(run.path(A.DRIFT_REPORT))\n"
                             "c = PlanConfig.from_recorded(rec.config)\nok = (p / ONLINE_RECORD).exists()")


def test_no_record_is_read_by_key_outside_its_contract():
    """Every record is read as its contract's class outside ``clusterclip.contract``: the stages' settings as their
    typed ``config`` (``PlanSettings``, ``CorpusSettings`` ...), the drift report, the online state and the
    experiment's and tune's results as their records (docs/architecture.md)."""
    found = {m: hits for m, path in MODULES.items() if not m.startswith(CONTRACT_PACKAGE + ".")
             and not any(m == k or m.startswith(k + ".") for k in KEYED_BY_DESIGN)
             and (hits := _record_reads(path.read_text()))}
    assert not found, f"a record read by key or raw outside its contract (read it as its record class): {found}"
