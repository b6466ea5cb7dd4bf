"""Corpora, run directories and exports in object storage, against a real S3 server on 127.0.0.1 (``s3`` fixture:
moto's server mode, started once per session).

``clusterclip run s3://.../*.jsonl.gz --out s3://.../runs/r``, ``plan``, ``export --dest s3://...``, ``status --verify``
and a training loop through the sampler over the exported shards, each against the same files on disk: the artifacts
are byte-identical. The writer lock is a lock object (another live writer refused, a dead one's taken over), every
reader format reads from the store, and errors name the URL.
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import time
from pathlib import Path

import numpy as np
import pytest

from clusterclip.cli.main import main
from clusterclip.store import RunDir

s3fs = pytest.importorskip("s3fs")
pytest.importorskip("moto")

from tests.test_cli import make_corpus

ARGS = ["--embedder", "hashing", "--embed-shard-size", "60", "--k", "5", "--max-repeat", "3", "--id-field", "id", "-q"]
PLAN = "clusterclip-R3-tokens-B2epochs-s0"


def store() -> s3fs.S3FileSystem:
    return s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False)


def artifacts_on_disk(root: Path) -> dict[str, bytes]:
    """Every array and Parquet file of a run directory or export on disk, by relative path."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.suffix in (".npy", ".parquet", ".arrow", ".bin", ".idx")}


def artifacts_in_store(url: str) -> dict[str, bytes]:
    fs, base = store(), url.removeprefix("s3://")
    return {k[len(base) + 1:]: fs.cat_file(k) for k in sorted(fs.find(base))
            if k.rsplit(".", 1)[-1] in ("npy", "parquet", "arrow", "bin", "idx")}


