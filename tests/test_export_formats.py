"""Trainer formats of ``clusterclip export``, read back by each library's own reader, against the plan."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip.cli.main import main
from clusterclip.errors import ClusterClipError
from clusterclip.export.stage import ExportConfig, export_plan
from clusterclip.export.stream import Packer, PlanStream, rebatch
from clusterclip.export.writers import registry as export_writers
from clusterclip.plan import PlanConfig
from clusterclip.plan.stage import plan_stage
from tests.test_export import _run

WORDS = ["[UNK]", "</s>", "text", "of", "doc", "ünï", *map(str, range(100))]


def _tokenizer(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.enable_truncation(2)  # as a model's saved tokenizer would; the export must still write every token
    tok.enable_padding(length=9)
    path = tmp_path / "tok" / "tokenizer.json"
    path.parent.mkdir()
    tok.save(str(path))
    return str(path.parent)


def _ids(doc: int, eos: bool = False) -> list[int]:
    """Hand tokenization of the fixture text ``text of doc {doc} ünï`` with the WordLevel vocabulary above."""
    return [2, 3, 4, WORDS.index(str(doc)), 5] + ([1] if eos else [])


def _plan(run, cfg):
    return np.load(run.path("plans", cfg.name(), "plan.npy"))


def _available(fmt: str) -> bool:
    module = {"hf": "datasets", "litdata": "litdata", "megatron": "megatron.core"}.get(fmt)
    if module is None:
        return True
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def test_hf_export_equals_reorder_dataset(tmp_path):
    datasets = pytest.importorskip("datasets")
    from clusterclip.torch import reorder_dataset

    run, cfg, labels = _run(tmp_path)
    export_plan(run, cfg.name(), tmp_path / "hf", fmt="hf", shard_size=16)
    got = datasets.load_from_disk(str(tmp_path / "hf"))
    corpus = datasets.Dataset.from_dict({"text": [f"text of doc {i} ünï" for i in range(50)],
                                         "id": [f"f.jsonl:{i}" for i in range(50)]})
    want = reorder_dataset(corpus, _plan(run, cfg))
    assert got["text"] == want["text"] and got["id"] == want["id"]
    assert got["index"] == _plan(run, cfg).tolist() and got["cluster"] == labels[_plan(run, cfg)].tolist()


def test_a_quiet_hf_export_prints_nothing(tmp_path, capfd):
    """``-q``: not even the datasets library's own progress bar of ``save_to_disk``."""
    pytest.importorskip("datasets")
    run, cfg, _ = _run(tmp_path)
    capfd.readouterr()
    assert main(["export", str(run.root), "--plan", cfg.name(), "--format", "hf", "--dest", str(tmp_path / "hf"),
                 "-q"]) == 0
    out, err = capfd.readouterr()
    assert err == "", err
    written = sorted(str(p) for p in (tmp_path / "hf").iterdir() if p.name not in (".lock", "export.json"))
    assert sorted(out.split()) == written


@pytest.mark.parametrize("tokens", [False, True])
def test_litdata_streaming_dataset_yields_the_plan_in_order(tmp_path, tokens):
    litdata = pytest.importorskip("litdata")
    run, cfg, labels = _run(tmp_path)
    plan = _plan(run, cfg)
    tok = _tokenizer(tmp_path) if tokens else None
    export_plan(run, cfg.name(), tmp_path / "lit", fmt="litdata", shard_size=32, tokenizer=tok)
    items = list(litdata.StreamingDataset(input_dir=str(tmp_path / "lit"), shuffle=False))
    assert [int(r["index"]) for r in items] == plan.tolist()
    assert [int(r["cluster"]) for r in items] == labels[plan].tolist()
    assert [r["id"] for r in items] == [f"f.jsonl:{i}" for i in plan]
    if tokens:
        assert [np.asarray(r["tokens"]).tolist() for r in items] == [_ids(i) for i in plan]
    else:
        assert [r["text"] for r in items] == [f"text of doc {i} ünï" for i in plan]


