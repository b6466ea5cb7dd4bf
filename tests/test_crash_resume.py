"""Kill ``clusterclip run`` (SIGKILL) inside every stage, or ``clusterclip add`` at every step, re-run it, and
get the same bytes.

Kills are placed with the ``CLUSTERCLIP_FAULT`` hook of :mod:`clusterclip.store`: just before an
artifact's temp file is renamed into place, or just after. The re-run must finish, reuse what was
complete (embedding shards), leave no temp files and produce artifacts byte-identical to an
uninterrupted run with the same seed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from clusterclip.contract.stages import audit
from clusterclip.store import FAULT_ENV, TMP_PREFIX, RunDir
from tests.test_cli import make_corpus

ARGS = ["--embedder", "hashing", "--embed-shard-size", "60", "--k", "5", "--max-repeat", "3", "--id-field", "id", "-q"]


def clusterclip_run(corpus: Path, out: Path, fault: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    if fault:
        env[FAULT_ENV] = fault
    return subprocess.run([sys.executable, "-m", "clusterclip", "run", str(corpus), "--out", str(out), *ARGS],
                          env=env, capture_output=True, text=True, timeout=600)


def artifacts(out: Path) -> dict[str, bytes]:
    """Every artifact file's bytes (stage records hold timings, so they are compared by checksums)."""
    files = {}
    for p in sorted(out.rglob("*")):
        if p.is_file() and p.suffix in (".npy", ".parquet"):
            files[str(p.relative_to(out))] = p.read_bytes()
    return files


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("crash")
    corpus = make_corpus(root / "corpus.jsonl", {"cooking": 150, "astronomy": 60, "finance": 50, "sailing": 40})
    out = root / "reference"
    proc = clusterclip_run(corpus, out)
    assert proc.returncode == 0, proc.stderr
    return corpus, artifacts(out)


@pytest.mark.parametrize(
    ("stage", "fault"),
    [
        ("reading", "part-00000.parquet:before"),
        ("reading", "tokens.npy:after"),
        ("embedding", "shard-00002.npy:before"),
        ("embedding", "shard-00003.npy:after"),
        ("clustering", "labels.npy:before"),
        ("clustering", "sizes.npy:after"),
        ("planning", "plan.npy:before"),
        ("planning", "mixture.npy:after"),
    ],
)
def test_killed_run_resumes_to_identical_artifacts(tmp_path, reference, stage, fault):
    corpus, expected = reference
    out = tmp_path / "run"
    killed = clusterclip_run(corpus, out, fault)
    assert killed.returncode == -signal.SIGKILL, f"the {stage} fault did not fire: {killed.stderr[-500:]}"
    progress = out / "embeddings" / "progress.json"
    listed = [Path(e["file"]).name for e in json.loads(progress.read_text())["shards"]] if progress.exists() else []
    done_shards = {name: (out / "embeddings" / name).stat().st_mtime_ns for name in listed}

    resumed = clusterclip_run(corpus, out)
    assert resumed.returncode == 0, resumed.stderr
    assert not list(out.rglob(TMP_PREFIX + "*")), "temp files left behind"
    assert artifacts(out) == expected
    run = RunDir(out)
    for rec in ("corpus", "embed", "cluster"):
        run.verify(rec)
    if stage == "embedding":
        assert done_shards, "no finished shard to reuse"
        for name, mtime in done_shards.items():
            assert (out / "embeddings" / name).stat().st_mtime_ns == mtime, f"{name} was recomputed"


ADDED = {"sailing": 40, "cooking": 30}


def clusterclip_add(out: Path, new: Path, fault: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    if fault:
        env[FAULT_ENV] = fault
    return subprocess.run([sys.executable, "-m", "clusterclip", "add", str(out), str(new), "-q"], env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def added_reference(tmp_path_factory, reference):
    """A finished run (its stages as in ``reference``), the new documents, and the bytes after adding them."""
    corpus, _ = reference
    root = tmp_path_factory.mktemp("crash-add")
    base = root / "base"
    assert clusterclip_run(corpus, base).returncode == 0
    new = make_corpus(root / "new.jsonl", ADDED, seed=3)
    new.write_text(new.read_text().replace('"id": "', '"id": "new-'))
    done = root / "done"
    shutil.copytree(base, done)
    proc = clusterclip_add(done, new)
    assert proc.returncode == 0, proc.stderr
    return base, new, {**artifacts(done), "drift.json": (done / "drift.json").read_bytes()}


@pytest.mark.parametrize(
    "fault",
    [
        "part-00001.parquet:after",   # new corpus part written, nothing else
        "add-journal.json:after",     # journal written, no existing artifact changed yet
        "tokens.npy:after",           # tokens grown, embeddings not yet
        "shard-00006.npy:before",     # first new shard written, killed inside the last one
        "sizes.npy:after",            # every array grown, records still the old ones
        "corpus.json:after",          # corpus record grown, embed and cluster records not yet
        "drift.json:after",           # everything written but the journal not yet removed
    ],
)
def test_killed_add_resumes_to_identical_artifacts(tmp_path, added_reference, fault):
    base, new, expected = added_reference
    out = tmp_path / "run"
    shutil.copytree(base, out)
    killed = clusterclip_add(out, new, fault)
    assert killed.returncode == -signal.SIGKILL, f"the fault {fault} did not fire: {killed.stderr[-500:]}"

    resumed = clusterclip_add(out, new)
    assert resumed.returncode == 0, resumed.stderr
    assert "already added" not in resumed.stdout
    assert not list(out.rglob(TMP_PREFIX + "*")), "temp files left behind"
    assert not (out / "add-journal.json").exists()
    assert {**artifacts(out), "drift.json": (out / "drift.json").read_bytes()} == expected
    run = RunDir(out)
    assert [stage for stage, problems in audit(run).items() if problems] == []
    assert json.loads((out / "corpus.json").read_text())["count"] == 300 + sum(ADDED.values())
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p.name != ".lock"}
    again = clusterclip_add(out, new)
    assert again.returncode == 0 and "already added" in again.stdout
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p.name != ".lock"} == mtimes


