"""``--format mds``: MosaicML Streaming's MDS, written by clusterclip itself and read back twice.

Always: an independent decoder of the documented layout (``index.json``, shard header, offsets, the shard's
config, each sample's column sizes and encodings), written here from the format description rather than
from the writer, checks every file and the plan order. With ``CLUSTERCLIP_MDS_PYTHON`` naming the python of an
environment with ``mosaicml-streaming`` (``scripts/mds-env.sh``, ``make mds-check``): streaming's own
``StreamingDataset`` reads the exports in one process and, with the recipe of docs/export.md verbatim, on
2 ranks x 2 loader workers, and its ``MDSWriter`` writes the same rows into byte-identical files.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
from itertools import pairwise
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from clusterclip.errors import ClusterClipError
from clusterclip.export.stage import export_plan
from clusterclip.export.writers import mds
from tests.test_export import _run
from tests.test_export_formats import _ids, _plan, _tokenizer

DOCS = Path(__file__).resolve().parent.parent / "docs" / "export.md"
CONFIG_KEYS = ("column_encodings", "column_names", "column_sizes", "compression", "format", "hashes",
               "size_limit", "version")
SHAPE_DTYPES = {0: "<u1", 1: "<u2", 2: "<u4", 3: "<u8"}
MDS_PYTHON = os.environ.get("CLUSTERCLIP_MDS_PYTHON")
needs_streaming = pytest.mark.skipif(
    not MDS_PYTHON, reason="CLUSTERCLIP_MDS_PYTHON is not set: streaming's own reader runs in its own environment "
                           "(make mds-check, or CLUSTERCLIP_MDS_PYTHON=$(scripts/mds-env.sh))")


# -- an independent reader of the layout

def _value(encoding: str, data: bytes):
    if encoding == "str":
        return data.decode("utf-8")
    if encoding == "int":
        assert len(data) == 8
        return int(np.frombuffer(data, "<i8")[0])
    kind, _, dtype = encoding.partition(":")
    assert kind == "ndarray" and dtype in ("uint16", "int32")
    ndim, shape_dtype = data[0] >> 2, np.dtype(SHAPE_DTYPES[data[0] & 3])
    shape = np.frombuffer(data, shape_dtype, ndim, 1)
    values = np.frombuffer(data, np.dtype(dtype).newbyteorder("<"), offset=1 + ndim * shape_dtype.itemsize)
    assert values.size == math.prod(int(s) for s in shape)
    return values.reshape(tuple(int(s) for s in shape))


def _sample(data: bytes, shard: dict) -> dict:
    names, encodings, sizes = shard["column_names"], shard["column_encodings"], shard["column_sizes"]
    assert names == sorted(names)
    variable = [i for i, size in enumerate(sizes) if size is None]
    lengths = dict(zip(variable, np.frombuffer(data, "<u4", len(variable)).tolist(), strict=True))
    at, row = 4 * len(variable), {}
    for i, (name, encoding) in enumerate(zip(names, encodings, strict=True)):
        size = lengths.get(i, sizes[i])
        row[name] = _value(encoding, data[at:at + size])
        at += size
    assert at == len(data)
    return row


def decode(folder: Path) -> tuple[list[dict], list[dict]]:
    """Every row of an MDS folder in order, and the shards of its ``index.json``, checking each file."""
    index = json.loads((folder / "index.json").read_text(encoding="utf-8"))
    assert index["version"] == 2 and set(index) == {"shards", "version", "clusterclip"}  # + the export's identity
    rows = []
    for k, shard in enumerate(index["shards"]):
        assert shard["raw_data"]["basename"] == f"shard.{k:05d}.mds" and shard["zip_data"] is None
        assert shard["format"] == "mds" and shard["compression"] is None and shard["version"] == 2
        data = (folder / shard["raw_data"]["basename"]).read_bytes()
        assert len(data) == shard["raw_data"]["bytes"]
        assert len(data) <= shard["size_limit"] or shard["samples"] == 1
        n = int(np.frombuffer(data, "<u4", 1)[0])
        offsets = np.frombuffer(data, "<u4", n + 1, 4).astype(np.int64)
        header = 4 + 4 * (n + 1)
        assert n == shard["samples"] and offsets[-1] == len(data) and (np.diff(offsets) >= 0).all()
        assert json.loads(data[header:offsets[0]]) == {key: shard[key] for key in CONFIG_KEYS}
        rows += [_sample(data[b:e], shard) for b, e in pairwise(offsets)]
    return rows, index["shards"]


# -- always

@pytest.mark.parametrize("tokens", [False, True])
def test_mds_export_decodes_to_the_plan_in_order(tmp_path, tokens):
    run, cfg, labels = _run(tmp_path)
    plan = _plan(run, cfg)
    files = export_plan(run, cfg.name(), tmp_path / "mds", fmt="mds", shard_size=32,
                        tokenizer=_tokenizer(tmp_path) if tokens else None)
    assert [p.name for p in files] == ["index.json", "shard.00000.mds"]
    rows, shards = decode(tmp_path / "mds")
    first = "tokens" if tokens else "text"
    assert shards[0]["column_names"] == sorted(["cluster", "id", "index", first])
    assert shards[0]["column_encodings"] == ["int", "str", "int", "ndarray:uint16" if tokens else "str"]
    assert shards[0]["size_limit"] == 1 << 26
    assert [r["index"] for r in rows] == plan.tolist() and [r["cluster"] for r in rows] == labels[plan].tolist()
    assert [r["id"] for r in rows] == [f"f.jsonl:{i}" for i in plan]
    if tokens:
        assert [r["tokens"].tolist() for r in rows] == [_ids(i) for i in plan]
        assert all(r["tokens"].dtype == np.uint16 for r in rows)
    else:
        assert [r["text"] for r in rows] == [f"text of doc {i} ünï" for i in plan]
    manifest = json.loads((tmp_path / "mds" / "export.json").read_text())
    assert manifest["files"] == ["index.json", "shard.00000.mds"] and manifest["rows"] == len(plan)


def test_mds_packed_samples_are_the_flat_token_stream(tmp_path):
    run, cfg, _ = _run(tmp_path)
    export_plan(run, cfg.name(), tmp_path / "p", fmt="mds", tokenizer=_tokenizer(tmp_path), append_eos=True,
                seq_len=7, shard_size=9)
    rows, shards = decode(tmp_path / "p")
    flat = [t for i in _plan(run, cfg) for t in _ids(i, eos=True)]
    assert shards[0]["column_names"] == ["tokens"] and shards[0]["column_sizes"] == [None]
    assert [r["tokens"].tolist() for r in rows] == [flat[k * 7:(k + 1) * 7] for k in range(len(flat) // 7)]


def test_shards_end_where_the_next_sample_would_pass_the_size_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(mds, "SIZE_LIMIT", 900)
    run, cfg, _ = _run(tmp_path)
    files = export_plan(run, cfg.name(), tmp_path / "mds", fmt="mds", shard_size=7)
    rows, shards = decode(tmp_path / "mds")
    assert len(shards) > 3 and [p.name for p in files] == ["index.json", *(f"shard.{k:05d}.mds"
                                                                          for k in range(len(shards)))]
    assert [r["index"] for r in rows] == _plan(run, cfg).tolist()
    for shard, after in pairwise(shards):
        data = (tmp_path / "mds" / after["raw_data"]["basename"]).read_bytes()
        begin, end = np.frombuffer(data, "<u4", 2, 4)
        assert shard["raw_data"]["bytes"] <= 900 < shard["raw_data"]["bytes"] + int(end - begin) + 4


def test_array_encoding_sizes_its_shape_and_writes_empty_arrays():
    for n, k in [(0, 0), (1, 0), (255, 0), (256, 1), (65_535, 1), (65_536, 2)]:
        data = mds.encode_array(np.arange(n, dtype=np.int64), np.dtype(np.int32))
        assert data[0] == (1 << 2) | k
        assert _value("ndarray:int32", data).tolist() == list(range(n))


def test_a_null_text_is_refused(tmp_path):
    writer = mds.MdsWriter(tmp_path, np.dtype(np.uint16))
    with pytest.raises(ClusterClipError, match="text column has nulls"):
        writer.write(pa.table({"text": pa.array([None], pa.string()), "id": ["a"], "index": [0], "cluster": [1]}))
    with pytest.raises(ClusterClipError, match="plan is empty"):
        writer.close()


# -- streaming's own reader and writer, in their environment

READ = """
import json, os, sys
import numpy as np
from streaming import MDSWriter, StreamingDataset

