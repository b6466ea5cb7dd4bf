"""Record kinds (``--record-kind``): chat, ShareGPT, Alpaca, OpenOrca and a template become documents, keep their
record for the exports, and their bad records get the one-line error naming file and line (or are counted)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from clusterclip.cli.main import main
from clusterclip.contract.corpus import CorpusRecord, iter_corpus
from clusterclip.contract.record_kinds import part_of
from clusterclip.contract.record_kinds.chat import Chat
from clusterclip.corpus.config import CorpusConfig
from clusterclip.corpus.stage import corpus_stage
from clusterclip.settings import SettingsError
from clusterclip.store import RunDir

CHAT = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"},
                     {"role": "assistant", "content": "Four."}]}
SHAREGPT = {"conversations": [{"from": "human", "value": "Name a colour."}, {"from": "gpt", "value": "Blue."}]}
ALPACA = {"instruction": "Add the numbers.", "input": "1 and 2", "output": "3"}
ORCA = {"system_prompt": "", "question": "Capital of France?", "response": "Paris."}


def write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def read(tmp_path, records, **options):
    run = RunDir(tmp_path / "run")
    corpus_stage(run, [write(tmp_path / "in.jsonl", records)], CorpusConfig(**options), progress=False)
    rows = [rb.to_pylist() for rb in iter_corpus(run, ("text", "record"))]
    return CorpusRecord.require(run), [r for batch in rows for r in batch]


@pytest.mark.parametrize(("record", "kind", "text"), [
    (CHAT, "chat", "Be brief.\n\nWhat is 2+2?\n\nFour."),
    (SHAREGPT, "sharegpt", "Name a colour.\n\nBlue."),
    (ALPACA, "alpaca", "Add the numbers.\n\n1 and 2\n\n3"),
    (ORCA, "openorca", "Capital of France?\n\nParis."),
])
def test_each_kind_is_detected_read_and_kept_whole(tmp_path, record, kind, text):
    rec, rows = read(tmp_path, [record])
    assert rec.kinds == {kind: 1}
    assert rows[0]["text"] == text and json.loads(rows[0]["record"]) == record


def test_a_template_fills_the_records_fields(tmp_path):
    rec, rows = read(tmp_path, [ORCA], text_template="Q: {question}\nA: {response}")
    assert rec.kinds == {"template": 1} and rows[0]["text"] == "Q: Capital of France?\nA: Paris."
    with pytest.raises(SettingsError, match="text_template must name at least one record field"):
        CorpusConfig(text_template="no fields")


def test_plain_text_keeps_its_parts_as_before(tmp_path):
    rec, rows = read(tmp_path, [{"text": "a plain document"}])
    assert rec.kinds is None and rows == [{"text": "a plain document", "record": None}]
    part = sorted((tmp_path / "run" / "corpus").glob("part-*.parquet"))[0]
    assert "record" not in pq.read_schema(part).names  # a plain corpus is written as it always was


@pytest.mark.parametrize(("record", "message"), [
    ({"messages": [{"role": "user", "content": "hi"}]}, "chat record: messages has no assistant turn"),
    ({"messages": [{"role": "robot", "content": "x"}, {"role": "assistant", "content": "y"}]}, "has role 'robot'"),
    ({"messages": [{"role": "user", "content": " "}, {"role": "assistant", "content": "y"}]}, "turn 0 (user) is empty"),
    ({"messages": "hello"}, "field 'messages' is str, expected a list"),
    ({"conversations": [{"from": "alien", "value": "x"}]}, "is from 'alien'"),
    ({"instruction": "x", "output": 3}, "alpaca record: field 'output' is int, expected a string"),
    ({"question": "q", "response": ""}, "openorca record: the record turn 1 (assistant) is empty"),
    ({"body": "x"}, "missing text field 'text' (fields: body); choose another with --text-field, or a --record-kind"),
])
def test_bad_records_name_file_line_and_problem_or_are_counted(tmp_path, capsys, record, message):
    path = write(tmp_path / "bad.jsonl", [CHAT, record])
    assert main(["embed", str(path), "--out", str(tmp_path / "r"), "--embedder", "hashing", "-q"]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:2: " in err and message in err, err
    assert main(["embed", str(path), "--out", str(tmp_path / "s"), "--embedder", "hashing", "--on-bad-record", "skip",
                 "-q"]) == 0
    rec = CorpusRecord.require(RunDir(tmp_path / "s"))
    assert rec.skipped == 1 and rec.count == 1


def test_an_explicit_kind_and_parquet_chat_records(tmp_path):
    table = pa.Table.from_pylist([CHAT, CHAT])
    pq.write_table(table, tmp_path / "chat.parquet")
    run = RunDir(tmp_path / "run")
    rec = corpus_stage(run, [tmp_path / "chat.parquet"], CorpusConfig(record_kind="chat"), progress=False)
    rows = [r for rb in iter_corpus(run, ("record",)) for r in rb.to_pylist()]
    assert rec.kinds == {"chat": 2} and json.loads(rows[0]["record"]) == CHAT


def test_the_parts_of_a_conversation():
    turns = Chat.turns(CHAT, None)
    assert part_of(turns, "prompt") == "Be brief.\n\nWhat is 2+2?"
    assert part_of(turns, "response") == "Four." and part_of(turns, "last-user") == "What is 2+2?"


def test_status_names_the_record_kinds(tmp_path, capsys):
    path = write(tmp_path / "c.jsonl", [CHAT, SHAREGPT])
    assert main(["embed", str(path), "--out", str(tmp_path / "r"), "--embedder", "hashing", "-q"]) == 0
    capsys.readouterr()
    assert main(["status", str(tmp_path / "r")]) == 0
    assert "(records: chat 1, sharegpt 1)" in capsys.readouterr().out
