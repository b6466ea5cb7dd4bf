"""What a command leaves behind: a failed command no empty run directory, ``status`` on a folder that is no run a
one-line error, the default run directory ignored by git."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterclip.cli.main import main
from clusterclip.pipeline import DEFAULT_RUN_DIR
from clusterclip.store import RunDir
from tests.test_cli import make_corpus

REPO = Path(__file__).resolve().parent.parent


def _bad_corpus(path: Path) -> Path:
    make_corpus(path, {"cooking": 30})
    path.write_text(path.read_text() + "{not json\n")
    return path


@pytest.mark.parametrize("argv", [["run", "{tmp}/missing.jsonl"], ["embed", "{tmp}/bad.jsonl", "--embedder", "hashing"],
                                  ["run", "{tmp}/bad.jsonl", "--embedder", "hashing"]])
def test_a_command_that_fails_before_writing_removes_the_run_directory_it_created(tmp_path, capsys, argv):
    _bad_corpus(tmp_path / "bad.jsonl")
    out = tmp_path / "new" / "deeper" / "run"
    assert main([a.format(tmp=tmp_path) for a in argv] + ["--out", str(out), "-q"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not (tmp_path / "new").exists(), "the run directory and the parents created for it are gone"


def test_a_failed_command_keeps_a_directory_that_was_there(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    assert main(["run", str(tmp_path / "missing.jsonl"), "--out", str(out), "-q"]) == 2
    assert out.is_dir()


def test_a_failed_command_keeps_what_an_earlier_stage_wrote(tmp_path):
    out = tmp_path / "run"
    corpus = make_corpus(tmp_path / "c.jsonl", {"cooking": 30, "sailing": 20})
    assert main(["embed", str(corpus), "--out", str(out), "--embedder", "hashing", "-q"]) == 0
    assert main(["cluster", str(out), "--k", "500", "-q"]) == 2
    assert RunDir(out).record("embed") is not None


@pytest.mark.parametrize("make", [lambda p: p.mkdir(), lambda p: (p.mkdir(), (p / "notes.txt").write_text("x"))])
def test_status_of_a_folder_that_is_no_run_directory_is_a_one_line_error(tmp_path, capsys, make):
    folder = tmp_path / "folder"
    make(folder)
    assert main(["status", str(folder)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and "not a run directory" in captured.err, captured.err


def test_the_default_run_directory_is_ignored_by_git():
    ignored = (REPO / ".gitignore").read_text().split()
    assert f"{DEFAULT_RUN_DIR}/" in ignored and "runs/" in ignored
