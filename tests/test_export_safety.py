"""``clusterclip export`` owns its output folder, follows no links, verifies what it reads, checks free space."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from collections import namedtuple
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from clusterclip.cli.main import main
from clusterclip.errors import ClusterClipError
from clusterclip.export.stage import export_plan
from clusterclip.export.writers import jsonl as export_writers
from clusterclip.store import save_npy
from tests.records import write_record
from tests.test_export import _run


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _failing_writer(monkeypatch, at: int, exc: BaseException) -> Callable[[], None]:
    """Make the JSONL writer raise ``exc`` instead of writing batch ``at``; returns what undoes it."""
    real = export_writers.JsonlWriter.write

    def write(self, batch):
        if self.batches == at:
            raise exc
        real(self, batch)

    monkeypatch.setattr(export_writers.JsonlWriter, "write", write)
    return lambda: monkeypatch.setattr(export_writers.JsonlWriter, "write", real)


def _cli_error(capsys, *args: str) -> str:
    """Run ``clusterclip export`` expecting a user error: exit 2 and exactly one line on stderr."""
    assert main(["export", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


# ------------------------------------------------------------------------------------ ownership of --out

def test_refuses_a_folder_of_user_files_and_deletes_nothing(tmp_path, capsys):
    run, cfg, _ = _run(tmp_path)
    out = tmp_path / "folder"
    out.mkdir()
    for i in range(10):
        (out / f"part-{i:05d}.jsonl").write_text(f'{{"mine": {i}}}\n')
    before = _tree(out)
    err = _cli_error(capsys, str(run.root), "--plan", cfg.name(), "--dest", str(out))
    assert f"{out}: not empty and not a clusterclip export (holds part-00000.jsonl" in err
    assert "10 entries" in err and "choose an empty --dest" in err
    assert _tree(out) == before


def test_refuses_user_files_beside_its_own_export(tmp_path):
    """A re-export with more shards would overwrite part-00099.jsonl, which the export did not write."""
    run, cfg, _ = _run(tmp_path)
    out = tmp_path / "out"
    export_plan(run, cfg.name(), out, shard_size=100)
    (out / "part-00099.jsonl").write_text("mine\n")
    (out / "notes.txt").write_text("mine\n")
    before = _tree(out)
    with pytest.raises(ClusterClipError, match=r"did not write \(notes.txt, part-00099.jsonl\)"):
        export_plan(run, cfg.name(), out, shard_size=1)
    assert _tree(out) == before


def test_a_manifest_listing_a_path_outside_the_folder_deletes_nothing(tmp_path):
    run, cfg, _ = _run(tmp_path)
    out = tmp_path / "out"
    export_plan(run, cfg.name(), out, shard_size=10)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    manifest = json.loads((out / "export.json").read_text())
    manifest["files"].append("../victim.txt")
    (out / "export.json").write_text(json.dumps(manifest))
    with pytest.raises(ClusterClipError, match=r"lists '\.\./victim\.txt', not a file inside the folder"):
        export_plan(run, cfg.name(), out, shard_size=100)
    assert victim.read_text() == "keep me"


def test_reexport_of_the_same_plan_is_idempotent(tmp_path):
    run, cfg, _ = _run(tmp_path)
    out = tmp_path / "out"
    export_plan(run, cfg.name(), out, shard_size=40)
    first = {k: v for k, v in _tree(out).items() if k != "export.json"}
    export_plan(run, cfg.name(), out, shard_size=40)
    assert {k: v for k, v in _tree(out).items() if k != "export.json"} == first
    empty = tmp_path / "empty"
    empty.mkdir()
    export_plan(run, cfg.name(), empty, shard_size=40)
    assert {k: v for k, v in _tree(empty).items() if k != "export.json"} == first


def test_an_interrupted_publication_is_finished_by_the_next_run(tmp_path, monkeypatch):
    """Killed after moving 5 of 13 new shards into a folder holding a 2-shard export of the same plan: the
    shards the killed run moved in are its own, so the next run removes them instead of refusing them."""
    run, cfg, _ = _run(tmp_path)
    out = tmp_path / "out"
    export_plan(run, cfg.name(), out, shard_size=100)
    clean = _tree(out)
    real, moved = os.replace, []

    def dies_after_five(src, dst):
        if Path(src).name.startswith("part-"):
            if len(moved) == 5:
                raise KeyboardInterrupt
            moved.append(dst)
        real(src, dst)

    monkeypatch.setattr(os, "replace", dies_after_five)
    with pytest.raises(KeyboardInterrupt):
        export_plan(run, cfg.name(), out, shard_size=10)
    monkeypatch.setattr(os, "replace", real)
    assert (out / "part-00004.jsonl").is_file() and (out / ".partial").is_dir()
    export_plan(run, cfg.name(), out, shard_size=100)
    assert sorted(_tree(out)) == sorted(clean)
    assert {k: v for k, v in _tree(out).items() if k != "export.json"} == \
        {k: v for k, v in clean.items() if k != "export.json"}


def test_refuses_an_existing_file_as_out(tmp_path, capsys):
    run, _, _ = _run(tmp_path)
    out = tmp_path / "file"
    out.write_text("mine")
    assert "is a file, not a folder" in _cli_error(capsys, str(run.root), "--dest", str(out))
    assert out.read_text() == "mine"


# ------------------------------------------------------------------------------------------- symlinks

@pytest.mark.parametrize("link", ["out", "export.json", "part-00001.jsonl", ".partial", ".partial.arrow"])
def test_refuses_symlinks_where_it_writes_or_deletes(tmp_path, capsys, link):
    run, cfg, _ = _run(tmp_path)
    out = tmp_path / "out"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep me")
    path = out if link == "out" else out / link
    if link != "out":
        export_plan(run, cfg.name(), out, shard_size=40)
    if path.is_file():
        shutil.move(path, outside / link)
        path.symlink_to(outside / link)
    elif link == ".partial.arrow":
        path.symlink_to(outside / "keep.txt")
    else:
        path.symlink_to(outside, target_is_directory=True)
    before = _tree(outside)
    err = _cli_error(capsys, str(run.root), "--dest", str(out), "--shard-size", "100")
    assert f"{path}: is a symbolic link (to {outside}" in err
    assert _tree(outside) == before


def test_writers_do_not_write_through_a_planted_link(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "part-00000.jsonl").symlink_to(victim)
    writer = export_writers.JsonlWriter(tmp_path, np.dtype(np.int32))
    with pytest.raises(OSError):
        writer.write(__import__("pyarrow").table({"text": ["x"]}))
    assert victim.read_text() == "keep me"


# ------------------------------------------------------------------------------ verified inputs (item 6)

def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["modified", "zeroed", "deleted"])
def test_damaged_labels_are_refused(tmp_path, capsys, damage):
    run, _, _ = _run(tmp_path)
    labels = run.path("labels.npy")
    if damage == "modified":
        _flip_last_byte(labels)
    elif damage == "zeroed":
        labels.write_bytes(bytes(labels.stat().st_size))
    else:
        labels.unlink()
    err = _cli_error(capsys, str(run.root), "--dest", str(tmp_path / "out"))
    assert f"{labels}:" in err and "cluster" in err
    assert not (tmp_path / "out").exists()


def test_a_plan_without_its_cluster_stage_is_refused(tmp_path, capsys):
    """Exported with a null cluster column before."""
    run, _, _ = _run(tmp_path)
    run.record_path("cluster").unlink()
    err = _cli_error(capsys, str(run.root), "--dest", str(tmp_path / "out"))
    assert "`cluster`" in err and re.search(r"`clusterclip (plan|cluster) ", err)


def test_a_plan_older_than_the_clusters_is_refused(tmp_path, capsys):
    """Re-clustered after planning: before, the new labels were written next to the old plan's order."""
    run, cfg, labels = _run(tmp_path)
    save_npy(run.path("labels.npy"), (labels + 1) % 4)
    write_record(run, "cluster", {}, "x", ["labels.npy"], 0.0)
    err = _cli_error(capsys, str(run.root), "--dest", str(tmp_path / "out"))
    assert f"stage `plans/{cfg.name()}/plan` is stale" in err and f"`clusterclip plan {run.root}" in err


