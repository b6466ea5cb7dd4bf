"""What the README and docs/ show works: every ``import`` of clusterclip in their Python blocks imports, every
dotted ``clusterclip.…`` name in backticks resolves to a module or an attribute of one, every ``clusterclip`` command
line follows the grammar, and every README command line and its Python API snippet run as written on a small
fixture."""

from __future__ import annotations

import ast
import contextlib
import glob
import gzip
import importlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from clusterclip.cli.main import build_parser, main

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
        if module.startswith(("clusterclip.torch.hf", "clusterclip.torch.sft",
                              "clusterclip.export.megatron_dataset")):
            continue  # need transformers, trl or megatron-core, imported by their own tests
        mod = importlib.import_module(module)
        missing = [n for n in names if not hasattr(mod, n) and not _resolves(f"{module}.{n}")]
        assert not missing, f"{page.name}: `from {module} import {', '.join(missing)}` fails"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_names_a_page_mentions_exist(page):
    pytest.importorskip("torch")
    names = sorted(set(DOTTED.findall(page.read_text(encoding="utf-8"))))
    skip = ("clusterclip.torch.hf", "clusterclip.torch.sft", "clusterclip.export.megatron_dataset")
    unknown = [n for n in names if not n.startswith(skip) and not n.endswith(FILES) and not _resolves(n)]
    assert not unknown, f"{page.name} names what does not exist: {unknown}"


# ------------------------------------------------------------------------------ command lines

ASSIGN = re.compile(r"^(\w+)=\$\((.+)\)\s*(?:#.*)?$")
CREATE = ("run", "embed", "experiment", "tune")
"""Commands that create a run from inputs: they start from the fixture's inputs alone, the others from its run."""
SMALLER = ("--quick", "--docs", "48", "--max-words", "30", "--curve-points", "2", "--curve-docs", "8",
           "--context", "32")
"""Appended to `experiment` and `tune` (later options win): proxy models of seconds instead of hours; every option
the page gives still applies."""
SCALED = {("--budget", "2000000000"): "tokens", ("--consumed", "600064"): "consumed"}
"""Numbers sized for a real corpus, filled from the fixture (a budget the cap can meet, 30 % of the plan)."""
SLOW = ("experiment", "tune", "--engine ray", "minilm")


def shell_blocks(page: Path) -> list[str]:
    """The page's fenced blocks marked ``bash``, ``sh`` or ``shell``, or not marked at all."""
    blocks: list[str] = []
    lines: list[str] | None = None
    language = ""
    for line in page.read_text(encoding="utf-8").splitlines():
        if not line.startswith("```"):
            if lines is not None:
                lines.append(line)
        elif lines is None:
            lines, language = [], line[3:].strip()
        else:
            if language in ("", "bash", "sh", "shell"):
                blocks.append("\n".join(lines))
            lines = None
    return blocks


def command_lines(page: Path) -> list[str]:
    """Every ``clusterclip ...`` line of the page's shell blocks (continuation lines joined, ``VAR=x`` prefixes
    dropped)."""
    found = []
    for block in shell_blocks(page):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"^\s*(\w+=\S+\s+)*", "", line)
            if line.startswith("clusterclip "):
                found.append(line)
    return found


def shell_variables(page: Path) -> dict[str, str]:
    """``{"$NAME": value}`` of the page's ``NAME=$(python -c ...)`` lines, evaluated with this interpreter."""
    values = {}
    for block in shell_blocks(page):
        for line in block.splitlines():
            if m := ASSIGN.match(line):
                argv = shlex.split(m.group(2))
                assert argv[0] == "python", line
                done = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, check=True)
                values[f"${m.group(1)}"] = done.stdout.strip()
    return values


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_command_lines_a_page_shows_follow_the_grammar(page, capsys):
    for line in command_lines(page):
        try:
            build_parser().parse_args(shlex.split(line, comments=True)[1:])
        except SystemExit:
            pytest.fail(f"{page.name}: `{line}` does not parse: {capsys.readouterr().err.strip()}")
        assert "deprecated" not in capsys.readouterr().err, f"{page.name}: `{line}` uses a former spelling"


