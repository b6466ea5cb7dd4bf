"""The Ray engine on a cluster whose nodes share no disk: inputs, run directory and export in a bucket.

Two nodes of a ``ray.cluster_utils`` cluster on this machine, each with its own temporary and working folder, and a
driver in a process of its own with its own temporary folder. Every Ray worker runs with an audit hook that fails
the task the moment it opens, lists, creates or removes anything in the driver's folder, so a path that only means
something on the driver's disk cannot pass unnoticed: workers read their blocks from the store and write their
parts there. ``clusterclip run`` and a one-pass (bucketed) ``clusterclip export`` on Ray give every artifact
byte-identical to the local engine's on disk.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from clusterclip.cli.main import main

pytest.importorskip("ray.data")
s3fs = pytest.importorskip("s3fs")

from tests.test_object_store import artifacts_in_store, artifacts_on_disk, store

ARGS = ["--embedder", "hashing", "--embed-shard-size", "100", "--k", "4", "--max-repeat", "3", "--id-field", "id", "-q"]
PLAN = "clusterclip-R3-tokens-B2epochs-s0"
EXPORT = ["--plan", PLAN, "--format", "parquet", "--shard-size", "128", "--memory-mb", "1", "-q"]

DRIVER = """
import os, sys
import ray
from clusterclip.cli.main import main

FORBIDDEN = os.environ["DRIVER_TMP"]
EVENTS = {"open", "os.listdir", "os.scandir", "os.mkdir", "os.remove", "os.rename", "os.rmdir", "os.truncate",
          "shutil.rmtree", "os.chmod"}

def guard():
    import os, sys

    def hook(event, args):
        if event in EVENTS and args and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.path.abspath(os.fsdecode(os.fspath(args[0])))
            if path.startswith(FORBIDDEN):
                raise PermissionError(f"shared nothing: a Ray worker reached {path} on the driver's disk ({event})")

    sys.addaudithook(hook)

ray.init(address=os.environ["CLUSTER"], runtime_env={"worker_process_setup_hook": guard}, log_to_driver=False,
         configure_logging=False)
sys.exit(main(sys.argv[1:]))
"""

PROBE = """
import json, os, tempfile, time
import ray
ray.init(address=os.environ["CLUSTER"], log_to_driver=False, configure_logging=False)

@ray.remote(num_cpus=1)
def where():
    time.sleep(1)
    return ray.get_runtime_context().get_node_id(), tempfile.gettempdir(), os.getcwd()

print(json.dumps(sorted(set(map(tuple, ray.get([where.remote() for _ in range(4)]))))))
"""


def corpus_files(folder: Path) -> list[Path]:
    """Two JSONL files of long documents (about 0.5 MB of text: over a 1 MiB export window)."""
    rng = np.random.default_rng(3)
    words = ["galaxy", "star", "orbit", "planet", "recipe", "oven", "bake", "flour", "stock", "bond", "market",
             "boat", "sail", "wind"]
    files = []
    for f in range(2):
        path = folder / f"part{f}.jsonl"
        with open(path, "w") as fh:
            for i in range(150):
                topic = rng.integers(0, 4)
                text = " ".join(rng.choice(words[topic * 4:topic * 4 + 6], size=int(rng.integers(150, 300))))
                fh.write(json.dumps({"id": f"d{f}-{i}", "text": text}) + "\n")
        files.append(path)
    return files


@pytest.fixture
def cluster():
    """Two one-CPU nodes, each started with its own temporary and working folder (short paths under /tmp: Ray's
    socket paths live in the temporary folder and may not exceed 107 bytes)."""
    from ray.cluster_utils import Cluster

    from clusterclip.ray_session import remove_session

    saved_tmp, saved_cwd = os.environ.get("TMPDIR"), os.getcwd()
    folders = []
    try:
        for n in range(2):
            folder = Path(tempfile.mkdtemp(prefix=f"cc-node{n}-", dir="/tmp"))
            (folder / "tmp").mkdir()
            os.environ["TMPDIR"] = str(folder / "tmp")
            os.chdir(folder)
            if n == 0:
                cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
            else:
                cluster.add_node(num_cpus=1)
            folders.append(folder)
    finally:
        os.chdir(saved_cwd)
        if saved_tmp is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved_tmp
    session = Path(cluster.head_node.get_session_dir_path())
    try:
        cluster.wait_for_nodes()
        yield cluster, folders
    finally:
        cluster.shutdown()
        remove_session(session)
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)


def _driver(argv: list[str], cluster, driver_tmp: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "CLUSTER": cluster.address, "TMPDIR": str(driver_tmp), "DRIVER_TMP": str(driver_tmp),
           "HF_HUB_OFFLINE": "1"}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run([sys.executable, "-c", DRIVER, *argv], env=env, capture_output=True, text=True,
                          timeout=600, cwd=driver_tmp)


def test_run_and_export_on_two_nodes_sharing_no_disk_match_the_local_engine(s3, tmp_path, cluster):
    ray_cluster, nodes = cluster
    env = {**os.environ, "CLUSTER": ray_cluster.address}
    seen = json.loads(subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                                     timeout=300, check=True).stdout)
    assert len({node for node, _, _ in seen}) == 2  # both nodes run tasks ...
    assert {(tmp, cwd) for _, tmp, cwd in seen} == {(str(n / "tmp"), str(n)) for n in nodes}  # ... each in its folders

    local = tmp_path / "local"
    local.mkdir()
    files = corpus_files(local)
    assert main(["run", *map(str, files), "--out", str(local / "run"), *ARGS]) == 0
    assert main(["export", str(local / "run"), *EXPORT, "--dest", str(local / "out")]) == 0
    assert json.loads((local / "out" / "export.json").read_text())["buckets"] > 1  # the one-pass export's tasks

    fs = store()
    for f in files:
        fs.put_file(str(f), f"{s3.removeprefix('s3://')}/in/{f.name}")
    driver_tmp = tmp_path / "driver"
    driver_tmp.mkdir()
    done = _driver(["run", f"{s3}/in/*.jsonl", "--out", f"{s3}/runs/r", *ARGS, "--engine", "ray"], ray_cluster,
                   driver_tmp)
    assert done.returncode == 0, done.stderr[-3000:]
    assert artifacts_in_store(f"{s3}/runs/r") == artifacts_on_disk(local / "run")
    done = _driver(["export", f"{s3}/runs/r", *EXPORT, "--dest", f"{s3}/out", "--engine", "ray"], ray_cluster,
                   driver_tmp)
    assert done.returncode == 0, done.stderr[-3000:]
    assert artifacts_in_store(f"{s3}/out") == artifacts_on_disk(local / "out")
    assert not [k for k in fs.find(s3.removeprefix("s3://")) if "/.partial" in k or "/.tmp-" in k]