@pytest.mark.parametrize("artifact", ["corpus/part-00001.parquet", "tokens.npy"])
@pytest.mark.parametrize("damage", ["modified", "deleted"])
def test_damaged_corpus_artifacts_are_refused(tmp_path, capsys, artifact, damage):
    run, _, _ = _run(tmp_path)
    path = run.path(artifact)
    _flip_last_byte(path) if damage == "modified" else path.unlink()
    err = _cli_error(capsys, str(run.root), "--dest", str(tmp_path / "out"))
    assert f"{path}:" in err and ("checksum" in err or "missing" in err)


# ----------------------------------------------------------------------------------------- free space

Usage = namedtuple("Usage", "total used free")


def test_refuses_when_the_export_does_not_fit(tmp_path, monkeypatch):
    run, cfg, _ = _run(tmp_path)
    out = tmp_path / "out"
    export_plan(run, cfg.name(), out, shard_size=40)
    before = _tree(out)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10**6, 10**6 - 1000, 1000))
    with pytest.raises(ClusterClipError, match=r"needs about [\d.]+ MiB but its filesystem has 0.0 MiB free"):
        export_plan(run, cfg.name(), out, shard_size=10)
    assert _tree(out) == before
    with pytest.raises(ClusterClipError, match="free space or choose another --dest"):
        export_plan(run, cfg.name(), tmp_path / "new")
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_estimate_covers_what_is_written(tmp_path, monkeypatch, fmt):
    run, cfg, _ = _run(tmp_path)
    asked = []
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda path: (asked.append(path), real(path))[1])
    import clusterclip.export.stage as E

    needs = []
    check = E.check_space
    monkeypatch.setattr(E, "check_space", lambda out, need: (needs.append(need), check(out, need))[1])
    files = export_plan(run, cfg.name(), tmp_path / "out", fmt=fmt)
    written = sum(p.stat().st_size for p in files)
    assert asked and written <= needs[0] <= max(written, 1) * 10


