"""Exports of conversation records: ``--keep-record`` (the default for a corpus of conversations) writes each planned
document's input record beside ``index``/``cluster`` in jsonl, parquet and hf; ``--tokenizer`` applies the chat
template and ``--assistant-only-loss`` writes the loss mask, in every tokenized format."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from clusterclip.cli.main import main
from clusterclip.cluster.config import ClusterConfig
from clusterclip.cluster.stage import cluster_stage
from clusterclip.corpus.config import CorpusConfig
from clusterclip.corpus.stage import corpus_stage
from clusterclip.embed.config import EmbedConfig
from clusterclip.embed.stage import embed_stage
from clusterclip.errors import ClusterClipError
from clusterclip.export.stage import ExportConfig, export_plan
from clusterclip.export.stream import PlanStream
from clusterclip.plan import PlanConfig
from clusterclip.plan.stage import plan_stage
from clusterclip.settings import SettingsError
from clusterclip.store import RunDir
from clusterclip.torch import load_plan
from tests.chat_records import CHAT_TEMPLATE, minilm_tokenizer, read_records, write_chat

PLAN = PlanConfig(strategy="clusterclip", max_repeat=3, epochs=2)


def _flat(rows: list[list[int]]) -> list[int]:
    return list(itertools.chain.from_iterable(rows))


def _jsonl(folder):
    return [json.loads(line) for p in sorted(folder.glob("part-*.jsonl")) for line in p.read_text().splitlines()]


def chat_run(tmp_path, records=None, n=60):
    """A run over chat records (``records``: these, else ``n`` generated ones); its source's records, in order."""
    source = tmp_path / "chat.jsonl"
    if records is None:
        write_chat(source, n)
    else:
        source.write_text("".join(json.dumps(r) + "\n" for r in records))
    run = RunDir(tmp_path / "run")
    with run.lock():
        corpus_stage(run, [source], CorpusConfig(), progress=False)
        embed_stage(run, EmbedConfig(embedder="hashing"), progress=False)
        cluster_stage(run, ClusterConfig(k=3), progress=False)
        plan_stage(run, PLAN)
    return run, read_records(source)


def test_run_and_export_of_chat_records_need_no_flag_and_keep_every_record_as_it_was(tmp_path):
    """The issue's done-when: ``clusterclip run chat.jsonl --out R`` on 1,000 ``messages`` records, then ``export R
    --format jsonl``: each row's ``messages`` is the input record's, as a JSON value, in plan order."""
    source = write_chat(tmp_path / "chat.jsonl", 1000)
    out = tmp_path / "R"
    assert main(["run", str(source), "--out", str(out), "-q"]) == 0
    records = read_records(source)
    plan = "clusterclip-R4-tokens-B2epochs-s0"
    assert main(["export", str(out), "--plan", plan, "--format", "jsonl", "--dest", str(tmp_path / "E"), "-q"]) == 0
    rows = _jsonl(tmp_path / "E")
    order = load_plan(out, plan).tolist()
    assert [r["index"] for r in rows] == order
    for row, doc in zip(rows, order, strict=True):
        assert json.dumps(row["messages"]) == json.dumps(records[doc]["messages"])
        assert {k: v for k, v in row.items() if k not in ("index", "cluster")} == records[doc]
    record = json.loads((tmp_path / "E" / "export.json").read_text())
    assert record["columns"] == ["messages", "domain", "meta", "index", "cluster"]
    assert record["identity"]["keep_record"] is True and "--keep-record" not in record["command"]


@pytest.mark.parametrize("fmt", ["parquet", "hf"])
def test_typed_formats_keep_the_records_fields_as_columns(tmp_path, fmt):
    run, records = chat_run(tmp_path)
    export_plan(run, PLAN.name(), tmp_path / fmt, fmt=fmt)
    if fmt == "hf":
        datasets = pytest.importorskip("datasets")
        rows = datasets.load_from_disk(str(tmp_path / fmt)).to_list()
    else:
        rows = [r for p in sorted((tmp_path / fmt).glob("*.parquet")) for r in pq.read_table(p).to_pylist()]
    order = load_plan(run.root, PLAN.name()).tolist()
    assert [r["index"] for r in rows] == order
    for row, doc in zip(rows, order, strict=True):
        assert row["messages"] == records[doc]["messages"] and row["domain"] == records[doc]["domain"]
        assert json.loads(row["meta"]) == records[doc]["meta"]  # its tags mix types: no Arrow type, JSON text