@pytest.mark.parametrize("seq_len", [None, 7])
def test_megatron_indexed_dataset_returns_the_planned_token_ids(tmp_path, seq_len):
    pytest.importorskip("megatron.core")
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    run, cfg, _ = _run(tmp_path)
    plan = _plan(run, cfg)
    export_plan(run, cfg.name(), tmp_path / "meg", fmt="megatron", tokenizer=_tokenizer(tmp_path), append_eos=True,
                seq_len=seq_len, shard_size=9)
    ds = IndexedDataset(str(tmp_path / "meg" / "data"))
    got = [ds[i].tolist() for i in range(len(ds))]
    docs = [_ids(i, eos=True) for i in plan]
    if seq_len is None:
        assert got == docs
    else:
        flat = [t for d in docs for t in d]
        n = len(flat) // seq_len
        assert got == [flat[k * seq_len:(k + 1) * seq_len] for k in range(n)]


def test_seq_len_packing_against_a_hand_computation(tmp_path):
    """Three documents in two batches packed by 4: a document runs on into the next sample, the tail is dropped."""
    packer = Packer(4)
    batches = [pa.table({"tokens": pa.array([[2, 3, 4], [7, 8]], pa.list_(pa.uint16()))}),
               pa.table({"tokens": pa.array([[9, 1, 1, 5, 6]], pa.list_(pa.uint16()))})]
    out = [packer.pack(b).column("tokens").to_pylist() for b in batches]
    assert out == [[[2, 3, 4, 7]], [[8, 9, 1, 1]]]
    assert packer.dropped == 2

    run, cfg, _ = _run(tmp_path)
    plan = _plan(run, cfg)
    export_plan(run, cfg.name(), tmp_path / "p", fmt="parquet", tokenizer=_tokenizer(tmp_path), append_eos=True,
                seq_len=8, shard_size=10)
    samples = [r["tokens"] for p in sorted((tmp_path / "p").glob("part-*.parquet")) for r in
               pq.read_table(p).to_pylist()]
    flat = [t for i in plan for t in _ids(i, eos=True)]
    assert len(flat) == 6 * len(plan) and len(samples) == len(flat) // 8
    assert samples[0] == flat[:8] and samples[1] == flat[8:16]
    assert [t for s in samples for t in s] == flat[:len(samples) * 8]
    manifest = json.loads((tmp_path / "p" / "export.json").read_text())
    assert manifest["dropped_tokens"] == len(flat) % 8 and manifest["columns"] == ["tokens"]
    assert manifest["identity"]["seq_len"] == 8 and manifest["identity"]["tokenizer"]["eos_id"] == 1


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.integers(0, 60), max_size=9), max_size=30), st.integers(1, 7), st.integers(1, 5),
       st.integers(1, 6))
def test_packing_and_rebatching_equal_one_flat_cut(docs, seq_len, window, shard):
    """Whatever the window and shard sizes, the samples are the flat token stream cut every seq_len tokens."""
    packer = Packer(seq_len)
    tables = (packer.pack(pa.table({"tokens": pa.array(docs[w:w + window], pa.list_(pa.uint16()))}))
              for w in range(0, len(docs), window))
    batches = list(rebatch(tables, shard))
    flat = [t for d in docs for t in d]
    n = len(flat) // seq_len
    assert [s for b in batches for s in b.column("tokens").to_pylist()] == [flat[k * seq_len:(k + 1) * seq_len]
                                                                            for k in range(n)]
    assert all(b.num_rows == shard for b in batches[:-1]) and packer.dropped == len(flat) - n * seq_len


def test_rebatched_batches_do_not_keep_their_source_tables_alive():
    """Each batch (and the rows carried over to the next table) owns its buffers: once the consumer has a
    table's batches, the table itself is freed, so a bucket is not held while the next one is read."""
    pool = pa.default_memory_pool()
    before = pool.bytes_allocated()

    def tables():
        for k in range(3):
            yield pa.table({"text": pa.array([f"{k}-{i}-" + "x" * 2000 for i in range(1000)])})

    batches = []
    for batch in rebatch(tables(), 300):
        batches.append(batch)
    kept = sum(b.nbytes for b in batches)
    assert [b.num_rows for b in batches] == [300] * 10
    assert all(b.column("text").num_chunks == 1 for b in batches)
    assert pool.bytes_allocated() - before <= kept + 2**20, "a batch still references its whole source table"


