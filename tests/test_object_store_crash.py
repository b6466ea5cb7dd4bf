"""Kill ``clusterclip run`` and ``clusterclip export`` (SIGKILL) while they write into a bucket, re-run them, and get
the bytes of an uninterrupted run on disk (the real S3 server of the ``s3`` fixture).

The kills are the ``CLUSTERCLIP_FAULT`` points of :mod:`clusterclip.store` (just before an artifact is moved into
place in the working copy, so nothing of it reached the store, or just after, when it was sent and its record
not yet): inside each writing stage of ``run`` and while the export publishes. The re-run takes over the dead
process's lock object, finishes, reuses the embedding shards the store holds, leaves no temporary key and no
scratch folder, and every record checks with its checksums.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from clusterclip.contract.stages import audit
from clusterclip.store import FAULT_ENV, RunDir
from clusterclip.store.replica import MARK

pytest.importorskip("s3fs")
pytest.importorskip("moto")

from tests.test_object_store import artifacts_in_store, artifacts_on_disk, gz_inputs, store, upload

ARGS = ["--embedder", "hashing", "--embed-shard-size", "60", "--k", "5", "--max-repeat", "3", "--id-field", "id", "-q"]
EXPORT = ["--format", "parquet", "--shard-size", "40", "--memory-mb", "1", "-q"]


def clusterclip(argv: list[str], tmp: Path, fault: str | None = None) -> subprocess.CompletedProcess:
    """The CLI in its own process, with the bucket's environment, its temporary folder ``tmp`` and the fault."""
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    env["TMPDIR"] = str(tmp)
    if fault:
        env[FAULT_ENV] = fault
    return subprocess.run([sys.executable, "-m", "clusterclip", *argv], env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The corpus files, a finished run on disk, one of its plans and an export of it on disk."""
    root = tmp_path_factory.mktemp("crash-s3")
    files = gz_inputs(root)
    run = root / "run"
    done = clusterclip(["run", *map(str, files), "--out", str(run), *ARGS], root)
    assert done.returncode == 0, done.stderr
    plan = sorted(p.name for p in (run / "plans").iterdir())[0]
    done = clusterclip(["export", str(run), "--plan", plan, *EXPORT, "--dest", str(root / "out")], root)
    assert done.returncode == 0, done.stderr
    return files, run, plan, root / "out"


def leftovers(s3: str, tmp: Path) -> list[str]:
    """Temporary keys and staging folders in the bucket, and scratch folders of working copies in ``tmp``."""
    keys = [k for k in store().find(s3.removeprefix("s3://")) if "/.tmp-" in k or "/.partial" in k]
    return keys + [p.name for p in tmp.iterdir() if p.name.startswith(MARK)]


def shard_times(run: str) -> dict[str, object]:
    fs = store()
    return {k.rsplit("/", 1)[1]: fs.info(k)["LastModified"]
            for k in fs.find(f"{run.removeprefix('s3://')}/embeddings") if k.endswith(".npy")}


@pytest.mark.parametrize(
    ("stage", "fault"),
    [
        ("reading", "part-00000.parquet:before"),  # nothing of the corpus stage in the store yet
        ("embedding", "shard-00003.npy:after"),  # three shards sent, their progress journal not yet
        ("clustering", "cluster.json:after"),  # the record sent, the plans not begun
        ("planning", "mixture.npy:after"),  # an artifact of a plan sent, its record not
    ],
)
def test_a_run_killed_in_the_bucket_resumes_to_the_bytes_on_disk(s3, reference, tmp_path, stage, fault):
    files, local, _, _ = reference
    upload(files, f"{s3}/corpus")
    run = f"{s3}/runs/r"
    argv = ["run", f"{s3}/corpus/*.jsonl.gz", "--out", run, *ARGS]
    killed = clusterclip(argv, tmp_path, fault)
    assert killed.returncode == -signal.SIGKILL, f"the {stage} fault did not fire: {killed.stderr[-500:]}"
    assert store().exists(f"{run.removeprefix('s3://')}/.lock")  # the dead writer's lock object is left behind
    assert [stage for stage, problems in audit(RunDir(run)).items() if problems] == []  # what it lists is whole
    before = shard_times(run)

    resumed = clusterclip(argv, tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert artifacts_in_store(run) == artifacts_on_disk(local)
    assert leftovers(s3, tmp_path) == []
    assert not store().exists(f"{run.removeprefix('s3://')}/.lock")
    if stage == "embedding":
        finished = {name: t for name, t in before.items() if name < "shard-00003.npy"}
        assert finished and {n: shard_times(run)[n] for n in finished} == finished  # not sent again
    assert [stage for stage, problems in audit(RunDir(run)).items() if problems] == []


@pytest.mark.parametrize("fault", ["identity.json:after", "export.json:before", "export.json:after"])
def test_an_export_killed_in_the_bucket_finishes_with_the_bytes_on_disk(s3, reference, tmp_path, fault):
    """The run on disk, exported into the bucket: killed while it stages, publishes or writes its record."""
    _, local, plan, expected = reference
    argv = ["export", str(local), "--plan", plan, *EXPORT, "--dest", f"{s3}/out"]
    killed = clusterclip(argv, tmp_path, fault)
    assert killed.returncode == -signal.SIGKILL, f"the fault {fault} did not fire: {killed.stderr[-500:]}"
    done = clusterclip(argv, tmp_path)
    assert done.returncode == 0, done.stderr
    assert artifacts_in_store(f"{s3}/out") == artifacts_on_disk(expected)
    assert leftovers(s3, tmp_path) == []
    names = sorted({k.rsplit("/", 1)[1] for k in store().find(f"{s3.removeprefix('s3://')}/out")})
    assert names == sorted(p.name for p in expected.rglob("*") if p.is_file() and p.name != ".lock")
