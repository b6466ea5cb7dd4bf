"""Bad inputs and failing writes give one clear line (exit 2), never a traceback (issue 16, items 10, 11, 13).

Every case goes through ``clusterclip.cli.main`` as a user would hit it: lone surrogates, JSON nested too
deeply, integers too long to convert, unreadable files and folders, broken Hugging Face folders, a full
disk in the corpus and embed stages, and ``--out`` naming a file.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from clusterclip.cli.main import main
from clusterclip.corpus import compressed as opener_module
from clusterclip.corpus import limits as corpus_limits
from clusterclip.corpus import parts as parts_module
from clusterclip.embed import stage as embed_module
from clusterclip.store import TMP_PREFIX, RunDir, load_npy


def _records(n: int = 12) -> list[str]:
    return [json.dumps({"id": f"d{i}", "text": f"document {i} about ovens and sails", "domain": "x"})
            for i in range(n)]


def _jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def _embed(capsys: pytest.CaptureFixture[str], inputs: list[Path], out: Path, *extra: str) -> tuple[int, str]:
    """Exit status and stderr of ``clusterclip embed``; the message must be a single line."""
    capsys.readouterr()
    rc = main(["embed", *map(str, inputs), "--out", str(out), "--embedder", "hashing", "-q", *extra])
    err = capsys.readouterr().err.strip()
    if rc:
        assert len(err.splitlines()) == 1 and err.startswith("clusterclip: error: "), err
    return rc, err


def _temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.startswith(TMP_PREFIX)]


@pytest.mark.parametrize("field", ["text", "domain", "id"])
def test_lone_surrogate_is_a_bad_record(tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str) -> None:
    record = {"id": "bad", "text": "some words here", "domain": "x"}
    record[field] = record[field] + "\ud800"  # json.dumps writes the escape \ud800, which json.loads reads back
    path = _jsonl(tmp_path / "s.jsonl", [*_records(5), json.dumps(record), *_records(12)[5:]])
    rc, err = _embed(capsys, [path], tmp_path / "run", "--id-field", "id")
    assert rc == 2 and f"{path}:6: " in err and "lone surrogate" in err and repr(field) in err
    rc, _ = _embed(capsys, [path], tmp_path / "skip", "--id-field", "id", "--on-bad-record", "skip")
    assert rc == 0
    rec = RunDir(tmp_path / "skip").record("corpus")
    assert rec["count"] == 12 and rec["skipped"] == 1 and "lone surrogate" in rec["skipped_examples"][0]


def test_valid_surrogate_pairs_are_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    emoji = json.dumps({"text": "emoji \U0001F600 here", "domain": "\U0001F600"})
    path = _jsonl(tmp_path / "e.jsonl", [*_records(3), emoji])
    assert "\\ud83d\\ude00" in path.read_text()
    rc, _ = _embed(capsys, [path], tmp_path / "run")
    assert rc == 0 and RunDir(tmp_path / "run").record("corpus")["count"] == 4


def test_json_nested_too_deeply_and_huge_integers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = '{"text": ' + "[" * 100_000 + "]" * 100_000 + "}"
    huge = '{"id": ' + "7" * 5000 + ', "text": "a document"}'
    path = _jsonl(tmp_path / "d.jsonl", [*_records(3), deep, *_records(6)[3:], huge])
    rc, err = _embed(capsys, [path], tmp_path / "run", "--id-field", "id")
    assert rc == 2 and f"{path}:4: invalid JSON (nested too deeply" in err
    rc, _ = _embed(capsys, [path], tmp_path / "skip", "--id-field", "id", "--on-bad-record", "skip")
    rec = RunDir(tmp_path / "skip").record("corpus")
    assert rc == 0 and rec["count"] == 6 and rec["skipped"] == 2
    assert any(f"{path}:8: invalid JSON (an integer longer than" in e for e in rec["skipped_examples"])


def test_invalid_json_message_says_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _jsonl(tmp_path / "c.jsonl", [*_records(2), '{"text": "a\x01b"}'])
    rc, err = _embed(capsys, [path], tmp_path / "run")
    assert rc == 2 and f"{path}:3: invalid JSON (Invalid control character at column" in err
    assert "at at" not in err


def test_duplicate_ids_name_the_id_and_both_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = _records(8)
    lines.insert(6, lines[2])
    lines.insert(7, lines[4])
    path = _jsonl(tmp_path / "dup.jsonl", lines)
    rc, err = _embed(capsys, [path], tmp_path / "run", "--id-field", "id")
    assert rc == 2 and "2 duplicate ids in field 'id'" in err
    assert f"the first 'd2' at {path}:3 and again at {path}:7;" in err


def test_duplicate_ids_in_parquet_name_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "dup.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "c", "b"], "text": ["one", "two", "three", "four"]}), path)
    rc, err = _embed(capsys, [path], tmp_path / "run", "--id-field", "id")
    assert rc == 2 and f"'b' at {path}:2 and again at {path}:4;" in err


def _deny(monkeypatch: pytest.MonkeyPatch, target: Path) -> None:
    """Make ``target`` unreadable: by mode, and (when running as root, which ignores modes) by raising
    the ``PermissionError`` that reading or listing it would raise."""
    target.chmod(0)
    if os.geteuid() != 0:
        return

    def denied() -> PermissionError:
        return PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(target))

    real_open, real_scandir, real_read_bytes = open, os.scandir, Path.read_bytes
    monkeypatch.setattr(opener_module, "open", lambda p, *a, **k: (_ for _ in ()).throw(denied())
                        if Path(p) == target else real_open(p, *a, **k), raising=False)
    monkeypatch.setattr(os, "scandir", lambda p=".": (_ for _ in ()).throw(denied())
                        if not isinstance(p, int) and Path(p) == target else real_scandir(p))
    monkeypatch.setattr(Path, "read_bytes", lambda self: (_ for _ in ()).throw(denied())
                        if self == target else real_read_bytes(self))


def test_unreadable_inputs_say_permission_denied(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    for i in range(3):
        (folder / f"{i}.txt").write_text(f"document {i} with words")
        (folder / "sub" / f"{i}.txt").write_text(f"nested document {i}")
    jsonl = _jsonl(tmp_path / "locked.jsonl", _records(3))
    try:
        _deny(monkeypatch, folder / "1.txt")
        rc, err = _embed(capsys, [folder], tmp_path / "r1")
        assert rc == 2 and err == f"clusterclip: error: {folder / '1.txt'}: cannot read: Permission denied"
        _deny(monkeypatch, folder / "sub")
        rc, err = _embed(capsys, [folder], tmp_path / "r2")
        assert rc == 2 and f"{folder / 'sub'}: cannot read: Permission denied" in err
        _deny(monkeypatch, jsonl)
        rc, err = _embed(capsys, [jsonl], tmp_path / "r3")
        assert rc == 2 and f"{jsonl}: cannot read: Permission denied" in err and "corrupt" not in err
    finally:
        for p in (folder / "1.txt", folder / "sub", jsonl):
            p.chmod(0o755)


def test_txt_folder_holding_state_json_is_read_as_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "state.json").write_text("{}")
    (folder / "dataset_info.json").write_text("{}")
    for i in range(4):
        (folder / f"{i}.txt").write_text(f"document {i} with words")
    rc, _ = _embed(capsys, [folder], tmp_path / "run")
    assert rc == 0 and RunDir(tmp_path / "run").record("corpus")["count"] == 4


def test_broken_hugging_face_folders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"text": [f"document {i} with words" for i in range(20)]})
    good = tmp_path / "good"
    ds.save_to_disk(str(good), num_shards=2)
    rc, _ = _embed(capsys, [good], tmp_path / "r0")
    assert rc == 0 and RunDir(tmp_path / "r0").record("corpus")["count"] == 20

    corrupt = tmp_path / "corrupt"
    ds.save_to_disk(str(corrupt))
    (corrupt / "state.json").write_text("{not json")
    rc, err = _embed(capsys, [corrupt], tmp_path / "r1")
    assert rc == 2 and f"{corrupt}: not a readable Hugging Face dataset folder" in err

    missing = tmp_path / "missing"
    ds.save_to_disk(str(missing), num_shards=2)
    sorted(missing.glob("*.arrow"))[1].unlink()
    rc, err = _embed(capsys, [missing], tmp_path / "r2")
    assert rc == 2 and f"{missing}: not a readable Hugging Face dataset folder" in err

    for arrow in missing.glob("*.arrow"):
        arrow.unlink()
    rc, err = _embed(capsys, [missing], tmp_path / "r3")
    assert rc == 2 and "holds no .arrow data files" in err


def _full_disk_after(calls: int, real: Callable[..., Any]) -> Callable[..., Any]:
    """``real``, except that call ``calls + 1`` and later ones fail as a full disk does."""
    done = [0]

    def write(*args: Any, **kwargs: Any) -> Any:
        done[0] += 1
        if done[0] > calls:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(*args, **kwargs)

    return write


def test_disk_full_in_corpus_stage(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = _jsonl(tmp_path / "c.jsonl", _records(40))
    out = tmp_path / "run"
    monkeypatch.setattr(corpus_limits, "PART_ROWS", 10)
    monkeypatch.setattr(parts_module.pq, "write_table", _full_disk_after(2, parts_module.pq.write_table))
    rc, err = _embed(capsys, [path], out)
    assert rc == 2 and "disk is full" in err and "nothing half-written was kept" in err
    assert str(out / "corpus") in err
    assert not _temp_files(out) and not list((out / "corpus").glob("part-*"))
    assert RunDir(out).record("corpus") is None
    monkeypatch.undo()
    rc, _ = _embed(capsys, [path], out)
    assert rc == 0 and RunDir(out).record("corpus")["count"] == 40


def test_disk_full_in_embed_stage_keeps_finished_shards(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    path = _jsonl(tmp_path / "c.jsonl", _records(40))
    out = tmp_path / "run"
    monkeypatch.setattr(embed_module, "save_npy", _full_disk_after(4, embed_module.save_npy))
    rc, err = _embed(capsys, [path], out, "--embed-shard-size", "10")
    assert rc == 2 and f"{out / 'embeddings'}: disk is full" in err and "finished shards are kept" in err
    assert not _temp_files(out) and RunDir(out).record("embed") is None
    assert len(list((out / "embeddings").glob("shard-*.npy"))) == 2
    monkeypatch.undo()
    rc, _ = _embed(capsys, [path], out, "--embed-shard-size", "10")
    assert rc == 0 and load_npy(out / "embeddings" / "shard-00003.npy").shape[0] == 10


def test_out_naming_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _jsonl(tmp_path / "c.jsonl", _records(5))
    target = tmp_path / "afile"
    target.write_text("mine")
    for out in (target, target / "sub"):
        rc, err = _embed(capsys, [path], out)
        assert rc == 2 and f"{out}: cannot be a run directory" in err
    assert target.read_text() == "mine"


@pytest.mark.parametrize(("argv", "message"), [
    (["--lr", "-1"], "--lr must be in (0, 10), got -1.0"),
    (["--docs", "-5"], "--docs must be an integer >= 1 (or 0 for all), got -5"),
    (["--max-words", "-1"], "--max-words must be an integer >= 1 (or 0 for no cut), got -1"),
])
def test_experiment_options_out_of_range(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                         message: str) -> None:
    assert main(["experiment", "--out", str(tmp_path / "o"), *argv]) == 2
    assert capsys.readouterr().err.strip() == f"clusterclip: error: {message}"
    assert not (tmp_path / "o").exists()
