"""The Ray engine on a local Ray instance gives the same artifacts as the local engine."""

from __future__ import annotations

import numpy as np
import pytest

from clusterclip.cli import main
from clusterclip.errors import ClusterClipError
from clusterclip.rundir import RunDir, load_npy
from tests.test_cli import make_corpus

pytest.importorskip("ray.data")


@pytest.fixture(scope="module")
def ray_local():
    from clusterclip.engines import ray_session

    with ray_session(num_cpus=2) as ray:
        yield ray


def test_ray_engine_matches_local(tmp_path, ray_local):
    corpus = make_corpus(tmp_path / "c.jsonl", {"cooking": 150, "astronomy": 60, "finance": 40, "sailing": 30})
    common = ["--embedder", "hashing", "--shard-size", "100", "-q"]
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


def test_ray_engine_resumes_from_a_shard_boundary(tmp_path, ray_local, monkeypatch):
    import clusterclip.corpus
    from clusterclip.corpus import corpus_stage
    from clusterclip.embed import embed_stage

    monkeypatch.setattr(clusterclip.corpus, "PART_ROWS", 40)
    monkeypatch.setattr(clusterclip.corpus, "BATCH_ROWS", 20)

    corpus = make_corpus(tmp_path / "c.jsonl", {"cooking": 90, "sailing": 40})
    run = RunDir(tmp_path / "run")
    assert len(corpus_stage(run, [corpus], progress=False)["artifacts"]) > 3, "several corpus parts"
    embed_stage(run, "hashing", shard_size=50, progress=False)
    reference = [(run.root / f"embeddings/shard-{i:05d}.npy").read_bytes() for i in range(3)]
    (run.root / "embeddings/shard-00002.npy").unlink()
    (run.root / "embeddings/shard-00001.npy").unlink()
    run.invalidate("embed")
    embed_stage(run, "hashing", shard_size=50, progress=False, engine="ray")
    assert [(run.root / f"embeddings/shard-{i:05d}.npy").read_bytes() for i in range(3)] == reference


def test_unknown_engine_is_rejected():
    from clusterclip.engines import check_engine

    with pytest.raises(ClusterClipError, match="--engine must be one of local, ray"):
        check_engine("spark")
