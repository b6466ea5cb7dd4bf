"""Issue 16, the run directory: nothing written, deleted or read through a symbolic link; artifacts built
on a rebuilt upstream are stale everywhere; the report verifies what it reads; a corrupt stage record
prints a runnable command, and following it recovers the run."""

from __future__ import annotations

import errno
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from clusterclip.cli.main import main
from clusterclip.contract.cluster import CENTROIDS, CLUSTER_STAGE, LABELS, SCORES, SIZES
from clusterclip.contract.corpus import CORPUS_STAGE, TOKENS, corpus_part
from clusterclip.contract.embed import EMBED_STAGE
from clusterclip.contract.plan import (
    PLAN_DRAWS,
    PLAN_EXHAUSTED_AT,
    PLAN_MAX_REPEAT,
    PLAN_MIXTURE,
    PLAN_RECORD,
    PLAN_REPEAT_HIST,
    PLAN_UNIQUE,
    plan_path,
    plan_stage_name,
)
from clusterclip.contract.report import REPORT_DIR, REPORT_HTML, REPORT_STAGE
from clusterclip.contract.stages import audit, finished_stages
from clusterclip.report import build_report
from clusterclip.store import LinkInRunDirError, RunDir, StaleArtifactError, load_npy, save_npy
from clusterclip.store import layout as A
from tests.test_cli import make_corpus

DOLLAR = "$\\frac{1}{$"
TEMP = "temperature-t0.3-Rinf-tokens-Bepoch-s0"
CLIP = "clusterclip-R4-tokens-Bepoch-s0"
EMBED = ["embed", "{corpus}", "--out", "{run}", "--embedder", "hashing", "--force", "-q"]
RUN_OPTS = ["--embedder", "hashing", "--k", "4", "--strategies", "clusterclip,temperature", "--tau", "0.3",
            "--epochs", "1", "-q"]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """A finished run (corpus, embed, cluster, two plans, summary) of a corpus with a ``$``-group."""
    base = tmp_path_factory.mktemp("built")
    corpus = make_corpus(base / "c.jsonl", {"cooking": 80, "astronomy": 40, "finance": 25, "sailing": 15})
    rows = [json.loads(line) for line in corpus.read_text().splitlines()]
    for row in rows:
        if row["domain"] == "sailing":
            row["domain"] = DOLLAR
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = base / "run"
    assert main(["run", str(corpus), "--out", str(out), *RUN_OPTS]) == 0
    return corpus, out


@pytest.fixture
def run(built, tmp_path) -> RunDir:
    """A private copy of the finished run (times kept, so the quick check passes)."""
    shutil.copytree(built[1], tmp_path / "run", symlinks=True)
    return RunDir(tmp_path / "run")


def fails(argv: list[str], capsys) -> str:
    """Run the CLI; it must fail with exactly one line (exit 2, no traceback); returns the line."""
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def follow(command: str) -> None:
    """Run a printed ``clusterclip ...`` command through the CLI; it must succeed."""
    args = shlex.split(command)
    assert args[0] == "clusterclip"
    assert main([*args[1:], "-q"]) == 0, command


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


# ------------------------------------------------------------------------------------------ item 3: links


def test_a_lock_that_is_a_link_is_refused_and_its_target_untouched(run, tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    run.path(A.LOCK).unlink(missing_ok=True)
    (run.root / A.LOCK).symlink_to(victim)
    err = fails(["cluster", str(run.root), "--k", "5", "-q"], capsys)
    assert f"{run.root / A.LOCK}: is a symbolic link" in err
    assert victim.read_text() == "keep me"
    assert run.record(CLUSTER_STAGE)["k"] == 4


@pytest.mark.parametrize(
    ("folder", "planted", "argv"),
    [
        ("report", "report.html", ["report", "{run}", "-q"]),
        ("corpus", "part-00007.parquet", EMBED),
        ("embeddings", "shard-00042.npy", EMBED),
        (f"plans/{TEMP}", "plan.npy", ["plan", "{run}", "--strategy", "temperature", "--tau", "0.3", "--epochs", "1",
                                       "--budget-unit", "tokens", "--force", "-q"]),
        ("plans/uniform-Rinf-docs-Bepoch-s0", "plan.npy",
         ["plan", "{run}", "--strategy", "uniform", "--epochs", "1", "-q"]),
    ],
)
def test_a_linked_folder_is_refused_and_nothing_outside_changes(run, built, tmp_path, capsys, folder, planted, argv):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / planted).write_bytes(b"user data")
    (outside / ".tmp-user").write_bytes(b"user temp")
    (outside / "part-00000.parquet").write_bytes(b"more user data")
    before = snapshot(outside)
    link = run.root / folder
    if link.exists():
        shutil.rmtree(link)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside, target_is_directory=True)
    err = fails([a.format(run=run.root, corpus=built[0]) for a in argv], capsys)
    assert f"{link}: is a symbolic link" in err
    assert snapshot(outside) == before


