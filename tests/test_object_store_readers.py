"""The trainer-side readers of an export in a bucket (the real S3 server of the ``s3`` fixture): megatron's builder
through ``PlanOrderGPTDataset``, litdata's ``StreamingDataset`` driven by ``ClusterClipSampler.from_export``; inputs
read from a store other than S3 through the same layer (fsspec's ``memory://``), streamed rather than downloaded.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from clusterclip.export.stage import export_plan
from clusterclip.store import RunDir
from tests.test_export import _run
from tests.test_export_formats import _ids, _plan, _tokenizer
from tests.test_export_mds import _streaming, needs_streaming

pytest.importorskip("s3fs")
pytest.importorskip("moto")


def test_plan_order_gpt_dataset_reads_an_export_in_the_bucket_as_on_disk(s3, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("megatron.core")
    from clusterclip.errors import ClusterClipError
    from clusterclip.export.megatron_dataset import PlanOrderGPTDataset
    from tests.test_megatron_dataset import _available, _build, _config, _tokens

    run, cfg, _ = _run(tmp_path)
    tok = _tokenizer(tmp_path)
    export_plan(run, cfg.name(), f"{s3}/meg", fmt="megatron", tokenizer=tok, append_eos=True)
    flat = [t for i in _plan(run, cfg) for t in _ids(int(i), eos=True)]
    n = _available(len(flat))
    with pytest.raises(ClusterClipError, match="set object_storage_cache_path"):
        _build(PlanOrderGPTDataset, _config([f"{s3}/meg/data"]), [n, None, None])
    config = _config([f"{s3}/meg/data"], object_storage_cache_path=str(tmp_path / "idx"), mmap_bin_files=False)
    train, _, _ = _build(PlanOrderGPTDataset, config, [n, None, None])
    assert _tokens(train, n) == flat[:n * 8]  # megatron's S3 reader, in plan order


def test_litdata_streams_an_export_in_the_bucket_natively(s3, tmp_path, monkeypatch):
    """litdata reads the bucket itself: iterated, the export is the plan; driven by ``from_export``'s sampler (row by
    row, after ``dataset[0:0]`` switches litdata 0.2.76 from its by-range reads of single rows, which return empty
    rows for chunks its own ``BinaryWriter`` wrote, to whole chunks), the loader yields the plan too. litdata's
    obstore path refuses a plain-http endpoint (the local server), so its boto3 path is taken here."""
    torch = pytest.importorskip("torch")
    litdata = pytest.importorskip("litdata")
    downloader = pytest.importorskip("litdata.streaming.downloader")
    from clusterclip.torch import ClusterClipSampler, ExportRows

    monkeypatch.setattr(downloader, "_OBSTORE_AVAILABLE", False)
    run, cfg, _ = _run(tmp_path)
    plan = _plan(run, cfg).tolist()
    export_plan(run, cfg.name(), f"{s3}/lit", fmt="litdata", shard_size=32)
    streamed = litdata.StreamingDataset(f"{s3}/lit", shuffle=False, cache_dir=str(tmp_path / "c1"))
    assert [int(r["index"]) for r in streamed] == plan
    dataset = litdata.StreamingDataset(f"{s3}/lit", shuffle=False, cache_dir=str(tmp_path / "c2"))
    dataset[0:0]
    loader = torch.utils.data.DataLoader(ExportRows(dataset), batch_size=16, sampler=ClusterClipSampler.from_export(
        f"{s3}/lit"), collate_fn=lambda b: b)
    assert [int(r["index"]) for batch in loader for r in batch] == plan


def test_from_export_reads_an_mds_export_in_the_bucket(s3, tmp_path):
    """The sampler over an MDS export in the bucket: its record and index.json read from there."""
    pytest.importorskip("torch")
    from clusterclip.torch import ClusterClipSampler

    run, cfg, _ = _run(tmp_path)
    export_plan(run, cfg.name(), f"{s3}/mds", fmt="mds")
    assert list(ClusterClipSampler.from_export(f"{s3}/mds")) == list(range(len(_plan(run, cfg))))


STREAM_REMOTE = """
import json, sys
from streaming import StreamingDataset
ds = StreamingDataset(remote=sys.argv[1], local=sys.argv[2], shuffle=False, batch_size=1)
print(json.dumps([int(ds[i]["index"]) for i in range(len(ds))]))
"""


@needs_streaming
def test_streaming_reads_an_mds_export_in_the_bucket_natively(s3, s3_server, tmp_path):
    """MosaicML Streaming's own ``remote=`` reader (boto3, in its own environment) downloads the export's shards from
    the bucket (its endpoint from ``S3_ENDPOINT_URL``, streaming's variable) and reads the plan in order."""
    run, cfg, _ = _run(tmp_path)
    export_plan(run, cfg.name(), f"{s3}/mds", fmt="mds", shard_size=16)
    done = _streaming("-c", STREAM_REMOTE, f"{s3}/mds", str(tmp_path / "cache"), env={"S3_ENDPOINT_URL": s3_server})
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == _plan(run, cfg).tolist()


def test_an_input_of_another_store_goes_through_the_same_layer_and_is_streamed(tmp_path):
    """``memory://`` (fsspec's in-process store: no S3 code path) holds a JSONL file and a Parquet file; the corpus
    parts read from there are those read from disk, and neither input lands in the working copy."""
    import fsspec
    import pyarrow as pa
    import pyarrow.parquet as pq

    from clusterclip.corpus.stage import corpus_stage
    from clusterclip.store.replica import local_path

    src = tmp_path / "src"
    src.mkdir()
    (src / "a.jsonl").write_text("".join(json.dumps({"text": f"line {i} " * 5}) + "\n" for i in range(30)))
    pq.write_table(pa.table({"text": [f"row {i} " * 4 for i in range(20)]}), src / "b.parquet", row_group_size=6)
    memory = fsspec.filesystem("memory")
    for name in ("a.jsonl", "b.parquet"):
        memory.put_file(str(src / name), f"/cc-test/{name}")
    try:
        here = corpus_stage(RunDir(tmp_path / "here"), [str(src / "a.jsonl"), str(src / "b.parquet")],
                            progress=False)
        urls = ["memory://cc-test/a.jsonl", "memory://cc-test/b.parquet"]
        there = corpus_stage(RunDir(tmp_path / "there"), urls, progress=False)
        assert here.count == there.count == 50
        for rel in ("corpus/part-00000.parquet", "tokens.npy"):
            assert (tmp_path / "here" / rel).read_bytes() == (tmp_path / "there" / rel).read_bytes()
        assert [e["path"] for e in there.inputs] == urls
        assert not any(local_path(u).exists() for u in urls)  # streamed, never downloaded
        assert np.load(tmp_path / "there" / "tokens.npy").size == 50
    finally:
        memory.rm("/cc-test", recursive=True)
