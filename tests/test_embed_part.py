"""``--embed-part all|prompt|response|last-user``: which part of a conversation is embedded, recorded in the embed
stage's record and part of its identity (only when not the default, so runs embedded before it stay fresh)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from clusterclip.cli.main import main
from clusterclip.contract.corpus import CorpusRecord, corpus_parts, iter_corpus
from clusterclip.contract.corpus_texts import Parts, sample_texts
from clusterclip.contract.embed import EmbedRecord, load_embeddings
from clusterclip.contract.record_kinds import part_of
from clusterclip.contract.record_kinds.chat import Chat
from clusterclip.corpus.config import CorpusConfig
from clusterclip.corpus.stage import corpus_stage
from clusterclip.embed.config import EmbedConfig
from clusterclip.embed.registry import get_embedder
from clusterclip.embed.stage import embed_stage
from clusterclip.errors import ClusterClipError
from clusterclip.store import RunDir
from tests.chat_records import read_records, write_chat


@pytest.fixture
def chat_run(tmp_path):
    source = write_chat(tmp_path / "chat.jsonl", 40)
    run = RunDir(tmp_path / "run")
    with run.lock():
        corpus_stage(run, [source], CorpusConfig(), progress=False)
    return run, read_records(source)


def _parts(records, part):
    return [part_of(Chat.turns(r, None), part) for r in records]


@pytest.mark.parametrize("part", ["prompt", "response", "last-user"])
def test_the_part_embedded_is_that_part_of_each_conversation(chat_run, part):
    run, records = chat_run
    with run.lock():
        rec = embed_stage(run, EmbedConfig(embedder="hashing", embed_part=part), progress=False)
    expected = get_embedder("hashing", progress=False).encode(_parts(records, part))
    assert np.allclose(load_embeddings(run), expected.astype(np.float16), atol=1e-3)
    assert rec.part == part and rec.config.part == part


def test_the_default_part_leaves_the_record_as_it_was_and_another_part_rebuilds(chat_run):
    run, records = chat_run
    with run.lock():
        whole = embed_stage(run, EmbedConfig(embedder="hashing"), progress=False)
        assert set(whole.config.to_json()) == {"embedder", "shard_size"} and whole.part == "all"
        again = embed_stage(run, EmbedConfig(embedder="hashing"), progress=False)
        assert again.finished_at == whole.finished_at  # fresh: not rebuilt
        response = embed_stage(run, EmbedConfig(embedder="hashing", embed_part="response"), progress=False)
    assert response.config_hash != whole.config_hash
    assert not np.allclose(load_embeddings(run), get_embedder("hashing", progress=False).encode(
        _parts(records, "all")).astype(np.float16), atol=1e-3)


def test_plain_text_and_conversations_without_the_part_are_read_whole(tmp_path):
    source = tmp_path / "mixed.jsonl"
    rows = [{"text": "a plain document"}, {"messages": [{"role": "assistant", "content": "only an answer"}]},
            {"messages": [{"role": "user", "content": "ask"}, {"role": "assistant", "content": "tell"}]}]
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = RunDir(tmp_path / "run")
    corpus_stage(run, [source], CorpusConfig(), progress=False)
    parts = Parts("prompt", CorpusConfig().__dict__)
    assert sample_texts(corpus_parts(run), 3, 3, 0, parts) == ["a plain document", "only an answer", "ask"]
    assert sample_texts(corpus_parts(run), 3, 3, 0) == ["a plain document", "only an answer", "ask\n\ntell"]


def test_a_fitted_embedder_fits_on_the_part(chat_run):
    run, records = chat_run
    with run.lock():
        embed_stage(run, EmbedConfig(embedder="lsa", embed_part="response"), progress=False)
    emb = get_embedder("lsa", progress=False)
    emb.fit(sample_texts(corpus_parts(run), len(records), emb.sample_size, emb.seed,
                         Parts("response", CorpusConfig().__dict__)))
    assert np.allclose(load_embeddings(run), emb.encode(_parts(records, "response")).astype(np.float16), atol=2e-3)


def test_the_cli_records_the_part_and_add_embeds_new_documents_with_it(tmp_path):
    source = write_chat(tmp_path / "chat.jsonl", 60)
    out = tmp_path / "run"
    assert main(["run", str(source), "--out", str(out), "--embedder", "hashing", "--embed-part", "response",
                 "--k", "3", "-q"]) == 0
    rec = EmbedRecord.require(RunDir(out))
    assert rec.part == "response" and rec.command[rec.command.index("--embed-part") + 1] == "response"
    new = write_chat(tmp_path / "new.jsonl", 10, seed=5)
    rows = read_records(new)
    new.write_text("".join(json.dumps({**r, "domain": "added"}) + "\n" for r in rows))
    assert main(["add", str(out), str(new), "-q"]) == 0
    added = load_embeddings(RunDir(out))[60:]
    expected = get_embedder("hashing", progress=False).encode(_parts(rows, "response"))
    assert added.shape == (10, expected.shape[1]) and np.allclose(added, expected.astype(np.float16), atol=1e-3)
    kept = [json.loads(r) for rb in iter_corpus(RunDir(out), ("record",)) for r in rb.column(0).to_pylist()][60:]
    assert kept == [{**r, "domain": "added"} for r in rows]  # an add keeps the records too
    assert CorpusRecord.require(RunDir(out)).kinds == {"chat": 70}


def test_the_ray_engine_is_refused_with_the_fix(chat_run):
    run, _ = chat_run
    with pytest.raises(ClusterClipError, match=r"--embed-part response .* --engine local"), run.lock():
        embed_stage(run, EmbedConfig(embedder="hashing", embed_part="response"), progress=False, engine="ray")