def test_disk_full_while_writing_removes_the_partial_files_and_keeps_the_earlier_export(tmp_path, monkeypatch,
                                                                                       capsys):
    run, cfg, _ = _run(tmp_path)
    out = tmp_path / "out"
    export_plan(run, cfg.name(), out, shard_size=40)
    before = _tree(out)
    _failing_writer(monkeypatch, 2, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    err = _cli_error(capsys, str(run.root), "--dest", str(out), "--shard-size", "10")
    assert f"{out}: no space left on the device while exporting" in err and "earlier export is intact" in err
    assert _tree(out) == before and not (out / ".partial").exists()
    _cli_error(capsys, str(run.root), "--dest", str(tmp_path / "new"), "--shard-size", "10")
    assert not (tmp_path / "new").exists()


def test_disk_full_while_claiming_the_folder_is_one_line(tmp_path, monkeypatch, capsys):
    import clusterclip.export.publish as E

    run, _, _ = _run(tmp_path)

    def disk_full(path, obj):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(E, "save_json", disk_full)
    err = _cli_error(capsys, str(run.root), "--dest", str(tmp_path / "new"))
    assert "no space left on the device" in err
    assert not (tmp_path / "new").exists()


# ------------------------------------------------------------------------- the stage protocol and the lock

def test_the_record_is_a_stage_record_and_a_same_reexport_is_skipped_unless_forced(tmp_path):
    run, cfg, _ = _run(tmp_path)
    out = tmp_path / "out"
    files = export_plan(run, cfg.name(), out, shard_size=40)
    record = json.loads((out / "export.json").read_text())
    assert record["stage"] == "export" and sorted(record["artifacts"]) == record["files"] == [p.name for p in files]
    assert record["inputs_hash"] == record["identity"]["plan_sha256"] and record["upstream"] == {}
    assert record["command"] == ["clusterclip", "export", str(run.root), "--plan", cfg.name(), "--dest", "{run}",
                                 "--format", "jsonl", "--shard-size", "40"]
    assert sorted(p.name for p in out.iterdir()) == sorted([*record["files"], "export.json", ".lock"])
    times = {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.name != ".lock"}
    assert export_plan(run, cfg.name(), out, shard_size=40) == files
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.name != ".lock"} == times
    export_plan(run, cfg.name(), out, shard_size=40, force=True)
    assert all(p.stat().st_mtime_ns != times[p.name] for p in files)


def test_a_second_export_into_the_folder_fails_while_one_writes(tmp_path, capsys):
    """Another process holds the folder's writer lock: the export fails at once and changes nothing."""
    import subprocess
    import sys

    run, cfg, _ = _run(tmp_path)
    out = tmp_path / "out"
    export_plan(run, cfg.name(), out, shard_size=40)
    before = _tree(out)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom clusterclip.store import exclusive\n"
                               f"with exclusive({str(out)!r}):\n    print('held', flush=True)\n    time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        err = _cli_error(capsys, str(run.root), "--dest", str(out), "--shard-size", "10")
    finally:
        holder.kill()
        holder.wait()
    assert "another clusterclip process is writing this export folder" in err
    assert {k: v for k, v in _tree(out).items() if k != ".lock"} == {k: v for k, v in before.items() if k != ".lock"}


def test_killed_while_writing_over_an_earlier_export_keeps_it_owned(tmp_path, monkeypatch):
    """Killed after the runner forgot the earlier record: the staging journal still lists the earlier files,
    so the next run replaces them instead of refusing the folder."""
    run, cfg, _ = _run(tmp_path)
    out = tmp_path / "out"
    export_plan(run, cfg.name(), out, shard_size=100)
    clean = _tree(out)
    undo = _failing_writer(monkeypatch, 1, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        export_plan(run, cfg.name(), out, shard_size=10)
    undo()
    assert not (out / "export.json").exists() and (out / ".partial" / "identity.json").is_file()
    export_plan(run, cfg.name(), out, shard_size=100)
    assert sorted(_tree(out)) == sorted(clean)
    assert {k: v for k, v in _tree(out).items() if k != "export.json"} == \
        {k: v for k, v in clean.items() if k != "export.json"}
