"""Token counts of conversations: ``--tokenizer``'s chat template when it has one (role markers and special tokens
counted, as a fine-tuning run sees them), the text otherwise (said once), plain text as before."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from clusterclip.contract.corpus import load_tokens
from clusterclip.corpus.config import CorpusConfig
from clusterclip.corpus.stage import corpus_stage
from clusterclip.plan import PlanConfig
from clusterclip.store import RunDir
from tests.chat_records import minilm_tokenizer
from tests.test_record_kinds import ALPACA, CHAT, ORCA, SHAREGPT

transformers = pytest.importorskip("transformers")

PLAIN = {"text": "A plain document of a few words."}
MESSAGES = {
    "chat": CHAT["messages"],
    "sharegpt": [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue."}],
    "alpaca": [{"role": "user", "content": "Add the numbers.\n\n1 and 2"}, {"role": "assistant", "content": "3"}],
    "openorca": [{"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "Paris."}],
}


def _tokens(tmp_path, tokenizer, records=(CHAT, SHAREGPT, ALPACA, ORCA, PLAIN)):
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records))
    run = RunDir(tmp_path / "run")
    corpus_stage(run, [source], CorpusConfig(tokenizer=str(tokenizer)), progress=False)
    return run, load_tokens(run).tolist()


def test_conversations_are_counted_through_the_chat_template(tmp_path):
    folder = minilm_tokenizer(tmp_path / "tok")
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    _, counts = _tokens(tmp_path, folder)
    templated = [len(tok.apply_chat_template(m, tokenize=True, return_dict=True)["input_ids"])
                 for m in MESSAGES.values()]
    plain = len(tok(PLAIN["text"], add_special_tokens=False)["input_ids"])
    assert counts == [*templated, plain]
    as_text = len(tok("Be brief.\n\nWhat is 2+2?\n\nFour.", add_special_tokens=False)["input_ids"])
    assert counts[0] > as_text  # the role markers and the [SEP] after the answer count


def test_a_tokenizer_without_a_chat_template_counts_the_text_and_says_so_once(tmp_path, caplog):
    folder = minilm_tokenizer(tmp_path / "tok", chat_template=None)
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    with caplog.at_level(logging.WARNING, logger="clusterclip.corpus.tokens"):
        _, counts = _tokens(tmp_path, folder, [CHAT] * 3)
    assert counts == [len(tok("Be brief.\n\nWhat is 2+2?\n\nFour.", add_special_tokens=False)["input_ids"])] * 3
    assert sum("no chat template" in r.getMessage() for r in caplog.records) == 1


def test_a_token_budget_of_chat_data_is_a_budget_of_templated_tokens(tmp_path):
    from clusterclip.cluster.config import ClusterConfig
    from clusterclip.cluster.stage import cluster_stage
    from clusterclip.embed.config import EmbedConfig
    from clusterclip.embed.stage import embed_stage
    from clusterclip.plan.stage import plan_stage
    from tests.chat_records import read_records, write_chat

    folder = minilm_tokenizer(tmp_path / "tok")
    run = RunDir(tmp_path / "run")
    with run.lock():
        corpus_stage(run, [write_chat(tmp_path / "chat.jsonl", 30)], CorpusConfig(tokenizer=str(folder)),
                     progress=False)
        embed_stage(run, EmbedConfig(embedder="hashing"), progress=False)
        cluster_stage(run, ClusterConfig(k=3), progress=False)
        rec = plan_stage(run, PlanConfig(strategy="random", budget_unit="tokens", budget=2000))
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    templated = np.array([len(tok.apply_chat_template(r["messages"], tokenize=True, return_dict=True)["input_ids"])
                          for r in read_records(tmp_path / "chat.jsonl")])
    order = np.load(run.path(rec.order_file()))
    assert rec.stats["tokens"] == int(templated[order].sum()) and abs(rec.stats["tokens"] - 2000) <= templated.max()