def clusterclip_cli(*argv: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    return subprocess.run([sys.executable, "-m", "clusterclip", *argv], env=env, capture_output=True, text=True,
                          timeout=600)


def dedup_checksums(out: Path) -> dict[str, str]:
    return {rel: meta["sha256"] for rel, meta in json.loads((out / "dedup.json").read_text())["artifacts"].items()}


@pytest.fixture(scope="module")
def deduped_reference(tmp_path_factory, added_reference):
    """``added_reference``'s run with its duplicate groups found before the add, and the bytes after the add
    (which extends the groups)."""
    base, new, _ = added_reference
    root = tmp_path_factory.mktemp("crash-dedup")
    deduped = root / "base"
    shutil.copytree(base, deduped)
    assert clusterclip_cli("dedup", str(deduped), "-q").returncode == 0
    done = root / "done"
    shutil.copytree(deduped, done)
    assert clusterclip_add(done, new).returncode == 0
    assert json.loads((done / "dedup.json").read_text())["appended_from"] == 300
    return deduped, new, artifacts(deduped), artifacts(done)


DEDUP_FAULTS = [
    "add-journal.json:after",       # nothing grown yet
    "neighbour.npy:after",          # the extension started: new semantic neighbours written, dedup.json gone
    "signatures.npy:after",         # text hashes half written
    "lexical_jaccard.npy:after",    # pairwise work extended, groups not yet
    "group.npy:before",
    "removed.parquet:after",        # every artifact written, the record not yet
    "dedup.json:after",             # the extended record written, the cluster record... and the journal still there
]


@pytest.mark.parametrize("fault", DEDUP_FAULTS)
def test_an_add_killed_while_it_extends_the_duplicate_groups_resumes_or_aborts_exactly(
        tmp_path, deduped_reference, fault):
    base, new, before, expected = deduped_reference
    for then in ("resume", "abort"):
        out = tmp_path / then
        shutil.copytree(base, out)
        killed = clusterclip_add(out, new, fault)
        assert killed.returncode == -signal.SIGKILL, f"the fault {fault} did not fire: {killed.stderr[-500:]}"
        if then == "resume":
            done = clusterclip_add(out, new)
            assert done.returncode == 0, done.stderr
            assert artifacts(out) == expected
            assert json.loads((out / "dedup.json").read_text())["documents"] == 300 + sum(ADDED.values())
        else:
            undone = clusterclip_cli("add", str(out), "--abort")
            assert undone.returncode == 0, undone.stderr
            assert "left to recompute" not in undone.stdout
            assert artifacts(out) == before
            assert dedup_checksums(out) == dedup_checksums(base)
        assert not (out / "add-journal.json").exists() and not list(out.rglob(TMP_PREFIX + "*"))
        assert [stage for stage, problems in audit(RunDir(out)).items() if problems] == []
        status = clusterclip_cli("status", str(out), "--verify")
        assert status.returncode == 0 and "dedup" in status.stdout, status.stdout + status.stderr


@pytest.mark.parametrize("fault", ["export.json:before", "export.json:after", "identity.json:after"])
@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_killed_export_finishes_with_the_bytes_of_an_uninterrupted_one(tmp_path, added_reference, fault, workers):
    """SIGKILL while the export writes its record (or its staging journal): the same command then finishes, its
    own temp file beside the record is not taken for a user's file, and the files are those of an export that
    was never killed."""
    base, _, _ = added_reference
    plan = sorted(p.name for p in (base / "plans").iterdir())[0]
    argv = ["export", str(base), "--plan", plan, "--format", "parquet", "--shard-size", "40", "--memory-mb", "1",
            "--workers", workers, "-q"]
    assert clusterclip_cli(*argv, "--dest", str(tmp_path / "reference")).returncode == 0
    env = {**os.environ, FAULT_ENV: fault}
    killed = subprocess.run([sys.executable, "-m", "clusterclip", *argv, "--dest", str(tmp_path / "out")], env=env,
                            capture_output=True, text=True, timeout=600)
    assert killed.returncode == -signal.SIGKILL, f"the fault {fault} did not fire: {killed.stderr[-500:]}"
    done = clusterclip_cli(*argv, "--dest", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert artifacts(tmp_path / "out") == artifacts(tmp_path / "reference")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(p.name for p in (tmp_path / "reference")
                                                                           .iterdir())