def test_an_artifact_that_is_a_link_is_refused_before_anything_changes(run, tmp_path, capsys):
    victim = tmp_path / "labels.npy"
    victim.write_bytes(run.path(LABELS).read_bytes())
    run.path(LABELS).unlink()
    (run.root / LABELS).symlink_to(victim)
    before = victim.read_bytes()
    err = fails(["cluster", str(run.root), "--k", "5", "-q"], capsys)
    assert f"{run.root / LABELS}: is a symbolic link" in err
    assert victim.read_bytes() == before
    assert run.record(CLUSTER_STAGE)["k"] == 4, "refused before the old record was dropped"
    assert main(["status", str(run.root)]) == 0
    assert "a symbolic link replaced an artifact" in capsys.readouterr().out
    with pytest.raises(LinkInRunDirError):
        run.path(LABELS)


def test_atomic_writes_replace_a_link_rather_than_follow_it(tmp_path):
    victim = tmp_path / "victim.npy"
    victim.write_bytes(b"keep")
    link = tmp_path / "a.npy"
    link.symlink_to(victim)
    save_npy(link, np.arange(3))
    assert victim.read_bytes() == b"keep" and not link.is_symlink()
    assert load_npy(link).tolist() == [0, 1, 2]


def test_clean_temp_files_never_follows_links(run, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / ".tmp-keep").write_text("x")
    victim = outside / "victim"
    victim.write_text("y")
    (run.root / "linked").symlink_to(outside, target_is_directory=True)
    (run.root / ".tmp-link").symlink_to(victim)
    (run.root / ".tmp-stale").write_text("z")
    assert run.clean_temp_files() == 2
    assert (outside / ".tmp-keep").exists() and victim.read_text() == "y"
    assert not (run.root / ".tmp-link").is_symlink() and not (run.root / ".tmp-stale").exists()


# ---------------------------------------------------------------------------------- item 4: staleness