out = {}
for folder in sys.argv[1:]:
    rows = [{k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in row.items()}
            for row in StreamingDataset(local=folder, shuffle=False, batch_size=4)]
    shards = json.load(open(os.path.join(folder, "index.json")))["shards"]
    columns = dict(zip(shards[0]["column_names"], shards[0]["column_encodings"]))
    again = folder + ".mdswriter"
    try:
        with MDSWriter(columns=columns, out=again, size_limit=shards[0]["size_limit"]) as writer:
            for row in rows:
                writer.write({k: np.asarray(v, dtype=columns[k].split(":")[1]) if k == "tokens" else v
                              for k, v in row.items()})
    except Exception as exc:
        out[folder] = {"rows": rows, "mdswriter": repr(exc)}
        continue
    names = sorted(os.listdir(again))
    same = names == sorted(n for n in os.listdir(folder) if n != "export.json" and not n.startswith("."))
    def content(path):
        if path.endswith("index.json"):  # clusterclip's index also names the export's plan
            return {k: v for k, v in json.load(open(path)).items() if k != "clusterclip"}
        return open(path, "rb").read()

    same = same and all(content(os.path.join(again, n)) == content(os.path.join(folder, n)) for n in names)
    out[folder] = {"rows": rows, "mdswriter": "identical" if same else "differs", "files": names}