def _content(path):
    """The file's bytes; litdata's index.json without ``updated_at``, the time litdata wrote it."""
    if path.name == "index.json":
        index = json.loads(path.read_bytes())
        index.pop("updated_at", None)
        return index
    return path.read_bytes()


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "hf", "litdata", "megatron", "mds"])
def test_killed_export_rerun_writes_identical_bytes(tmp_path, monkeypatch, fmt):
    if not _available(fmt):
        pytest.skip(f"{fmt} library not installed")
    run, cfg, _ = _run(tmp_path)
    opts = {"fmt": fmt, "shard_size": 20, "tokenizer": _tokenizer(tmp_path) if fmt == "megatron" else None}
    clean = export_plan(run, cfg.name(), tmp_path / "clean", **opts)
    writer = export_writers.WRITERS[fmt]
    real = writer.write

    def dies_after_two(self, batch):
        if self.batches == 2:
            raise KeyboardInterrupt
        real(self, batch)

    monkeypatch.setattr(writer, "write", dies_after_two)
    with pytest.raises(KeyboardInterrupt):
        export_plan(run, cfg.name(), tmp_path / "killed", **opts)
    assert (tmp_path / "killed" / ".partial").is_dir() and not (tmp_path / "killed" / "export.json").exists()
    monkeypatch.setattr(writer, "write", real)
    again = export_plan(run, cfg.name(), tmp_path / "killed", **opts)
    assert [p.name for p in again] == [p.name for p in clean] and len(clean) >= 2
    assert [_content(p) for p in again] == [_content(p) for p in clean]
    # .lock: the folder's writer lock, held by every export of it (not an export artifact)
    assert sorted(p.name for p in (tmp_path / "killed").iterdir() if p.name != ".lock") == \
        sorted([*(p.name for p in clean), "export.json"])


def test_refuses_a_folder_from_another_plan(tmp_path):
    run, cfg, _ = _run(tmp_path)
    other = PlanConfig(budget=90, seed=4)
    plan_stage(run, other)
    out = tmp_path / "out"
    export_plan(run, cfg.name(), out, fmt="parquet")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(ClusterClipError, match=f"another plan.*plan: '{cfg.name()}' here, '{other.name()}' now"):
        export_plan(run, other.name(), out, fmt="parquet")
    with pytest.raises(ClusterClipError, match="format: 'parquet' here, 'jsonl' now"):
        export_plan(run, cfg.name(), out, fmt="jsonl")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    (out / ".partial").mkdir()
    (out / "export.json").unlink()
    (out / ".partial" / "identity.json").write_text(json.dumps({"identity": {"plan": other.name()}}))
    with pytest.raises(ClusterClipError, match="another plan"):
        export_plan(run, cfg.name(), out, fmt="parquet")
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    (stranger / "notes.txt").write_text("mine")
    with pytest.raises(ClusterClipError, match="not a clusterclip export"):
        export_plan(run, cfg.name(), stranger)


def test_export_config_needs_a_tokenizer_for_token_options():
    for kwargs, flag in [({"fmt": "megatron"}, "fmt"), ({"seq_len": 8}, "seq_len"), ({"append_eos": True},
                                                                                        "append_eos")]:
        with pytest.raises(ClusterClipError, match=f"{flag} needs tokenizer"):
            ExportConfig(**kwargs)