@dataclass
class World:
    """A folder with the README's inputs (``inputs``) and a copy with ``runs/web`` built from them (``full``), and
    what fills the README's placeholders."""

    inputs: Path
    full: Path
    values: dict[str, str]
    scaled: dict[str, str]

    def argv(self, line: str, cwd: Path) -> list[str]:
        """The command line's arguments with placeholders filled and globs expanded (as the shell would)."""
        words = shlex.split(line, comments=True)
        out: list[str] = []
        for prev, word in zip(["", *words], words, strict=False):
            word = self.values.get(word, self.scaled.get(SCALED.get((prev, word), ""), word))
            if word.startswith("/shared/"):
                word = str(cwd / word[1:])
            if "*" in word and "://" not in word:  # a URL's glob expands in its store
                matches = sorted(glob.glob(word))
                assert matches, f"{line}: nothing matches {word}"
                out += matches
            else:
                out.append(word)
        return out[1:]


def _gzip(src: Path, dest: Path) -> None:
    with open(src, "rb") as fh, gzip.open(dest, "wb") as gz:
        shutil.copyfileobj(fh, gz)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    from clusterclip.store import load_npy
    from tests.chat_records import write_chat
    from tests.test_cli import make_corpus

    root = tmp_path_factory.mktemp("readme")
    inputs = root / "inputs"
    for folder in ("data/2024-02", "shared/corpus", "raw"):
        (inputs / folder).mkdir(parents=True, exist_ok=True)
    corpora = {"data/web-1.jsonl.gz": ({"cooking": 200, "astronomy": 80}, 1),
               "data/web-2.jsonl.gz": ({"finance": 140, "sailing": 100}, 2),
               "data/2024-02/new.jsonl.gz": ({"cooking": 30, "sailing": 30}, 3),
               "data.jsonl.gz": ({"cooking": 120, "astronomy": 60, "finance": 40, "sailing": 30}, 4)}
    for i, (name, (sizes, seed)) in enumerate(corpora.items()):
        _gzip(make_corpus(root / f"{i}.jsonl", sizes, seed), inputs / name)
    table = pj.read_json(root / "3.jsonl")
    pq.write_table(table.slice(0, 80), inputs / "data" / "web.parquet")
    pq.write_table(table.slice(0, 60), inputs / "shared" / "corpus" / "part-0.parquet")
    pq.write_table(table.slice(0, 60).rename_columns(["id", "content", "domain"]), inputs / "data.parquet")
    write_chat(inputs / "chat.jsonl", 200)
    full = root / "full"
    shutil.copytree(inputs, full)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(full)
        assert main(["run", *sorted(glob.glob("data/*.jsonl.gz")), "--out", "runs/web", "--keep-fields", "domain",
                     "--quality-scorer", "heuristic", "-q"]) == 0
        assert main(["run", "chat.jsonl", "--out", "runs/chat", "-q"]) == 0
        assert main(["dedup", "runs/web", "-q"]) == 0
    plan = "clusterclip-R4-tokens-B2epochs-s0"
    length = len(load_npy(full / "runs/web/plans" / plan / "plan.npy"))
    tokens = int(load_npy(full / "runs/web/tokens.npy").sum())
    return World(inputs, full, {"NAME": plan, "PLAN": plan, **shell_variables(ROOT / "README.md")},
                 {"tokens": str(2 * tokens), "consumed": str(length * 3 // 10)})


README_LINES = [pytest.param(line, id=f"{i}-{' '.join(line.split()[1:3])}" + ("-engine-ray" if "--engine ray" in line
                                                                                else ""),
                             marks=[pytest.mark.slow] if any(s in line for s in SLOW) else [])
                for i, line in enumerate(command_lines(ROOT / "README.md"))]


def _in_bucket(line: str, cwd: Path, request: pytest.FixtureRequest) -> str:
    """``line`` with ``s3://bucket`` naming a fresh bucket of the tests' S3 server that holds the copy in ``cwd``."""
    if "s3://bucket" not in line:
        return line
    bucket = request.getfixturevalue("s3")
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    for path in sorted(p for p in cwd.rglob("*") if p.is_file() and p.name != ".lock"):
        fs.put_file(str(path), f"{bucket.removeprefix('s3://')}/{path.relative_to(cwd).as_posix()}")
    return line.replace("s3://bucket", bucket)


@pytest.mark.parametrize("line", README_LINES)
def test_a_readme_command_runs_as_written(line, world, tmp_path, monkeypatch, request):
    """Each command on a copy of the fixture: the inputs alone for a command that creates a run, else the finished
    run (with dedup groups); placeholders (NAME, PLAN, $TOK, HEAD:6379, /shared/) filled; ``s3://bucket`` is a
    bucket of the tests' S3 server holding the same copy."""
    cwd = tmp_path / "w"
    shutil.copytree(world.inputs if line.split()[1] in CREATE else world.full, cwd)
    monkeypatch.chdir(cwd)
    line = _in_bucket(line, cwd, request)
    argv = world.argv(line, cwd)
    if argv[0] in ("experiment", "tune"):
        argv += SMALLER
    if "--engine" not in argv:
        assert main(argv) == 0, line
        return
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    with contextlib.ExitStack() as stack:
        if "HEAD:6379" in argv:
            from ray.cluster_utils import Cluster

            cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
            stack.callback(shutil.rmtree, cluster.head_node.get_session_dir_path(), ignore_errors=True)
            stack.callback(cluster.shutdown)  # first: the callbacks run last-in first-out
            cluster.add_node(num_cpus=1)  # two nodes, as the README's cluster (one CPU alone stalls Ray Data)
            argv[argv.index("HEAD:6379")] = cluster.address
        done = subprocess.run([sys.executable, "-m", "clusterclip", *argv], env=env, capture_output=True, text=True,
                              timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_readme_python_api_runs(world, tmp_path, monkeypatch):
    code = next(block for block in BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8"))
                if "run_pipeline(" in block)
    shutil.copytree(world.inputs, tmp_path / "w")
    monkeypatch.chdir(tmp_path / "w")
    scope: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert len(scope["plan"].order) == 2 * len(scope["labels"])


def test_all_means_every_extra_and_the_readme_says_which_install_runs_what():
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    (everything,) = extras["all"]
    listed = set(re.fullmatch(r"clusterclip\[(.*)\]", everything).group(1).split(","))
    assert listed == set(extras) - {"all", "test"}, "`pip install '.[all]'` must install every extra"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    setup = readme[readme.index("## Set up"):readme.index("## Why")]
    rows = [line for line in setup.splitlines() if line.startswith("| `[")]
    for extra in listed:
        assert any(line.startswith(f"| `[{extra}]`") for line in rows), f"the install table lacks [{extra}]"
    assert "--no-deps litdata==" in next(line for line in rows if line.startswith("| `[export]`"))
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "-e '.[all,test]'" in makefile and "--no-deps litdata==" in makefile, "make test installs what [all] does"


BENCHMARK = re.compile(r"benchmarks/[\w/]+\.py")
RESULTS = ROOT / "benchmarks" / "RESULTS.md"


def test_every_benchmark_script_a_file_names_exists():
    """The pages, RESULTS.md, the library, the tests and the benchmarks themselves name scripts that are there
    (a script moved to another folder of ``benchmarks/`` leaves no stale command behind)."""
    files = [*PAGES, RESULTS, *sorted(ROOT.glob("benchmarks/**/*.py")), *sorted(ROOT.glob("src/**/*.py")),
             *sorted(ROOT.glob("tests/*.py"))]
    named = {(path.relative_to(ROOT).as_posix(), script) for path in files
             for script in BENCHMARK.findall(path.read_text(encoding="utf-8"))}
    missing = sorted(f"{where} names {script}" for where, script in named if not (ROOT / script).is_file())
    assert not missing, missing


def test_each_results_topic_opens_with_its_current_figures():
    """Every topic of RESULTS.md's contents is a section whose first subsection is "Current figures": a table of
    question, figure, command and date, a date in every row."""
    text = RESULTS.read_text(encoding="utf-8")
    contents = text[:text.index("\n## ")]
    topics = re.findall(r"^\d+\. \[([^\]]+)\]\(#", contents, re.M)
    assert len(topics) >= 10, topics
    for topic in topics:
        start = text.index(f"\n## {topic}\n")
        body = text[start + 1:]
        first = re.search(r"^#{2,3} .*$", body[3:], re.M).group(0)
        assert first == "### Current figures", f"{topic}: opens with {first!r}"
        table = body[body.index("### Current figures"):].split("\n\n")[1].splitlines()
        assert table[0] == "| question | current figure | command | date |", f"{topic}: {table[0]!r}"
        for row in table[2:]:
            cells = [c.strip() for c in row.strip("|").split(" | ")]
            assert len(cells) == 4 and re.search(r"20\d\d-\d\d-\d\d", cells[3]), f"{topic}: {row}"