def gz_inputs(folder: Path) -> list[Path]:
    """The test corpus as two ``.jsonl.gz`` files (alternate lines)."""
    plain = make_corpus(folder / "all.jsonl", {"cooking": 150, "astronomy": 60, "finance": 50, "sailing": 40})
    lines = plain.read_bytes().splitlines(keepends=True)
    files = []
    for i in range(2):
        path = folder / f"c{i}.jsonl.gz"
        with gzip.GzipFile(path, "wb", mtime=0) as fh:
            fh.writelines(lines[i::2])
        files.append(path)
    return files


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The corpus files and the artifacts of ``clusterclip run`` on them on disk."""
    root = tmp_path_factory.mktemp("local")
    files = gz_inputs(root)
    assert main(["run", *map(str, files), "--out", str(root / "run"), *ARGS]) == 0
    return files, artifacts_on_disk(root / "run"), root / "run"


def upload(files: list[Path], url: str) -> None:
    fs = store()
    for f in files:
        fs.put_file(str(f), f"{url.removeprefix('s3://')}/{f.name}")


def test_run_plan_export_status_and_a_training_loop_all_in_the_bucket(s3, reference, tmp_path, capsys):
    files, expected, local = reference
    upload(files, f"{s3}/corpus")
    run = f"{s3}/runs/r"
    assert main(["run", f"{s3}/corpus/*.jsonl.gz", "--out", run, *ARGS]) == 0
    assert artifacts_in_store(run) == expected  # byte-identical to the run on disk
    out = capsys.readouterr().out
    assert "clusterclip-remote-" not in out

    assert main(["plan", run, "--strategy", "clusterclip", "--max-repeat", "2", "-q"]) == 0
    assert main(["plan", str(local), "--strategy", "clusterclip", "--max-repeat", "2", "-q"]) == 0
    assert artifacts_in_store(run) == artifacts_on_disk(local)

    assert main(["export", run, "--plan", PLAN, "--format", "hf", "--dest", f"{s3}/out", "-q"]) == 0
    assert main(["export", str(local), "--plan", PLAN, "--format", "hf", "--dest", str(tmp_path / "out"), "-q"]) == 0
    assert artifacts_in_store(f"{s3}/out") == artifacts_on_disk(tmp_path / "out")
    assert not [k for k in store().find(s3.removeprefix("s3://")) if "/.partial" in k or "/.tmp-" in k]

    capsys.readouterr()
    assert main(["status", "--verify", run]) == 0
    status = capsys.readouterr().out
    assert f"run directory: {run}" in status and "verify:   corpus: ok" in status
    assert "clusterclip-remote-" not in status

    torch = pytest.importorskip("torch")
    datasets = pytest.importorskip("datasets")
    from clusterclip.torch import ClusterClipSampler, ExportRows

    sampler = ClusterClipSampler.from_export(f"{s3}/out")
    rows = ExportRows(datasets.load_from_disk(f"{s3}/out"))  # datasets reads the bucket itself (fsspec)
    loader = torch.utils.data.DataLoader(rows, batch_size=50, sampler=sampler, collate_fn=lambda b: b)
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    seen = []
    for batch in loader:
        seen.extend(row["index"] for row in batch)
        x = torch.tensor([[float(len(row["text"]))] for row in batch]) / 1000
        loss = (model(x) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    plan = np.load(local / "plans" / PLAN / "plan.npy")
    assert seen == plan.tolist()  # every planned row, in plan order, read from the bucket
    direct = ClusterClipSampler(run, plan_name=PLAN)  # the plan itself, read from the run directory in the bucket
    assert list(direct) == plan.tolist()


def test_status_verify_catches_an_object_rewritten_with_the_same_size(s3, reference, capsys):
    files, _, _ = reference
    upload(files, f"{s3}/corpus")
    run = f"{s3}/runs/r"
    assert main(["run", f"{s3}/corpus/c0.jsonl.gz", f"{s3}/corpus/c1.jsonl.gz", "--out", run, *ARGS]) == 0
    fs, key = store(), f"{run.removeprefix('s3://')}/labels.npy"
    data = bytearray(fs.cat_file(key))
    data[-1] ^= 1
    fs.pipe_file(key, bytes(data))
    capsys.readouterr()
    assert main(["status", run]) == 0  # the quick check sees the new ETag: named as a problem, exit status 0
    assert f"{run}/labels.npy: checksum does not match" in capsys.readouterr().out
    assert main(["status", "--verify", run]) == 1
    assert f"{run}/labels.npy" in capsys.readouterr().out


def _lock(url: str, host: str, pid: int, expires: float) -> None:
    body = {"host": host, "pid": pid, "started": None, "token": "x", "expires": expires, "lease_s": 60}
    store().pipe_file(f"{url.removeprefix('s3://')}/.lock", json.dumps(body).encode())


def test_the_lock_object_refuses_a_live_writer_and_takes_over_a_dead_ones(s3, reference, capsys):
    files, _, _ = reference
    upload(files, f"{s3}/corpus")
    run = f"{s3}/runs/r"
    assert main(["run", f"{s3}/corpus/*.jsonl.gz", "--out", run, *ARGS]) == 0
    plan = ["plan", run, "--strategy", "uniform", "-q"]
    _lock(run, "another-host", 1, time.time() + 600)  # another machine, lease running
    capsys.readouterr()
    assert main(plan) == 2
    err = capsys.readouterr().err
    assert "another clusterclip process is writing this run directory" in err and "another-host" in err
    assert "clusterclip-remote-" not in err
    _lock(run, socket.gethostname(), 2**22 + 12345, time.time() + 600)  # this host, a pid that does not run
    assert main(plan) == 0
    _lock(run, "another-host", 1, time.time() - 1)  # another machine, lease run out
    assert main(plan) == 0
    assert not store().exists(f"{run.removeprefix('s3://')}/.lock")  # released


def test_every_reader_format_reads_from_the_bucket_as_from_disk(s3, tmp_path):
    """Parquet, plain and zstd JSONL, a folder of .txt files and a Hugging Face save_to_disk folder: the same
    corpus parts as on disk."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    from clusterclip.corpus.stage import corpus_stage

    src = tmp_path / "src"
    (src / "txt" / "sub").mkdir(parents=True)
    for i in range(30):
        (src / "txt" / ("sub" if i % 3 else "") / f"doc{i:02d}.txt").write_text(f"text number {i} " * (i + 2))
    pq.write_table(pa.table({"text": [f"parquet row {i} " * 3 for i in range(40)], "id": [f"p{i}" for i in range(40)]}),
                   src / "rows.parquet", row_group_size=7)
    lines = "".join(json.dumps({"text": f"json line {i} " * 3, "id": f"j{i}"}) + "\n" for i in range(20)).encode()
    (src / "plain.jsonl").write_bytes(lines)
    (src / "packed.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(lines.replace(b"j", b"z")))
    inputs = [src / "rows.parquet", src / "txt", src / "plain.jsonl", src / "packed.jsonl.zst"]
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"text": [f"hf row {i} " * 4 for i in range(25)]}).save_to_disk(str(src / "hf"))
    inputs.append(src / "hf")
    store().put(str(src) + "/", f"{s3.removeprefix('s3://')}/src", recursive=True)
    here = corpus_stage(RunDir(tmp_path / "local"), [str(p) for p in inputs], progress=False)
    there = corpus_stage(RunDir(f"{s3}/runs/r"), [f"{s3}/src/{p.name}" for p in inputs], progress=False)
    assert here.count == there.count == 135
    assert artifacts_in_store(f"{s3}/runs/r") == artifacts_on_disk(tmp_path / "local")
    assert [e["path"] for e in there.inputs][:1] == [f"{s3}/src/rows.parquet"]  # recorded by URL


