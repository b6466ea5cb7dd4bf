"""The Ray engine on a local Ray instance gives the same artifacts as the local engine."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip.cli.main import main
from clusterclip.embed.config import EmbedConfig
from clusterclip.errors import ClusterClipError
from clusterclip.store import RunDir, artifact_checksums, load_npy
from tests.test_cli import make_corpus

pytest.importorskip("ray.data")


@pytest.fixture(scope="module")
def ray_local():
    from clusterclip.engines import ray_session

    with ray_session(num_cpus=2) as ray:
        yield ray


def test_ray_engine_matches_local(tmp_path, ray_local):
    corpus = make_corpus(tmp_path / "c.jsonl", {"cooking": 150, "astronomy": 60, "finance": 40, "sailing": 30})
    common = ["--embedder", "hashing", "--embed-shard-size", "100", "-q"]
    local, remote = tmp_path / "local", tmp_path / "ray"
    assert main(["embed", str(corpus), "--out", str(local), *common]) == 0
    assert main(["embed", str(corpus), "--out", str(remote), *common, "--engine", "ray"]) == 0
    for i in range(3):
        shard = f"embeddings/shard-{i:05d}.npy"
        assert (local / shard).read_bytes() == (remote / shard).read_bytes()
    assert RunDir(remote).record("embed")["engine"] == "ray"

    assert main(["cluster", str(local), "--k", "4", "-q"]) == 0
    assert main(["cluster", str(remote), "--k", "4", "-q", "--engine", "ray"]) == 0
    np.testing.assert_array_equal(load_npy(local / "centroids.npy"), load_npy(remote / "centroids.npy"))
    np.testing.assert_array_equal(load_npy(local / "labels.npy"), load_npy(remote / "labels.npy"))
    np.testing.assert_allclose(load_npy(local / "scores.npy"), load_npy(remote / "scores.npy"), atol=1e-6)


def test_ray_engine_matches_local_with_the_fitted_lsa_model(tmp_path, ray_local):
    corpus = make_corpus(tmp_path / "c.jsonl", {"cooking": 120, "astronomy": 50, "finance": 30})
    common = ["--embedder", "lsa", "--embed-shard-size", "80", "-q"]
    local, remote = tmp_path / "local", tmp_path / "ray"
    assert main(["embed", str(corpus), "--out", str(local), *common]) == 0
    assert main(["embed", str(corpus), "--out", str(remote), *common, "--engine", "ray"]) == 0
    sums = artifact_checksums(RunDir(remote).record("embed"))
    assert artifact_checksums(RunDir(local).record("embed")) == sums
    assert any(rel.startswith("embeddings/lsa/") for rel in sums)


def test_ray_engine_resumes_from_a_shard_boundary(tmp_path, ray_local, monkeypatch):
    import clusterclip.corpus.limits
    from clusterclip.corpus.stage import corpus_stage
    from clusterclip.embed.stage import embed_stage

    monkeypatch.setattr(clusterclip.corpus.limits, "PART_ROWS", 40)
    monkeypatch.setattr(clusterclip.corpus.limits, "BATCH_ROWS", 20)

    corpus = make_corpus(tmp_path / "c.jsonl", {"cooking": 90, "sailing": 40})
    run = RunDir(tmp_path / "run")
    assert len(corpus_stage(run, [corpus], progress=False).to_json()["artifacts"]) > 3, "several corpus parts"
    embed_stage(run, EmbedConfig(embedder="hashing", shard_size=50), progress=False)
    reference = [(run.root / f"embeddings/shard-{i:05d}.npy").read_bytes() for i in range(3)]
    (run.root / "embeddings/shard-00002.npy").unlink()
    (run.root / "embeddings/shard-00001.npy").unlink()
    run.invalidate("embed")
    embed_stage(run, EmbedConfig(embedder="hashing", shard_size=50), progress=False, engine="ray")
    assert [(run.root / f"embeddings/shard-{i:05d}.npy").read_bytes() for i in range(3)] == reference


def _mixed_inputs(root):
    """Several work units of every kind: JSONL, gzip JSONL (with a bad line), Parquet in row groups of
    10 (with a null text in row 33), a .txt folder."""
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq

    root.mkdir()
    first = make_corpus(root / "a.jsonl", {"cooking": 70, "astronomy": 25})
    second = make_corpus(root / "b.jsonl", {"finance": 30, "sailing": 20}, seed=1)
    with gzip.open(root / "b.jsonl.gz", "wt") as fh:
        lines = second.read_text().splitlines()
        fh.write("\n".join([*lines[:10], "{not json", *lines[10:]]) + "\n")
    second.unlink()
    texts = [f"parquet row {i} about rigging and sails on a long voyage" for i in range(45)]
    texts[32] = None
    pq.write_table(pa.table({"id": [f"pq-{i}" for i in range(45)], "text": texts, "domain": ["sailing"] * 45}),
                   root / "c.parquet", row_group_size=10)
    (root / "notes").mkdir()
    for i in range(23):
        (root / "notes" / f"n{i:02d}.txt").write_text(f"note {i}: orbits, telescopes and the night sky")
    return [first, root / "b.jsonl.gz", root / "c.parquet", root / "notes"]


def test_ray_corpus_stage_writes_the_local_engines_bytes(tmp_path, ray_local, monkeypatch):
    import clusterclip.corpus.limits
    from clusterclip.corpus.config import CorpusConfig
    from clusterclip.corpus.inputs import expand_inputs, work_units
    from clusterclip.corpus.stage import corpus_stage

    monkeypatch.setattr(clusterclip.corpus.limits, "PART_ROWS", 40)
    monkeypatch.setattr(clusterclip.corpus.limits, "BATCH_ROWS", 16)
    monkeypatch.setattr(clusterclip.corpus.limits, "TXT_FILES_PER_UNIT", 10)
    monkeypatch.setattr(clusterclip.corpus.limits, "PARQUET_ROWS_PER_UNIT", 15)
    monkeypatch.setattr(clusterclip.corpus.limits, "JSONL_BYTES_PER_UNIT", 3000)
    inputs = _mixed_inputs(tmp_path / "in")
    config = CorpusConfig(id_field="id", on_bad_record="skip")
    local = corpus_stage(RunDir(tmp_path / "local"), inputs, config, progress=False).to_json()
    remote = corpus_stage(RunDir(tmp_path / "ray"), inputs, config, progress=False, engine="ray").to_json()

    a_ranges = -(-inputs[0].stat().st_size // 3000)
    assert a_ranges > 2
    units = work_units(expand_inputs(inputs), split=True)
    assert len(units) == a_ranges + 1 + 3 + 3, "a.jsonl in byte ranges, c.parquet in row-group runs"
    assert local["count"] == remote["count"] == 70 + 25 + 50 + 44 + 23
    assert len(remote["artifacts"]) == 1 + -(-remote["count"] // 40), "parts of exactly PART_ROWS rows"
    assert artifact_checksums(remote) == artifact_checksums(local), "byte-identical parts and tokens.npy"
    for key in ("tokens", "skipped", "skipped_examples", "groups", "duplicate_ids"):
        assert remote[key] == local[key], key
    assert remote["skipped"] == 2 and "b.jsonl.gz:11" in remote["skipped_examples"][0]
    assert "c.parquet:33" in remote["skipped_examples"][1]
    assert remote["engine"] == "ray"
    assert not (tmp_path / "ray" / "corpus" / ".staging").exists()


def test_ray_corpus_stage_reports_a_bad_record_in_one_line(tmp_path, ray_local):
    from clusterclip.corpus.stage import corpus_stage
    from clusterclip.errors import BadRecordError

    inputs = _mixed_inputs(tmp_path / "in")
    with pytest.raises(BadRecordError, match=r"b\.jsonl\.gz:11: invalid JSON") as info:
        corpus_stage(RunDir(tmp_path / "ray"), inputs, progress=False, engine="ray")
    assert "\n" not in str(info.value)
    assert RunDir(tmp_path / "ray").record("corpus") is None
    assert not (tmp_path / "ray" / "corpus" / ".staging").exists()


def test_unknown_engine_is_rejected():
    from clusterclip.engines import check_engine

    with pytest.raises(ClusterClipError, match=r"^engine must be one of local, ray"):
        check_engine("spark")


def test_encoder_actors_take_one_gpu_each_when_the_cluster_has_gpus():
    from clusterclip.engines import _pool_size

    class FakeRay:
        def __init__(self, resources):
            self.resources = resources

        def cluster_resources(self):
            return self.resources

    assert _pool_size(FakeRay({"CPU": 64.0, "GPU": 8.0}), 1.0) == (8, 1.0, 1.0)
    assert _pool_size(FakeRay({"CPU": 64.0, "GPU": 8.0}), 0.0) == (63, 0.0, 1.0), "assignment stays on CPUs"
    assert _pool_size(FakeRay({"CPU": 16.0}), 1.0) == (15, 0.0, 1.0), "no GPU: one actor per CPU but one"
    assert _pool_size(FakeRay({"CPU": 1.0}), 0.0) == (1, 0.0, 0.0), "one CPU: the reads need it"


def test_ray_tasks_keep_call_order_and_surface_errors(ray_local):
    from clusterclip.engines import ray_tasks

    def square_slowly(i):
        import time

        time.sleep(0.05 * (5 - i))
        return i * i

    seen = []
    assert ray_tasks(square_slowly, [(i,) for i in range(5)], on_done=seen.append) == [0, 1, 4, 9, 16]
    assert sorted(seen) == [0, 1, 4, 9, 16]

    def fail(kind, delay=0.0):
        import time

        time.sleep(delay)
        if kind == "ok":
            return kind
        if kind == "bug":
            raise ZeroDivisionError("a bug")
        raise ClusterClipError(f"{kind}: invalid JSON")

    with pytest.raises(ClusterClipError, match=r"^data\.jsonl:3: invalid JSON$"):
        ray_tasks(fail, [("data.jsonl:3",)])
    with pytest.raises(ZeroDivisionError):
        ray_tasks(fail, [("bug",)])
    # the first failure in call order wins, even when a later call fails sooner
    with pytest.raises(ClusterClipError, match=r"^first\.jsonl:1: "):
        ray_tasks(fail, [("ok",), ("first.jsonl:1", 1.0), ("ok",), ("later.jsonl:9", 0.0)])


def test_a_local_ray_session_removes_its_session_folder(tmp_path):
    import os
    import subprocess
    import sys

    code = ("from clusterclip.engines import ray_session\n"
            "import ray\n"
            "with ray_session(num_cpus=1):\n"
            "    print(ray._private.worker._global_node.get_session_dir_path())\n")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True,
                          timeout=300)
    session = Path(done.stdout.strip().splitlines()[-1])
    assert session.name.startswith("session_") and not session.exists(), "the Ray session folder was left behind"


def test_the_cli_on_ray_prints_none_of_rays_own_lines_and_leaves_no_session(tmp_path):
    """No token-authentication notice, no ``core_worker.cc ... E`` line, no Ray Data INFO lines: the bars and
    clusterclip's own messages only; and the local instance's session folder is gone afterwards."""
    import os
    import subprocess
    import sys

    corpus = make_corpus(tmp_path / "c.jsonl", {"cooking": 40, "astronomy": 30})
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "HF_HUB_OFFLINE": "1"}
    code = ("import sys, ray\n"
            "from clusterclip.cli.main import main\n"
            "import clusterclip.ray_session as s\n"
            "folders = []\n"
            "folder = s.session_folder\n"
            "s.session_folder = lambda r: folders.append(folder(r)) or folders[-1]\n"
            "rc = main(sys.argv[1:])\n"
            "print(folders[0])\n"
            "sys.exit(rc)\n")
    done = subprocess.run([sys.executable, "-c", code, "run", str(corpus), "--embedder", "hashing", "--k", "2",
                           "--out", str(tmp_path / "run"), "--engine", "ray"], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    for noise in ("Token authentication", "core_worker.cc", "streaming_executor", "Progress bars disabled"):
        assert noise not in done.stderr, done.stderr[-2000:]
    assert "embed (hashing, ray)" in done.stderr
    session = Path(done.stdout.strip().splitlines()[-1])
    assert session.name.startswith("session_") and not session.exists()


@pytest.mark.slow
@pytest.mark.parametrize("nodes", [2, 1])
def test_ray_address_alone_connects_to_an_existing_two_node_cluster(tmp_path, nodes):
    """Through RAY_ADDRESS, on two one-CPU nodes and on a cluster of one CPU (where the encoder actor once took
    the only CPU and the reads waited for it forever): the local engine's bytes."""
    import os
    import subprocess
    import sys

    from tests.ray_cluster import two_node_cluster

    corpus = make_corpus(tmp_path / "c.jsonl", {"cooking": 40, "astronomy": 30, "finance": 20})
    argv = ["run", str(corpus), "--embedder", "hashing", "--k", "3", "-q"]
    assert main([*argv, "--out", str(tmp_path / "local")]) == 0
    with two_node_cluster(nodes) as cluster:
        env = {**os.environ, "RAY_ADDRESS": cluster.address, "HF_HUB_OFFLINE": "1"}
        done = subprocess.run([sys.executable, "-m", "clusterclip", *argv, "--out", str(tmp_path / "ray"),
                               "--engine", "ray"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    for name in ("labels.npy", "tokens.npy", "embeddings/shard-00000.npy"):
        np.testing.assert_array_equal(load_npy(tmp_path / "ray" / name), load_npy(tmp_path / "local" / name),
                                      err_msg=name)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 60), st.integers(1, 17), st.integers(0, 3), st.randoms(use_true_random=False))
