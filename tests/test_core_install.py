"""``pip install clusterclip`` without extras runs the default job, and says which extra the rest needs.

A fresh virtual environment (no system site packages) installs the repository's sources with no extras,
as a user's ``pip install clusterclip`` would; then ``clusterclip run`` on the embedded default corpus, with
the default embedder and with the model-free ``hashing`` fallback, must succeed, and commands needing an
extra must say which one in one line. Needs the package index (as CI does); about 30 s with pip's cache.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import venv
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
SKIP = shutil.ignore_patterns(".venv*", ".git", "runs", "clusterclip-run", "build", "dist", "*.egg-info", "__pycache__",
                              ".*_cache", ".hypothesis", "out")
"""Not copied with the sources: the virtual environments (.venv-mds alone is 1.2 GB), runs, caches, build output."""


@pytest.fixture(scope="session")
def core(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One core install per test session (about 30 s), shared by every test that runs a command in it."""
    tmp = tmp_path_factory.mktemp("core")
    shutil.copytree(REPO, tmp / "src", ignore=SKIP)
    venv.create(tmp / "venv", with_pip=True)
    python = tmp / "venv" / "bin" / "python"
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", str(tmp / "src")], capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp / "venv" / "bin"


def _run(bin_dir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run([str(bin_dir / "clusterclip"), *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=900)


@pytest.mark.slow
def test_core_install_holds_no_extra(core):
    found = subprocess.run([str(core / "python"), "-c", "import importlib.util as u; print([m for m in "
                            "('torch', 'sentence_transformers', 'datasets', 'matplotlib', 'ray', 'transformers') "
                            "if u.find_spec(m)])"], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]", f"the core install pulled extras: {found.stdout}"


@pytest.mark.slow
@pytest.mark.parametrize("embedder", [None, "hashing"])
def test_core_install_runs_the_default_job(core, tmp_path, embedder):
    args = ["run", "--out", str(tmp_path / "run"), *(["--embedder", embedder] if embedder else [])]
    done = _run(core, *args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "run" / "labels.npy").is_file() and list((tmp_path / "run" / "plans").iterdir())
    # the default strategies are planned at equal tokens: each holds the budget plus less than one document
    tokens = np.load(tmp_path / "run" / "tokens.npy")
    totals = [int(tokens[np.load(p / "plan.npy")].sum()) for p in (tmp_path / "run" / "plans").iterdir()]
    assert len(totals) == 3 and all(0 <= t - 2 * int(tokens.sum()) < int(tokens.max()) for t in totals), totals
    assert "differ in tokens" not in done.stdout


@pytest.mark.slow
@pytest.mark.parametrize(("args", "extra"), [
    (["report", "{run}"], "clusterclip[report]"),
    (["export", "{run}", "--format", "hf", "--dest", "{tmp}/hf"], "clusterclip[hf]"),
    (["export", "{run}", "--format", "jsonl", "--tokenizer", "gpt2", "--dest", "{tmp}/j"], "clusterclip[hf]"),
    (["run", "--out", "{tmp}/st", "--embedder", "minilm"], "clusterclip[embed]"),
    (["dedup", "{run}"], "clusterclip[dedup]"),
    (["experiment", "{run}", "--out", "{tmp}/e"], "clusterclip[torch]"),
    (["tune", "{run}", "--out", "{tmp}/t"], "clusterclip[torch]"),
])
def test_a_missing_extra_is_named_in_one_line(core, tmp_path, args, extra):
    run = tmp_path / "run"
    assert _run(core, "run", "--out", str(run), "--embedder", "hashing", cwd=tmp_path).returncode == 0
    plan = sorted(p.name for p in (run / "plans").iterdir())[0]
    argv = [a.format(run=run, tmp=tmp_path) for a in args]
    if argv[0] == "export":
        argv[2:2] = ["--plan", plan]
    done = _run(core, *argv, cwd=tmp_path)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert extra in done.stderr, done.stderr[-2000:]