def test_inputs_that_are_not_there_are_one_line_naming_the_url(s3, capsys):
    assert main(["run", f"{s3}/none.jsonl", "--out", f"{s3}/runs/r", *ARGS]) == 2
    assert f"clusterclip: error: {s3}/none.jsonl: no such file or directory" in capsys.readouterr().err
    assert main(["run", f"{s3}/nothing/*.jsonl.gz", "--out", f"{s3}/runs/r", *ARGS]) == 2
    assert f"{s3}/nothing/*.jsonl.gz: no object matches the pattern" in capsys.readouterr().err
    assert not store().find(s3.removeprefix("s3://"))  # a failed first command leaves no run directory, no lock


def test_an_unreachable_store_is_one_line(monkeypatch, tmp_path, capsys):
    pytest.importorskip("s3fs")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens there
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    assert main(["status", "s3://no-such-bucket/runs/r"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("clusterclip: error: s3://no-such-bucket/runs/r: cannot reach the store") and "\n" not in err


def test_a_shrinking_corpus_removes_its_stale_parts_from_the_bucket(s3, tmp_path, monkeypatch):
    from clusterclip.corpus import limits
    from clusterclip.corpus.stage import corpus_stage

    monkeypatch.setattr(limits, "PART_ROWS", 100)
    files = gz_inputs(tmp_path)
    upload(files, f"{s3}/corpus")
    run = RunDir(f"{s3}/runs/r")
    first = corpus_stage(run, [f"{s3}/corpus/c0.jsonl.gz", f"{s3}/corpus/c1.jsonl.gz"], progress=False)
    assert len(first.parts()) == 3
    second = corpus_stage(run, [f"{s3}/corpus/c0.jsonl.gz"], progress=False, force=True)
    listed = sorted(k.rsplit("/", 1)[1] for k in store().find(f"{run.where.removeprefix('s3://')}/corpus"))
    assert listed == [p.rsplit("/", 1)[1] for p in second.parts()] == ["part-00000.parquet", "part-00001.parquet"]


def test_working_copy_paths_are_shown_as_urls(s3):
    from clusterclip.store.replica import display, local_path, url_of

    path = local_path(f"{s3}/runs/r/labels.npy")
    assert url_of(path) == f"{s3}/runs/r/labels.npy"
    other = str(path).replace(str(path).split("/s3/")[0], "/elsewhere/tmp/clusterclip-remote-abc123")
    assert url_of(other) == f"{s3}/runs/r/labels.npy"  # a path of another process names the same object
    assert display(f"`clusterclip plan {path.parent} --force`: {other} is missing") == \
        f"`clusterclip plan {s3}/runs/r --force`: {s3}/runs/r/labels.npy is missing"
    assert os.fspath(local_path("relative/dir")) == "relative/dir"


def test_under_its_lock_a_process_reads_the_json_files_it_knows_without_asking_the_store(s3, monkeypatch):
    """Taking the lock brings the folder's JSON files up to date from one listing (one rewritten and one removed by
    another machine since they were fetched); while it is held they are read from the working copy, no request
    each; once it is released they are asked for again."""
    from clusterclip.store import load_json
    from clusterclip.store import objects as O

    fs, key = store(), f"{s3.removeprefix('s3://')}/runs/t"
    fs.pipe_file(f"{key}/old.json", b'{"a": 1}')
    fs.pipe_file(f"{key}/gone.json", b'{"a": 1}')
    run = RunDir(f"{s3}/runs/t")
    assert load_json(run.path("old.json")) == {"a": 1} and run.path("gone.json").exists()
    fs.pipe_file(f"{key}/old.json", b'{"a": 2}')
    fs.rm(f"{key}/gone.json")
    asked = []
    for name in ("info", "listing"):
        real = getattr(O, name)
        monkeypatch.setattr(O, name, lambda url, real=real, name=name: asked.append(name) or real(url))
    with run.lock():
        asked.clear()
        assert load_json(run.path("old.json")) == {"a": 2} and not run.path("gone.json").exists()
        assert run.record("corpus") is None
        assert asked == []
    fs.pipe_file(f"{key}/old.json", b'{"a": 3}')
    assert load_json(run.path("old.json")) == {"a": 3} and asked


def test_a_store_whose_fsspec_package_is_missing_is_one_line_naming_it(tmp_path, capsys):
    import importlib.util

    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed")
    assert main(["run", "gs://bucket/data/*.jsonl", "--out", str(tmp_path / "r"), *ARGS]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("clusterclip: error: gs://bucket/data/*.jsonl: reading and writing gs:// needs the gcsfs package: "
                   "pip install gcsfs")
    assert not (tmp_path / "r").exists()
