"""The built-in quality scorer (``--quality-scorer heuristic``): degraded text scores below prose, and the score
is a numeric field like any kept one (strata, status, add)."""

from __future__ import annotations

import json
import random
import string

import numpy as np

from clusterclip.cli.main import main
from clusterclip.contract.corpus import load_fields
from clusterclip.corpus.quality import heuristic_score, heuristic_scores
from clusterclip.store import RunDir

PROSE = ("The planner reads the labels of the clusters and the token counts of the documents. It then computes "
         "the quotas of every cluster by water-filling, so that each cluster receives the same share of the draws "
         "until it runs out of documents, and the remaining clusters share what is left. A document is drawn at "
         "most a fixed number of times, which is the cap of the plan, and the order of the draws is spread over "
         "the whole run so that the mixture drifts slowly from balanced to natural.")


def degrade(text: str, how: str, rng: random.Random) -> str:
    words = text.split()
    if how == "shuffled":
        rng.shuffle(words)
        return " ".join(words)
    if how == "boilerplate":
        return "\n".join(["Accept all cookies. Privacy policy. Terms of use.", "Click here to subscribe!"] * 4)
    return "".join(rng.choice(string.ascii_lowercase) if c.isalpha() and rng.random() < 0.5 else c for c in text)


def test_degraded_text_scores_below_prose():
    rng = random.Random(0)
    good = heuristic_score(PROSE)
    assert good > 0.95
    for how in ("shuffled", "boilerplate", "garbled"):
        assert heuristic_score(degrade(PROSE, how, rng)) < good - 0.05, how
    assert heuristic_score("") == 0.0
    assert heuristic_scores([PROSE, ""]).tolist() == [good, 0.0]


def test_the_corpus_stage_writes_the_score_as_a_numeric_field(tmp_path, capsys):
    rng = random.Random(1)
    with open(tmp_path / "c.jsonl", "w") as fh:
        for i in range(120):
            text = PROSE if i % 3 else degrade(PROSE, "shuffled", rng)
            fh.write(json.dumps({"id": f"d{i}", "text": f"{text} Document {i}."}) + "\n")
    out = tmp_path / "run"
    assert main(["embed", str(tmp_path / "c.jsonl"), "--out", str(out), "--embedder", "hashing", "--id-field", "id",
                 "--quality-scorer", "heuristic", "-q"]) == 0
    quality = load_fields(RunDir(out), ["quality"])["quality"]
    assert quality.numeric and quality.values.shape == (120,)
    shuffled = np.arange(120) % 3 == 0
    assert quality.values[shuffled].max() < quality.values[~shuffled].min()
    assert main(["cluster", str(out), "--k", "2", "-q"]) == 0
    assert main(["plan", str(out), "--strata", "cluster,quality:3", "--tier-weights", "0,1,1", "-q"]) == 0
    assert main(["status", str(out)]) == 0
    assert "quality (numeric" in capsys.readouterr().out
    assert main(["embed", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "r2"), "--keep-fields", "quality",
                 "--quality-scorer", "heuristic", "-q"]) == 2
    assert "keep one of them" in capsys.readouterr().err