def test_fields_absent_from_some_records_are_null_in_typed_formats_and_absent_in_jsonl(tmp_path):
    rows = [{"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i} " * 5}],
             **({"source": "web", "score": 1} if i % 2 else {"score": 2.5})} for i in range(30)]
    run, records = chat_run(tmp_path, rows)
    export_plan(run, PLAN.name(), tmp_path / "p", fmt="parquet")
    export_plan(run, PLAN.name(), tmp_path / "j", fmt="jsonl")
    typed = pq.read_table(sorted((tmp_path / "p").glob("*.parquet"))[0])
    assert typed.schema.field("score").type == "double" and typed.schema.field("source").type == "string"
    for row, line in zip(typed.to_pylist(), _jsonl(tmp_path / "j"), strict=True):
        doc = records[row["index"]]
        assert row["source"] == doc.get("source") and row["score"] == doc["score"]
        assert {k: v for k, v in line.items() if k not in ("index", "cluster")} == doc


def test_keeping_the_record_is_refused_where_it_cannot_be_done(tmp_path):
    with pytest.raises(SettingsError, match="keep_record writes the records' fields"):
        ExportConfig(keep_record=True, tokenizer="t.json")
    with pytest.raises(SettingsError, match="keep_record"):
        ExportConfig(keep_record=True, fmt="litdata")
    with pytest.raises(SettingsError, match="assistant_only_loss needs tokenizer"):
        ExportConfig(assistant_only_loss=True)
    rows = [{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a b c d"}],
             "index": i} for i in range(12)]
    run, _ = chat_run(tmp_path, rows)
    for fmt in ("jsonl", "parquet"):
        with pytest.raises(ClusterClipError, match="record field 'index' has the name of a column the export writes"):
            export_plan(run, PLAN.name(), tmp_path / fmt, fmt=fmt)
    export_plan(run, PLAN.name(), tmp_path / "text", fmt="jsonl", keep_record=False)
    assert set(_jsonl(tmp_path / "text")[0]) == {"text", "id", "index", "cluster"}


def test_the_bucketed_export_keeps_the_same_records(tmp_path, monkeypatch):
    run, _ = chat_run(tmp_path)
    export_plan(run, PLAN.name(), tmp_path / "windows", fmt="jsonl")
    monkeypatch.setattr(PlanStream, "bucketed", lambda self, memory_mb: True)
    for workers in (1, 2):
        export_plan(run, PLAN.name(), tmp_path / f"buckets{workers}", fmt="jsonl", workers=workers)
        assert _jsonl(tmp_path / f"buckets{workers}") == _jsonl(tmp_path / "windows")


def _templated(folder, records, order):
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    enc = [tok.apply_chat_template(records[d]["messages"], tokenize=True, return_dict=True,
                                   return_assistant_tokens_mask=True) for d in order]
    return [e["input_ids"] for e in enc], [e["assistant_masks"] for e in enc]