def test_cli_export_with_tokenizer_and_packing(tmp_path, capsys):
    run, cfg, _ = _run(tmp_path)
    tok = _tokenizer(tmp_path)
    code = main(["export", str(run.root), "--plan", cfg.name(), "--format", "jsonl", "--tokenizer", tok,
                 "--append-eos", "--seq-len", "6", "--dest", str(tmp_path / "o")])
    assert code == 0
    files = capsys.readouterr().out.split()
    rows = [json.loads(line)["tokens"] for f in files for line in Path(f).read_text(encoding="utf-8").splitlines()]
    assert rows == [_ids(i, eos=True) for i in _plan(run, cfg)]
    assert main(["export", str(run.root), "--format", "megatron", "--dest", str(tmp_path / "m")]) != 0
    assert "--format needs --tokenizer" in capsys.readouterr().err


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_windows_cut_into_text_slices_write_the_same_bytes(tmp_path, monkeypatch, fmt):
    """A window's text is handed on in slices of at most SLICE_BYTES (a window may hold more than one Arrow
    string array can: 2 GiB); slicing a tiny corpus every few rows must not change a byte."""
    from clusterclip.export import stream

    run, cfg, _ = _run(tmp_path)
    export_plan(run, cfg.name(), tmp_path / "whole", fmt=fmt, shard_size=40)
    monkeypatch.setattr(stream, "SLICE_BYTES", 64)  # about three documents per slice
    cuts = list(stream._slices(np.full(30, 25)))
    assert [a for a, _ in cuts[1:]] == [b for _, b in cuts[:-1]] and cuts[0][0] == 0 and cuts[-1][1] == 30
    assert max(b - a for a, b in cuts) * 25 <= 64 + 25 and len(cuts) >= 750 // 64
    export_plan(run, cfg.name(), tmp_path / "sliced", fmt=fmt, shard_size=40)
    whole = {p.name: p.read_bytes() for p in (tmp_path / "whole").glob("part-*")}
    assert whole and whole == {p.name: p.read_bytes() for p in (tmp_path / "sliced").glob("part-*")}


@pytest.mark.parametrize("fmt", ["parquet", "hf", "litdata", "megatron", "mds"])
@pytest.mark.parametrize("seq_len", [None, 7])
def test_buckets_write_the_bytes_of_one_window(tmp_path, monkeypatch, fmt, seq_len):
    """Tokenized, packed and padded: the stream through buckets (a corpus over --memory-mb) equals the stream
    of one window, byte for byte (litdata's index.json differs in its write time only)."""
    from clusterclip.export import buckets

    if not _available(fmt):
        pytest.skip(f"{fmt} library not installed")
    run, cfg, _ = _run(tmp_path, n=120, parts=3, budget=300)
    opts = {"fmt": fmt, "shard_size": 16, "tokenizer": _tokenizer(tmp_path), "append_eos": True, "seq_len": seq_len,
            "pad_to_multiple": 5}
    export_plan(run, cfg.name(), tmp_path / "one", **opts)
    monkeypatch.setattr(buckets, "BUCKET_BYTES", 700)  # buckets of about 23 rows, across the 16-row shards
    monkeypatch.setattr(PlanStream, "bucketed", lambda self, memory_mb: True)  # "the corpus exceeds memory"
    export_plan(run, cfg.name(), tmp_path / "many", **opts)
    record = json.loads((tmp_path / "many" / "export.json").read_text())
    assert record["buckets"] > 5 and record["corpus_reads"] == 1
    files = sorted(q.relative_to(tmp_path / "one") for q in (tmp_path / "one").rglob("*")
                   if q.is_file() and q.name not in ("export.json", ".lock"))
    assert files and files == sorted(q.relative_to(tmp_path / "many") for q in (tmp_path / "many").rglob("*")
                                     if q.is_file() and q.name not in ("export.json", ".lock"))
    for rel in files:
        assert _content(tmp_path / "one" / rel) == _content(tmp_path / "many" / rel), rel


def test_megatron_core_is_imported_without_its_warnings(tmp_path):
    """`export --format megatron -q` printed four megatron-core UserWarnings (Transformer Engine and Apex are not
    installed) from imports the writer and the dataset never use."""
    pytest.importorskip("megatron.core")
    code = ("from pathlib import Path\nimport numpy as np\n"
            "from clusterclip.export.writers.megatron import MegatronWriter\n"
            f"MegatronWriter(Path({str(tmp_path)!r}), np.dtype(np.uint16))\n"
            "import clusterclip.export.megatron_dataset\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "UserWarning" not in done.stderr, done.stderr[-2000:]
