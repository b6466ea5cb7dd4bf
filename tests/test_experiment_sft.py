"""``clusterclip experiment --objective sft``: conversations laid out with a mask on their response tokens, which
alone are trained on (batches), scored (evaluation windows, the unigram floor) and reported per cluster and domain."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tokenizers")

from clusterclip.errors import ClusterClipError
from clusterclip.experiment.batches import PlanBatches
from clusterclip.experiment.config import ExperimentConfig, quick_config
from clusterclip.experiment.data import EOS, eval_windows, train_tokenizer
from clusterclip.experiment.evaluate import unigram_doc_losses
from clusterclip.experiment.proxy_runs import run_experiment
from clusterclip.experiment.sft import encode_turns, record_turns
from clusterclip.experiment.train import target_mean
from clusterclip.settings import SettingsError

CONVERSATIONS = [[("user", "what is a b"), ("assistant", "c d e")],
                 [("system", "be brief"), ("user", "x"), ("assistant", "y z"), ("user", "w"), ("assistant", "v")]]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    texts = [c for conv in CONVERSATIONS for _, c in conv] * 20
    return train_tokenizer(texts, 300, tmp_path_factory.mktemp("tok") / "tokenizer.json")


def test_conversations_are_laid_out_with_their_responses_masked_in(tokenizer):
    docs = encode_turns(tokenizer, CONVERSATIONS)
    eos = tokenizer.token_to_id(EOS)
    for i, conv in enumerate(CONVERSATIONS):
        tokens, mask = docs.flat[docs.offsets[i]:docs.offsets[i + 1]], docs.mask[docs.offsets[i]:docs.offsets[i + 1]]
        pieces = [tokenizer.encode(c + "\n").ids for _, c in conv]
        assert tokens.tolist() == [t for p in pieces for t in p] + [eos]
        assert mask.tolist() == [r == "assistant" for (r, _), p in zip(conv, pieces, strict=True) for _ in p] + [True]


def test_batches_and_windows_target_the_responses_only(tokenizer):
    docs = encode_turns(tokenizer, CONVERSATIONS)
    order = np.array([0, 1, 0, 1, 1, 0])
    stream = np.concatenate([docs.flat[docs.offsets[i]:docs.offsets[i + 1]] for i in order])
    scored = np.concatenate([docs.mask[docs.offsets[i]:docs.offsets[i + 1]] for i in order])
    x, y = next(iter(PlanBatches(docs, order, batch_size=2, context=8)))
    assert np.array_equal(x.numpy().ravel(), stream[:16])
    assert np.array_equal(y.numpy().ravel(), np.where(scored[1:17], stream[1:17], -1))
    windows = eval_windows(docs, np.arange(2), context=4)
    for i in range(2):
        targets = windows.targets[windows.doc == i]
        kept = targets[targets >= 0]
        lo, hi = docs.offsets[i], docs.offsets[i + 1]
        assert kept.tolist() == docs.flat[lo:hi][docs.mask[lo:hi]].tolist()  # every response token once
    first = windows.inputs[windows.doc == 0][0]  # the prompt is read as context: EOS, then the document's tokens
    assert first.tolist() == [tokenizer.token_to_id(EOS), *docs.flat[:3].tolist()]


def test_the_loss_is_the_mean_over_targets_and_the_floor_counts_responses(tokenizer):
    losses = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0]])
    targets = torch.tensor([[5, 6, -1], [7, -1, -1]])
    assert float(target_mean(losses, targets)) == pytest.approx(2.0)
    assert float(target_mean(losses, torch.ones_like(targets))) == pytest.approx(float(losses.mean()))
    docs = encode_turns(tokenizer, CONVERSATIONS)
    vocab = tokenizer.get_vocab_size()
    sums, counts = unigram_doc_losses(docs, docs, vocab)
    freq = np.bincount(docs.flat[docs.mask], minlength=vocab) + 1.0
    nll = -np.log(freq / freq.sum())
    for i in range(2):
        lo, hi = docs.offsets[i], docs.offsets[i + 1]
        scored = docs.flat[lo:hi][docs.mask[lo:hi]]
        assert counts[i] == scored.size and sums[i] == pytest.approx(nll[scored].sum())


def test_sft_needs_conversations_and_refuses_online_strategies():
    with pytest.raises(ClusterClipError, match="--objective sft needs conversation records"):
        record_turns(["plain"], [None], {})
    with pytest.raises(SettingsError, match="online"):
        ExperimentConfig(objective="sft", strategies=("random", "online"))
    lm = ExperimentConfig()
    assert "objective" not in lm.recorded() and ExperimentConfig(objective="sft").recorded()["objective"] == "sft"


def _chat_corpus(path: Path) -> Path:
    rng = random.Random(0)
    topics = {"cooking": ("flour butter oven bake dough salt simmer garlic onion sauce", 150),
              "space": ("orbit rocket planet star galaxy telescope comet moon gravity probe", 70),
              "law": ("court judge statute appeal contract verdict clause liability tort jury", 40)}
    with open(path, "w", encoding="utf-8") as fh:
        for domain, (words, n) in topics.items():
            vocab = words.split()
            for i in range(n):
                question = "what is " + " ".join(rng.choice(vocab) for _ in range(rng.randint(4, 9))) + "?"
                answer = " ".join(rng.choice(vocab) for _ in range(rng.randint(20, 50))) + "."
                fh.write(json.dumps({"id": f"{domain}-{i}", "domain": domain, "messages": [
                    {"role": "user", "content": question}, {"role": "assistant", "content": answer}]}) + "\n")
    return path


def test_quick_sft_experiment_scores_held_out_responses(tmp_path):
    corpus = _chat_corpus(tmp_path / "chat.jsonl")
    out = tmp_path / "run"
    res = run_experiment([corpus], out, quick_config(objective="sft", strategies=("random", "uniform", "clusterclip"),
                                                     docs=260, k=4))
    assert res["status"] == "complete" and set(res["runs"]) == {"random/0", "uniform/0", "clusterclip-R5/0"}
    for run in res["runs"].values():
        assert set(run["heldout_per_domain"]) == {"cooking", "space", "law"}
        assert run["heldout_macro_cluster"] < res["unigram"]["macro_cluster"]
    train = [json.loads(line) for line in (out / "experiment" / "data" / "train.jsonl").read_text().splitlines()]
    assert all(r["messages"][-1]["role"] == "assistant" and "text" not in r for r in train)
    assert "Held-out response loss" in (out / "experiment" / "results.md").read_text()
    record = json.loads((out / "experiment" / "experiment.json").read_text())
    assert record["config"]["objective"] == "sft" and "--objective" in record["command"]