def test_reclustering_makes_every_plan_stale_in_status_report_and_consumers(run, capsys):
    assert main(["report", str(run.root), "-q"]) == 0
    assert run.stale_reason(REPORT_STAGE) is None
    assert main(["cluster", str(run.root), "--k", "5", "-q"]) == 0
    stage = plan_stage_name(TEMP)
    command = f"clusterclip plan {run.root} --strategy temperature --epochs 1 --budget-unit tokens --tau 0.3"
    why = run.stale_reason(stage)
    assert why is not None and "`cluster` was rebuilt after it" in why and why.endswith(f"rebuild: `{command}`")
    assert run.stale_reason(plan_stage_name(CLIP)) is not None
    assert f"`clusterclip report {run.root}`" in run.stale_reason(REPORT_STAGE)
    with pytest.raises(StaleArtifactError, match="is stale"):
        run.require_current(stage)

    capsys.readouterr()
    assert main(["status", str(run.root)]) == 0
    out = capsys.readouterr().out
    assert f"plan:     {TEMP}:" in out and "(STALE)" in out and command in out
    assert main(["status", str(run.root), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["plans"][TEMP]["stale"] is True and plan_stage_name(TEMP) in status["stale"]

    assert main(["report", str(run.root), "-q"]) == 0
    html = (run.root / REPORT_DIR / REPORT_HTML).read_text()
    assert "is stale" in html and f"mixture-{TEMP}.png" not in html

    follow(command)
    assert run.stale_reason(stage) is None
    run.require_current(stage, verify=True)


def test_a_rebuilt_embedding_makes_clusters_and_plans_stale_with_every_command(run, built, capsys):
    assert main(["embed", str(built[0]), "--out", str(run.root), "--embedder", "hashing", "--embed-shard-size", "50",
                 "-q"]) == 0
    stage = plan_stage_name(TEMP)
    why = run.stale_reason(stage)
    commands = re.findall(r"`(clusterclip [^`]+)`", why)
    assert commands == [f"clusterclip cluster {run.root} --k 4",
                        f"clusterclip plan {run.root} --strategy temperature --epochs 1 --budget-unit tokens --tau 0.3"]
    err = fails(["report", str(run.root), "-q"], capsys)
    assert "stage `cluster` is stale" in err and commands[0] in err
    for command in commands:
        follow(command)
    assert run.stale_reason(stage) is None and run.stale_reason(CLUSTER_STAGE) is None


def test_a_plan_record_without_upstream_hashes_is_corrupt_and_rebuilt(run):
    """Every record the stage runner writes lists its upstream outputs; one without them cannot be
    checked for staleness, so it counts as corrupt (never silently current)."""
    path = run.path(plan_path(TEMP, PLAN_RECORD))
    rec = json.loads(path.read_text())
    del rec["upstream"]
    path.write_text(json.dumps(rec))
    stage = plan_stage_name(TEMP)
    assert "its record is corrupt" in run.stale_reason(stage)
    command = run.rebuild_command(stage)
    assert command.endswith("--force") and "OPTIONS" not in command
    follow(command)
    assert run.stale_reason(stage) is None and "upstream" in run.record(stage)


def test_plans_before_an_add_are_behind_not_stale_until_a_refit(run, tmp_path, capsys):
    new = make_corpus(tmp_path / "new.jsonl", {"sailing": 20}, seed=3)
    assert main(["add", str(run.root), str(new), "-q"]) == 0
    stage = plan_stage_name(TEMP)
    assert run.stale_reason(stage) is None
    assert "clusterclip add" in run.behind_note(stage)
    run.require_current(stage)
    capsys.readouterr()
    assert main(["status", str(run.root)]) == 0
    out = capsys.readouterr().out
    assert "note:" in out and "STALE" not in out
    assert main(["cluster", str(run.root), "--k", "4", "--refit", "--force", "-q"]) == 0
    assert run.stale_reason(stage) is not None


# -------------------------------------------------------------------------- item 7 and 11: the report


PLAN_FILES = (PLAN_DRAWS, PLAN_UNIQUE, PLAN_MAX_REPEAT, PLAN_EXHAUSTED_AT, PLAN_MIXTURE, PLAN_REPEAT_HIST)


@pytest.mark.parametrize("rel", [corpus_part(0), TOKENS, LABELS, SCORES, SIZES, CENTROIDS,
                                 *(plan_path(TEMP, f) for f in PLAN_FILES)])
def test_the_report_refuses_a_modified_artifact(run, capsys, rel):
    path = run.path(rel)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    st = path.stat()
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    err = fails(["report", str(run.root), "-q"], capsys)
    assert f"{path}: checksum does not match" in err and "--force`" in err
    if rel == LABELS:
        follow(re.search(r"with `(clusterclip [^`]+)`", err)[1])
        assert main(["report", str(run.root), "-q"]) == 0


@pytest.mark.parametrize("rel", [corpus_part(0), SIZES])
@pytest.mark.parametrize("damage", ["truncate", "delete"])
def test_report_and_status_name_a_truncated_or_deleted_artifact(run, capsys, rel, damage):
    path = run.path(rel)
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:50])
    else:
        path.unlink()
    err = fails(["report", str(run.root), "-q"], capsys)
    assert str(path) in err and "--force`" in err
    assert main(["status", str(run.root)]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    problems = [line for line in out.splitlines() if line.startswith("problem:")]
    assert len(problems) == 1 and str(path) in problems[0] and "--force`" in problems[0]


def test_a_group_with_dollar_signs_does_not_break_the_report(run):
    html = build_report(run.root, progress=False).read_text()
    assert (run.root / REPORT_DIR / "centroid-map.png").exists()
    assert "frac{1}" in html


# ------------------------------------------------------------------------------ item 12: corrupt records


@pytest.mark.parametrize(
    ("stage", "argv"),
    [
        (CORPUS_STAGE, ["cluster", "{run}", "--k", "4", "-q"]),
        (EMBED_STAGE, ["cluster", "{run}", "--k", "4", "-q"]),
        (CLUSTER_STAGE, ["plan", "{run}", "--strategy", "uniform", "--epochs", "1", "-q"]),
        (plan_stage_name(TEMP), ["plan", "{run}", "--continue", TEMP, "--consumed", "10", "-q"]),
    ],
)
def test_a_corrupt_record_prints_a_command_that_recovers_the_run(run, capsys, stage, argv):
    record = run.record_path(stage)
    record.write_bytes(record.read_bytes()[:40])
    argv = [a.format(run=run.root) for a in argv]
    err = fails(argv, capsys)
    assert f"{record}: corrupt stage record" in err
    command = re.search(r"with `(clusterclip [^`]+)`", err)[1]
    assert command.endswith("--force") and not re.search(r"RUN|INPUT|OPTIONS", command)
    assert main(["status", str(run.root)]) == 0
    assert command in capsys.readouterr().out
    follow(command)
    assert main(argv) == 0
    assert not any(audit(run).values())
    assert not any(run.stale_reason(s) for s in finished_stages(run))


def test_a_plain_rerun_rebuilds_a_corrupt_record(run, built, caplog):
    for stage in (CORPUS_STAGE, CLUSTER_STAGE, plan_stage_name(TEMP)):
        record = run.record_path(stage)
        record.write_bytes(record.read_bytes()[:30])
    assert main(["run", str(built[0]), "--out", str(run.root), *RUN_OPTS]) == 0
    assert "corrupt stage record" in caplog.text
    assert not any(audit(run).values())
    assert not any(run.stale_reason(s) for s in finished_stages(run))


def test_rebuild_commands_render_the_recorded_settings(run):
    assert run.rebuild_command(CLUSTER_STAGE, force=True) == f"clusterclip cluster {run.root} --k 4 --force"
    assert run.rebuild_command(plan_stage_name(CLIP)) == \
        f"clusterclip plan {run.root} --strategy clusterclip --epochs 1 --budget-unit tokens"
    corpus = run.record(CORPUS_STAGE)["config"]["inputs"][0]
    assert run.rebuild_command(EMBED_STAGE) == f"clusterclip embed {corpus} --out {run.root} --embedder hashing"


# ------------------------------------------------------------------------------ a disk that fills up


def test_a_short_write_without_errno_is_reported_as_a_full_disk(tmp_path):
    """NumPy's ``tofile`` (``np.save`` into a file) says "N requested and M written" with no errno."""
    from clusterclip.store import atomic_path

    target = tmp_path / "a.npy"
    with pytest.raises(OSError) as caught, atomic_path(target):
        raise OSError("800000 requested and 8176 written")
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(target)
    assert not target.exists() and list(tmp_path.iterdir()) == []


@pytest.fixture
def tiny_disk(tmp_path):
    """A 128 KiB tmpfs mounted for the test (root only; skipped elsewhere)."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_dedup_on_a_disk_that_fills_up_is_one_line_and_the_run_recovers(built, tiny_disk, capsys):
    out = tiny_disk / "run"
    shutil.copytree(built[1], out, symlinks=True, ignore=shutil.ignore_patterns("report"))
    used = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    filler = tiny_disk / "filler"
    free = shutil.disk_usage(tiny_disk).free
    filler.write_bytes(b"\0" * max(free - 24_000, 0))  # room for the small dedup arrays, not the signatures
    err = fails(["dedup", str(out), "-q"], capsys)
    assert "disk is full" in err and str(out / "dedup") in err, err
    assert not list(out.rglob(".tmp-*")) and used
    filler.unlink()
    assert main(["dedup", str(out), "-q"]) == 0
    assert not any(audit(RunDir(out)).values())


@pytest.mark.parametrize("room", [4_000, 40_000])
def test_add_on_a_disk_that_fills_up_is_one_line_and_the_same_command_finishes(built, tiny_disk, tmp_path, capsys,
                                                                               room):
    out = tiny_disk / "run"
    shutil.copytree(built[1], out, symlinks=True, ignore=shutil.ignore_patterns("report"))
    new = make_corpus(tmp_path / "new.jsonl", {"sailing": 60}, seed=5)
    new.write_text(new.read_text().replace('"id": "', '"id": "new-'))
    filler = tiny_disk / "filler"
    filler.write_bytes(b"\0" * max(shutil.disk_usage(tiny_disk).free - room, 0))
    err = fails(["add", str(out), str(new), "-q"], capsys)
    assert "disk is full" in err, err
    filler.unlink()
    assert main(["add", str(out), str(new), "-q"]) == 0
    assert not (out / A.ADD_JOURNAL).exists() and not any(audit(RunDir(out)).values())


# ------------------------------------------------------------------------------ a record copied or swapped


def test_a_plan_record_swapped_with_another_plans_is_refused_with_this_plans_rebuild(run, capsys):
    from clusterclip.torch import ClusterClipSampler

    names = sorted(p.name for p in run.path("plans").iterdir())
    mine, other = names[0], names[1]
    shutil.copy(run.path("plans", other, PLAN_RECORD), run.path("plans", mine, PLAN_RECORD))
    err = fails(["export", str(run.root), "--plan", mine, "--dest", str(run.root.parent / "x"), "-q"], capsys)
    assert f"holds the record of `plans/{other}/plan`, not of `plans/{mine}/plan`" in err, err
    rebuild = err.split("with `")[-1].rstrip("`")
    assert other not in rebuild and f"--strategy {mine.split('-')[0]}" in rebuild, rebuild
    with pytest.raises(StaleArtifactError, match="copied or swapped"):
        ClusterClipSampler(run.root, plan_name=mine)
    capsys.readouterr()
    assert main(["status", str(run.root), "--verify"]) != 0
    assert "copied or swapped" in capsys.readouterr().out
    follow(rebuild)
    assert len(ClusterClipSampler(run.root, plan_name=mine)) > 0


def test_a_stage_record_copied_over_another_is_refused(run, capsys):
    shutil.copy(run.record_path(EMBED_STAGE), run.record_path(CLUSTER_STAGE))
    err = fails(["plan", str(run.root), "--strategy", "uniform", "-q"], capsys)
    assert "holds the record of `embed`, not of `cluster`" in err, err


def test_an_artifact_that_cannot_be_replaced_is_one_line_naming_it(run, capsys, monkeypatch):
    """An immutable artifact (``chattr +i``) refuses the rename over it: the message names the artifact, not the
    temp file beside it, and the run keeps its state."""
    import clusterclip.store.files as files

    real = os.replace

    def immutable(src, dst):
        if Path(dst) == run.path(LABELS):
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), str(src), None, str(dst))
        return real(src, dst)

    monkeypatch.setattr(files.os, "replace", immutable)
    err = fails(["cluster", str(run.root), "--k", "3", "--force", "-q"], capsys)
    assert err == f"clusterclip: error: {run.path(LABELS)}: Operation not permitted; fix or remove it and run the " \
                  "command again", err
    assert not list(run.root.rglob(".tmp-*"))
    monkeypatch.setattr(files.os, "replace", real)
    assert main(["cluster", str(run.root), "--k", "3", "--force", "-q"]) == 0


def test_while_another_process_writes_the_run_readers_say_so_instead_of_advising_a_rebuild(run, capsys):
    """A reader that meets records half rewritten by a writer (here: `cluster --force` has removed cluster.json)
    names the writer, not a rebuild; status says it is busy."""
    script = ("import time\nfrom clusterclip.store import exclusive\n"
              f"with exclusive({str(run.root)!r}):\n    print('held', flush=True)\n    time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        run.record_path(CLUSTER_STAGE).unlink()
        plan = next(run.path("plans").iterdir()).name
        err = fails(["export", str(run.root), "--plan", plan, "--dest", str(run.root.parent / "x"), "-q"], capsys)
        assert "another clusterclip process is writing this run directory right now" in err and "rebuild" not in err
        main(["status", str(run.root)])
        assert "busy:     another clusterclip process is writing" in capsys.readouterr().out
    finally:
        holder.kill()
        holder.wait()
    main(["status", str(run.root)])
    assert "busy:" not in capsys.readouterr().out