print(json.dumps(out))
"""


def _streaming(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([MDS_PYTHON, *args], cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True,
                          text=True, timeout=600)


@needs_streaming
def test_streaming_dataset_reads_the_export_and_mdswriter_writes_the_same_bytes(tmp_path, monkeypatch):
    monkeypatch.setattr(mds, "SIZE_LIMIT", 1200)
    run, cfg, labels = _run(tmp_path)
    plan = _plan(run, cfg)
    tok = _tokenizer(tmp_path)
    opts = {"text": {}, "tokens": {"tokenizer": tok}, "packed": {"tokenizer": tok, "append_eos": True, "seq_len": 7}}
    for name, kw in opts.items():
        export_plan(run, cfg.name(), tmp_path / name, fmt="mds", shard_size=16, **kw)
    empty = tmp_path / "empty"  # a document without tokens: MDSWriter refuses it, streaming's reader reads it
    empty.mkdir()
    writer = mds.MdsWriter(empty, np.dtype(np.int32))
    writer.write(pa.table({"tokens": pa.array([[7, 70_000], [], [3]], pa.list_(pa.int32()))}))
    writer.close()
    done = _streaming("-c", READ, *(str(tmp_path / name) for name in opts), str(empty))
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.splitlines()[-1])
    assert got[str(empty)]["rows"] == [{"tokens": [7, 70_000]}, {"tokens": []}, {"tokens": [3]}]
    assert "0 elements" in got[str(empty)]["mdswriter"]
    for name in opts:
        rows = got[str(tmp_path / name)]["rows"]
        assert got[str(tmp_path / name)]["mdswriter"] == "identical", name
        assert len(got[str(tmp_path / name)]["files"]) > 2, "several shards"
        assert rows == [{k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in r.items()}
                        for r in decode(tmp_path / name)[0]]
    assert [r["index"] for r in got[str(tmp_path / "text")]["rows"]] == plan.tolist()
    assert [r["cluster"] for r in got[str(tmp_path / "text")]["rows"]] == labels[plan].tolist()
    assert [r["text"] for r in got[str(tmp_path / "text")]["rows"]] == [f"text of doc {i} ünï" for i in plan]
    assert [r["tokens"] for r in got[str(tmp_path / "tokens")]["rows"]] == [_ids(i) for i in plan]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _recipe() -> str:
    """The python block of docs/export.md's MosaicML Streaming recipe."""
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("### MosaicML Streaming (`--format mds`)"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@needs_streaming
@pytest.mark.parametrize("budget", [130, 131])
def test_docs_recipe_on_two_ranks_and_two_workers_reads_the_plan_in_order(tmp_path, monkeypatch, budget):
    """Global batch ``s`` (rank 0's and rank 1's batch ``s``, interleaved row by row) is the plan's next rows."""
    monkeypatch.setattr(mds, "SIZE_LIMIT", 1200)
    run, cfg, _ = _run(tmp_path, budget=budget)
    plan = _plan(run, cfg).tolist()
    export_plan(run, cfg.name(), tmp_path / "mds", fmt="mds")
    script = _recipe() + ("\nimport json, os\njson.dump([[int(i) for i in b['index']] for b in loader], "
                          "open(os.environ['LOG'], 'w'))\n")
    # the launcher's variables (as torchrun sets them): streaming starts a gloo group on 127.0.0.1 with them
    group = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    ranks = [subprocess.Popen([MDS_PYTHON, "-c", script], cwd=tmp_path, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, **group, "RANK": str(r), "LOCAL_RANK": str(r),
                                   "LOG": str(tmp_path / f"rank{r}.json")})
             for r in range(2)]
    for proc in ranks:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
    batches = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    per_rank = -(-len(plan) // 2)
    assert [sum(map(len, b)) for b in batches] == [per_rank, per_rank]
    read = [i for step in zip(*batches, strict=True) for pair in zip(*step, strict=True) for i in pair]
    assert len(read) == 2 * per_rank and read[:len(plan)] == plan  # 131 rows: 132 reads, one a repeat (pad)
