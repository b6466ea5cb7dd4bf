"""Fuzzed readers: whatever the bytes, a reader yields documents, or raises a clear ClusterClipError.

No other exception, no hang, and with ``on_bad_record="skip"`` every bad record is counted. The same
mutations at larger counts are run by ``benchmarks/hostile/fuzz_readers.py`` (results in RESULTS.md).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterclip.corpus.config import CorpusConfig
from clusterclip.corpus.inputs import expand_inputs
from clusterclip.corpus.reading import iter_documents
from clusterclip.corpus.records import ReadOptions, ReadStats
from clusterclip.corpus.stage import corpus_stage
from clusterclip.errors import BadRecordError, ClusterClipError
from clusterclip.store import TMP_PREFIX, RunDir

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["text", "id", "domain", "x"]),
                                                                inner, max_size=4),
    max_leaves=8,
)


def read(path: Path, **kw) -> tuple[int, ReadStats]:
    stats = ReadStats()
    n = sum(len(b) for b in iter_documents(expand_inputs([path]), ReadOptions(**kw), stats))
    return n, stats


def outcome(path: Path, **kw) -> str:
    """'ok', or 'error' for a clear ClusterClipError; anything else propagates and fails the test."""
    try:
        read(path, **kw)
    except ClusterClipError as exc:
        assert str(exc).startswith(str(path)), f"error does not name the file: {exc}"
        assert "\n" not in str(exc)
        return "error"
    return "ok"


@FUZZ
@given(lines=st.lists(json_values, min_size=1, max_size=12))
def test_arbitrary_json_lines(tmp_path, lines):
    path = tmp_path / "f.jsonl"
    path.write_text("\n".join(json.dumps(v) for v in lines) + "\n")
    good = sum(isinstance(v, dict) and isinstance(v.get("text"), str) and v["text"].strip() != "" for v in lines)
    n, stats = read(path, on_bad_record="skip")
    assert n == good
    assert stats.skipped == sum(1 for v in lines) - good
    assert outcome(path) == ("ok" if good == len(lines) else "error")


@FUZZ
@given(data=st.binary(max_size=400))
def test_arbitrary_bytes(tmp_path, data):
    path = tmp_path / "f.jsonl"
    path.write_bytes(data)
    outcome(path)
    n, stats = read(path, on_bad_record="skip")
    assert n + stats.skipped == sum(1 for line in data.split(b"\n") if line.strip())


def _payload(n: int = 300) -> bytes:
    return "".join(json.dumps({"text": f"document number {i} " * 5, "id": i}) + "\n" for i in range(n)).encode()


@FUZZ
@given(cut=st.floats(0.0, 0.999), flip=st.none() | st.tuples(st.floats(0, 0.999), st.integers(1, 255)),
       codec=st.sampled_from(["gz", "zst"]))
def test_truncated_or_corrupted_compressed_streams(tmp_path, cut, flip, codec):
    raw = _payload()
    data = gzip.compress(raw) if codec == "gz" else zstandard.ZstdCompressor().compress(raw)
    data = bytearray(data[: max(1, int(len(data) * cut))] if flip is None else data)
    if flip is not None:
        pos = int(len(data) * flip[0])
        data[pos] ^= flip[1]
    path = tmp_path / f"f.jsonl.{codec}"
    path.write_bytes(bytes(data))
    for policy in ("error", "skip"):
        outcome(path, on_bad_record=policy)


@pytest.mark.parametrize("table", [
    pa.table({"body": ["a", "b"]}),
    pa.table({"text": [1, 2]}),
    pa.table({"text": [["a"], ["b"]]}),
    pa.table({"text": ["ok", None, "  "]}),
    pa.table({"text": pa.array([], pa.string())}),
])
def test_parquet_with_wrong_schema_or_values(tmp_path, table):
    path = tmp_path / "f.parquet"
    pq.write_table(table, path)
    outcome(path)
    outcome(path, on_bad_record="skip")


def test_not_parquet_at_all(tmp_path):
    path = tmp_path / "f.parquet"
    path.write_bytes(b"PAR1 but not really")
    with pytest.raises(BadRecordError, match="not a readable Parquet file"):
        read(path)


def test_enormous_line(tmp_path):
    path = tmp_path / "big.jsonl"
    big = "word " * 6_000_000
    path.write_text(json.dumps({"text": big}) + "\n" + json.dumps({"text": "small"}) + "\n")
    n, _ = read(path)
    assert n == 2


def test_whitespace_and_empty_documents_are_counted(tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_text('{"text": ""}\n{"text": "\\n\\t "}\n{"text": "real"}\n\n   \n')
    n, stats = read(path, on_bad_record="skip")
    assert (n, stats.skipped) == (1, 2)


def test_failed_corpus_stage_leaves_no_partial_output(tmp_path):
    path = tmp_path / "f.jsonl.gz"
    data = gzip.compress(_payload(20_000))
    path.write_bytes(data[: len(data) * 3 // 4])
    run = RunDir(tmp_path / "run")
    with pytest.raises(BadRecordError, match="truncated or corrupt gzip"):
        corpus_stage(run, [path], CorpusConfig(), progress=False)
    assert run.record("corpus") is None
    assert not list(run.root.rglob(TMP_PREFIX + "*"))
    assert not (run.root / "tokens.npy").exists()


def test_byte_mutated_parquet(tmp_path):
    """Corrupt Parquet pages (including string data that is no longer UTF-8) give a clear error."""
    rng = np.random.default_rng(0)
    clean = tmp_path / "clean.parquet"
    pq.write_table(pa.Table.from_pylist([{"text": f"ünïcode document {i} " * 4, "id": i} for i in range(150)]),
                   clean)
    data = clean.read_bytes()
    path = tmp_path / "f.parquet"
    outcomes = set()
    for _ in range(400):
        buf = bytearray(data)
        for _ in range(int(rng.integers(1, 4))):
            buf[int(rng.integers(len(buf)))] = int(rng.integers(256))
        path.write_bytes(bytes(buf))
        outcomes.add(outcome(path, on_bad_record="skip"))
    assert outcomes == {"ok", "error"}