def test_tokenized_exports_apply_the_chat_template_and_write_the_loss_mask(tmp_path, monkeypatch):
    folder = minilm_tokenizer(tmp_path / "tok")
    run, records = chat_run(tmp_path)
    order = load_plan(run.root, PLAN.name()).tolist()
    ids, masks = _templated(folder, records, order)
    assert any(0 < sum(m) < len(m) for m in masks)
    export_plan(run, PLAN.name(), tmp_path / "p", fmt="parquet", tokenizer=str(folder), assistant_only_loss=True)
    rows = pq.read_table(sorted((tmp_path / "p").glob("*.parquet"))[0]).to_pylist()
    assert [r["tokens"] for r in rows] == ids and [r["loss_mask"] for r in rows] == masks
    record = json.loads((tmp_path / "p" / "export.json").read_text())
    assert record["columns"] == ["tokens", "loss_mask", "id", "index", "cluster"]
    assert record["identity"]["tokenizer"]["chat_template"] is not None
    export_plan(run, PLAN.name(), tmp_path / "packed", fmt="parquet", tokenizer=str(folder), assistant_only_loss=True,
                seq_len=16)
    packed = pq.read_table(sorted((tmp_path / "packed").glob("*.parquet"))[0])
    flat_ids, flat_masks = _flat(ids), _flat(masks)
    n = len(flat_ids) // 16 * 16
    assert _flat(packed.column("tokens").to_pylist()) == flat_ids[:n]
    assert _flat(packed.column("loss_mask").to_pylist()) == flat_masks[:n]
    monkeypatch.setattr(PlanStream, "bucketed", lambda self, memory_mb: True)
    export_plan(run, PLAN.name(), tmp_path / "b", fmt="parquet", tokenizer=str(folder), assistant_only_loss=True,
                workers=2)
    rows = pq.read_table(sorted((tmp_path / "b").glob("*.parquet"))[0]).to_pylist()
    assert [r["tokens"] for r in rows] == ids and [r["loss_mask"] for r in rows] == masks


def test_megatron_writes_the_loss_mask_as_a_second_indexed_dataset(tmp_path):
    pytest.importorskip("megatron.core")
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    folder = minilm_tokenizer(tmp_path / "tok")
    run, records = chat_run(tmp_path)
    order = load_plan(run.root, PLAN.name()).tolist()
    ids, masks = _templated(folder, records, order)
    export_plan(run, PLAN.name(), tmp_path / "m", fmt="megatron", tokenizer=str(folder), assistant_only_loss=True)
    tokens, loss = IndexedDataset(str(tmp_path / "m" / "data")), IndexedDataset(str(tmp_path / "m" / "data_loss_mask"))
    assert [tokens[i].tolist() for i in range(len(tokens))] == ids
    assert [loss[i].tolist() for i in range(len(loss))] == masks and loss[0].dtype == np.uint8


def test_litdata_yields_the_loss_mask_beside_the_tokens(tmp_path):
    litdata = pytest.importorskip("litdata")
    folder = minilm_tokenizer(tmp_path / "tok")
    run, records = chat_run(tmp_path)
    ids, masks = _templated(folder, records, load_plan(run.root, PLAN.name()).tolist())
    export_plan(run, PLAN.name(), tmp_path / "lit", fmt="litdata", tokenizer=str(folder), assistant_only_loss=True)
    items = list(litdata.StreamingDataset(input_dir=str(tmp_path / "lit"), shuffle=False))
    assert [np.asarray(i["tokens"]).tolist() for i in items] == ids
    assert [np.asarray(i["loss_mask"]).tolist() for i in items] == masks


def test_a_tokenizer_without_a_chat_template_tokenizes_the_text_and_refuses_a_mask(tmp_path):
    folder = minilm_tokenizer(tmp_path / "tok", chat_template=None)
    run, _ = chat_run(tmp_path)
    with pytest.raises(ClusterClipError, match="--assistant-only-loss needs the chat template"):
        export_plan(run, PLAN.name(), tmp_path / "m", fmt="parquet", tokenizer=str(folder), assistant_only_loss=True)
    export_plan(run, PLAN.name(), tmp_path / "t", fmt="parquet", tokenizer=str(folder))
    record = json.loads((tmp_path / "t" / "export.json").read_text())
    assert record["identity"]["tokenizer"]["chat_template"] is None and record["columns"][0] == "tokens"
    no_marks = minilm_tokenizer(tmp_path / "plain", chat_template=CHAT_TEMPLATE.replace("{% generation %}", "")
                                .replace("{% endgeneration %}", ""))
    with pytest.raises(ClusterClipError, match="does not mark the assistant's tokens"):
        export_plan(run, PLAN.name(), tmp_path / "n", fmt="parquet", tokenizer=str(no_marks), assistant_only_loss=True)
