"""Corpus readers (every format, bad records) and the corpus stage."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from clusterclip.contract.corpus import read_column
from clusterclip.corpus.config import CorpusConfig
from clusterclip.corpus.default_corpus import stdlib_documents
from clusterclip.corpus.inputs import expand_inputs
from clusterclip.corpus.reading import iter_documents
from clusterclip.corpus.records import ReadOptions, ReadStats
from clusterclip.corpus.stage import corpus_stage
from clusterclip.errors import BadRecordError, ClusterClipError
from clusterclip.store import RunDir, load_npy

RECORDS = [
    {"id": "a", "text": "The cat sat on the mat.", "domain": "pets"},
    {"id": "b", "text": "Stocks fell sharply on Monday, analysts said.", "domain": "news"},
    {"id": "c", "text": "def f(x): return x + 1", "domain": "code"},
]


def write_jsonl(path: Path, records: list, opener=open) -> Path:
    with opener(path, "wt", encoding="utf-8") as fh:
        for r in records:
            fh.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return path


def read_all(paths, **kw) -> tuple[list, list, list, ReadStats]:
    stats = ReadStats()
    ids, texts, groups = [], [], []
    for b in iter_documents(expand_inputs(paths), ReadOptions(**kw), stats):
        ids += b.ids
        texts += b.texts
        groups += b.groups
    return ids, texts, groups, stats


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".jsonl.zst"])
def test_jsonl_formats(tmp_path, suffix):
    path = tmp_path / f"docs{suffix}"
    if suffix.endswith(".gz"):
        write_jsonl(path, RECORDS, gzip.open)
    elif suffix.endswith(".zst"):
        data = "".join(json.dumps(r) + "\n" for r in RECORDS).encode()
        path.write_bytes(zstandard.ZstdCompressor().compress(data))
    else:
        write_jsonl(path, RECORDS)
    ids, texts, groups, stats = read_all([path], id_field="id")
    assert ids == ["a", "b", "c"]
    assert texts == [r["text"] for r in RECORDS]
    assert groups == ["pets", "news", "code"]
    assert stats.read == 3 and stats.skipped == 0


def test_default_ids_are_file_and_line(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", RECORDS)
    ids, *_ = read_all([path])
    assert ids == ["d.jsonl:1", "d.jsonl:2", "d.jsonl:3"]


def test_parquet(tmp_path):
    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(RECORDS), path)
    ids, _, groups, _ = read_all([path], id_field="id")
    assert ids == ["a", "b", "c"] and groups == ["pets", "news", "code"]


def test_parquet_reads_like_jsonl_in_clean_and_bad_batches(tmp_path, monkeypatch):
    """Clean Parquet batches are converted a column at a time, others row by row: the same documents,
    stats and messages as the JSON lines of the same records."""
    import clusterclip.corpus as corpus

    monkeypatch.setattr(corpus.limits, "BATCH_ROWS", 4)
    records = [{"id": i, "text": f"document {i}", "domain": ["a", None, "b"][i % 3]} for i in range(20)]
    records[6]["text"] = " "
    records[13]["id"] = None
    write_jsonl(tmp_path / "d.jsonl", records)
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "d.parquet")
    for kw, bad in (({"id_field": "id"}, 2), ({"group_field": None}, 1)):
        jsonl = read_all([tmp_path / "d.jsonl"], on_bad_record="skip", **kw)
        parquet = read_all([tmp_path / "d.parquet"], on_bad_record="skip", **kw)
        assert [i.replace(".parquet", ".jsonl") for i in parquet[0]] == jsonl[0]
        assert parquet[1:3] == jsonl[1:3]
        assert (parquet[3].read, parquet[3].skipped) == (jsonl[3].read, jsonl[3].skipped) == (20 - bad, bad)
        assert [e.replace(".parquet", ".jsonl") for e in parquet[3].examples] == jsonl[3].examples


def test_parquet_wrong_schema(tmp_path):
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"body": ["x"]}), path)
    with pytest.raises(BadRecordError, match=r"no column 'text' \(columns: body\)"):
        read_all([path])
    pq.write_table(pa.table({"text": [1, 2]}), path)
    with pytest.raises(BadRecordError, match="expected string"):
        read_all([path])


def test_txt_folder(tmp_path):
    folder = tmp_path / "txt"
    (folder / "sub").mkdir(parents=True)
    (folder / "b.txt").write_text("second document")
    (folder / "a.txt").write_text("first document")
    (folder / "sub" / "c.txt").write_text("third document")
    ids, texts, _, _ = read_all([folder])
    assert ids == ["a.txt", "b.txt", "sub/c.txt"]
    assert texts[0] == "first document"


def test_hf_dataset(tmp_path):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list(RECORDS)
    ds.save_to_disk(str(tmp_path / "ds"))
    ids, _, groups, _ = read_all([tmp_path / "ds"], id_field="id")
    assert ids == ["a", "b", "c"] and groups[0] == "pets"
    datasets.DatasetDict({"train": ds, "test": ds.select([0])}).save_to_disk(str(tmp_path / "dd"))
    ids, *_ = read_all([tmp_path / "dd"], id_field="id", split="test")
    assert ids == ["a"]
    with pytest.raises(ClusterClipError, match="split 'nope' not found"):
        read_all([tmp_path / "dd"], split="nope")


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"text": "ok"', "invalid JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
        ('{"body": "x"}', "missing text field 'text'"),
        ('{"text": 3}', "is int, expected a string"),
        ('{"text": "   "}', "is empty"),
    ],
)
def test_bad_records_name_file_line_and_problem(tmp_path, line, problem):
    path = write_jsonl(tmp_path / "d.jsonl", [RECORDS[0], line, RECORDS[1]])
    with pytest.raises(BadRecordError) as info:
        read_all([path])
    assert str(info.value).startswith(f"{path}:2: ")
    assert problem in str(info.value)
    ids, _, _, stats = read_all([path], id_field="id", on_bad_record="skip")
    assert ids == ["a", "b"]
    assert stats.skipped == 1 and problem in stats.examples[0]


def test_invalid_utf8(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"text": "fine"}\n{"text": "caf\xe9"}\n')
    with pytest.raises(BadRecordError, match=r":2: not valid UTF-8"):
        read_all([path])


def test_truncated_gzip(tmp_path):
    path = tmp_path / "d.jsonl.gz"
    write_jsonl(path, RECORDS * 200, gzip.open)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(BadRecordError, match="truncated or corrupt gzip"):
        read_all([path])


def test_unknown_format_and_missing_path(tmp_path):
    (tmp_path / "x.csv").write_text("a,b")
    with pytest.raises(ClusterClipError, match="unknown input format"):
        expand_inputs([tmp_path / "x.csv"])
    with pytest.raises(ClusterClipError, match="no such file"):
        expand_inputs([tmp_path / "nope.jsonl"])


def test_stdlib_default_corpus_is_real_and_deterministic():
    first = [b.ids for b in stdlib_documents()]
    ids = [i for b in first for i in b]
    assert len(ids) > 1000
    assert len(set(ids)) == len(ids)
    assert any(i.startswith("json.") for i in ids)
    assert [i for b in stdlib_documents() for i in b.ids] == ids


def test_corpus_stage_writes_artifacts_and_skips(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", RECORDS * 3)
    run = RunDir(tmp_path / "run")
    rec = corpus_stage(run, [path], CorpusConfig(), progress=False).to_json()
    assert rec["count"] == 9 and rec["skipped"] == 0
    tokens = load_npy(run.root / "tokens.npy")
    assert tokens.dtype == np.int64 and tokens.shape == (9,)
    assert tokens[0] == 7  # The cat sat on the mat .
    assert rec["tokens"] == int(tokens.sum())
    assert read_column(run, "group")[:3] == ["pets", "news", "code"]
    assert read_column(run, "index") == list(range(9))
    mtime = run.record_path("corpus").stat().st_mtime_ns
    corpus_stage(run, [path], CorpusConfig(), progress=False)
    assert run.record_path("corpus").stat().st_mtime_ns == mtime, "fresh stage must be skipped"
    corpus_stage(run, [path], CorpusConfig(text_field="text", group_field=None), progress=False)
    assert run.record_path("corpus").stat().st_mtime_ns != mtime, "changed option must re-run"
    assert read_column(run, "group")[0] is None


def test_corpus_stage_reruns_when_input_changes(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", RECORDS)
    run = RunDir(tmp_path / "run")
    corpus_stage(run, [path], progress=False)
    write_jsonl(path, RECORDS * 2)
    assert corpus_stage(run, [path], progress=False).to_json()["count"] == 6


def test_empty_corpus_and_duplicates(tmp_path):
    run = RunDir(tmp_path / "run")
    empty = write_jsonl(tmp_path / "e.jsonl", [{"text": ""}])
    with pytest.raises(ClusterClipError, match="empty corpus"):
        corpus_stage(run, [empty], CorpusConfig(on_bad_record="skip"), progress=False)
    dup = write_jsonl(tmp_path / "dup.jsonl", [RECORDS[0], RECORDS[0]])
    with pytest.raises(ClusterClipError, match="1 duplicate ids"):
        corpus_stage(run, [dup], CorpusConfig(id_field="id"), progress=False)
    rec = corpus_stage(run, [dup], CorpusConfig(id_field="id", on_bad_record="skip"), progress=False).to_json()
    assert rec["duplicate_ids"] == 1 and rec["count"] == 2


def test_large_parquet_splits_into_row_group_runs_that_read_the_same(tmp_path, monkeypatch):
    import clusterclip.corpus as corpus
    from clusterclip.corpus.inputs import WorkUnit, work_units
    from clusterclip.corpus.reading import read_unit

    texts = [f"row {i} of a large file" for i in range(47)]
    texts[25] = None
    path = tmp_path / "big.parquet"
    pq.write_table(pa.table({"text": texts}), path, row_group_size=6)
    monkeypatch.setattr(corpus.limits, "PARQUET_ROWS_PER_UNIT", 20)
    resolved = expand_inputs([path])
    units = work_units(resolved, split=True)
    assert [u.row_groups for u in units] == [(0, 4), (4, 8)], "runs of >= 20 rows, the rest in the last"
    assert work_units(resolved) == [WorkUnit(path, "parquet")], "no split unless asked"

    whole, split = ReadStats(), ReadStats()
    expected = [(i, t) for b in iter_documents(resolved, ReadOptions(on_bad_record="skip"), whole)
                for i, t in zip(b.ids, b.texts, strict=True)]
    got = [(i, t) for u in units for b in read_unit(u, ReadOptions(on_bad_record="skip"), split)
           for i, t in zip(b.ids, b.texts, strict=True)]
    assert got == expected and len(got) == 46 and got[-1][0] == "big.parquet:47"
    assert split.examples == whole.examples and "big.parquet:26" in split.examples[0]
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    assert [u.row_groups for u in work_units(expand_inputs([tmp_path / "bad.parquet"]), split=True)] == [None]


def test_large_jsonl_splits_into_byte_ranges_that_read_the_same(tmp_path, monkeypatch):
    """Every range size from 1 byte up: boundaries inside lines, at line starts, on blank lines."""
    import clusterclip.corpus as corpus
    from clusterclip.corpus.inputs import WorkUnit, number_lines, work_units
    from clusterclip.corpus.jsonl import count_newlines
    from clusterclip.corpus.reading import read_unit

    lines = [json.dumps({"text": f"document number {i} " + "word " * (i % 7)}) for i in range(12)]
    lines[4] = ""
    lines[7] = "{broken"
    path = tmp_path / "big.jsonl"
    path.write_text("\n".join(lines))  # no newline after the last line
    resolved = expand_inputs([path])
    opts = ReadOptions(on_bad_record="skip")
    whole = ReadStats()
    expected = [(i, t) for b in iter_documents(resolved, opts, whole) for i, t in zip(b.ids, b.texts, strict=True)]
    assert len(expected) == 10 and expected[-1][0] == "big.jsonl:12"
    for size in range(1, path.stat().st_size + 2):
        monkeypatch.setattr(corpus.limits, "JSONL_BYTES_PER_UNIT", size)
        units = work_units(resolved, split=True)
        counts = [count_newlines(u.path, *u.byte_range) for u in units if u.byte_range is not None]
        assert sum(counts) == (11 if path.stat().st_size > size else 0), "files up to the size stay whole"
        stats = ReadStats()
        got = [(i, t) for u in number_lines(units, counts)
               for b in read_unit(u, opts, stats) for i, t in zip(b.ids, b.texts, strict=True)]
        assert got == expected, size
        assert stats.examples == whole.examples and "big.jsonl:8" in stats.examples[0]
    gz = write_jsonl(tmp_path / "big.jsonl.gz", RECORDS * 50, gzip.open)
    monkeypatch.setattr(corpus.limits, "JSONL_BYTES_PER_UNIT", 10)
    assert work_units(expand_inputs([gz]), split=True) == [WorkUnit(gz, "jsonl+gzip")], "not seekable"


def test_an_input_reached_twice_is_refused(tmp_path):
    """The same file twice, under another name, or inside a folder also given: its documents would be read twice."""
    from clusterclip.corpus.inputs import expand_inputs

    data = tmp_path / "data"
    data.mkdir()
    a = data / "a.jsonl"
    a.write_text('{"text": "one"}\n')
    (data / "b.jsonl").write_text('{"text": "two"}\n')
    (tmp_path / "link.jsonl").symlink_to(a)
    with pytest.raises(ClusterClipError, match=r"a\.jsonl: given twice: its documents would be read twice"):
        expand_inputs([a, a])
    with pytest.raises(ClusterClipError, match=r"link\.jsonl: given twice \(also as .*data/a\.jsonl\)"):
        expand_inputs([a, tmp_path / "link.jsonl"])
    with pytest.raises(ClusterClipError, match=r"a\.jsonl: given twice \(also as .*data/a\.jsonl\)"):
        expand_inputs([data, tmp_path / "data" / ".." / "data" / "a.jsonl"])
    assert [p.name for p, _ in expand_inputs([data])] == ["a.jsonl", "b.jsonl"]


def test_a_pipe_as_input_is_refused_not_waited_on(tmp_path):
    """A FIFO would be opened more than once (checksums, then documents) and hang: refused in one line."""
    from clusterclip.corpus.inputs import expand_inputs

    fifo = tmp_path / "docs.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(ClusterClipError, match=r"docs\.jsonl: not a regular file \(a pipe, socket or device\)"):
        expand_inputs([fifo])