def test_embeddings_arriving_out_of_order_are_written_in_document_order(n, shard, start_shards, rnd):
    """Ray Data can hand a large parquet file's blocks back out of order: the shards must not change."""
    from clusterclip.engines import in_document_order

    start = min(start_shards * shard, n)
    rows = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    cuts = sorted({start, n, *(rnd.randint(start, n) for _ in range(4))})
    blocks = [(np.arange(a, b), rows[a:b]) for a, b in itertools.pairwise(cuts)]
    rnd.shuffle(blocks)
    got = list(in_document_order(blocks, start, n, shard))
    want = [rows[a:min(a + shard, n)].astype(np.float16) for a in range(start, n, shard)]
    assert len(got) == len(want) and all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
    if len(blocks) > 1:
        with pytest.raises(ClusterClipError, match="missing or repeated"):
            list(in_document_order(blocks[1:], start, n, shard))
        with pytest.raises(ClusterClipError, match="arrived twice"):
            list(in_document_order([*blocks, blocks[0]], start, n, shard))


def test_dedup_on_ray_runs_clusters_as_tasks_with_the_local_results(tmp_path, ray_local, monkeypatch):
    import shutil

    import clusterclip.dedup.stage as dedup_stage
    from tests.test_dedup import corpus_with_copies

    corpus_with_copies(tmp_path / "c.jsonl", n=200)
    lines = (tmp_path / "c.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "c1.jsonl").write_text("".join(lines[:90]))
    (tmp_path / "c2.jsonl").write_text("".join(lines[90:]))
    assert main(["embed", str(tmp_path / "c1.jsonl"), "--out", str(tmp_path / "local"), "--embedder", "hashing",
                 "--id-field", "id", "-q"]) == 0
    assert main(["cluster", str(tmp_path / "local"), "--k", "4", "-q"]) == 0
    assert main(["add", str(tmp_path / "local"), str(tmp_path / "c2.jsonl"), "-q"]) == 0
    assert len(list((tmp_path / "local" / "corpus").glob("part-*.parquet"))) == 2  # one signature task per part
    shutil.copytree(tmp_path / "local", tmp_path / "ray")
    monkeypatch.setattr(dedup_stage, "RAY_TASK_DOCS", 30)  # several clusters' tasks
    assert main(["dedup", str(tmp_path / "local"), "-q"]) == 0
    assert main(["dedup", str(tmp_path / "ray"), "--engine", "ray", "-q"]) == 0
    for name in ("neighbour.npy", "group.npy", "kept.npy", "signatures.npy", "lexical_pairs.npy"):
        assert (tmp_path / "local" / "dedup" / name).read_bytes() == (tmp_path / "ray" / "dedup" / name).read_bytes()
    # Ray workers run BLAS on one thread: cosines may differ in the last float32 bit
    np.testing.assert_allclose(load_npy(tmp_path / "ray" / "dedup" / "similarity.npy"),
                               load_npy(tmp_path / "local" / "dedup" / "similarity.npy"), atol=1e-6)
    assert RunDir(tmp_path / "ray").record("dedup")["engine"] == "ray"
