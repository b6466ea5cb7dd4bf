"""Boilerplate lines (``clusterclip.dedup.lines``): found by how many documents share them, left out of what
near-copies are measured on; and lexical candidates drawn across clusters."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

import clusterclip.dedup.stage as dedup_stage_module
from clusterclip.contract.cluster import LABELS
from clusterclip.contract.dedup import BOILERPLATE, load_groups
from clusterclip.dedup.checked import signature_jaccard
from clusterclip.dedup.config import DedupConfig
from clusterclip.dedup.lexical import Hashing, boilerplate_lines, hash_texts
from clusterclip.dedup.stage import dedup_stage
from clusterclip.store import load_npy
from tests.test_dedup_checked import build_run

HASHING = Hashing(num_perm=128, shingle=3, seed=0, word_perm=64, char_ngram=5, char_words=10)
FOOTER = "Share this article on Facebook, Twitter and LinkedIn."
HEADER = "\n".join("// " + " ".join(f"h{i}x{j}" for j in range(12)) for i in range(8))


def sentence(rng: np.random.Generator, count: int) -> str:
    return " ".join("".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), rng.integers(3, 9))) for _ in range(count))


def test_boilerplate_lines_are_the_lines_enough_documents_share():
    """A line in 60 of 100 documents (re-spaced and re-punctuated, twice in one document) is boilerplate at a
    share of 0.5 and at least 50 documents; not at a share of 0.7, nor with at least 61 documents."""
    rng = np.random.default_rng(0)
    texts = [sentence(rng, 6) for _ in range(100)]
    variants = (FOOTER, "share  this article on facebook twitter and linkedin!", FOOTER.upper())
    texts[:60] = [f"{t}\n{variants[i % 3]}" for i, t in enumerate(texts[:60])]
    texts[0] += "\n" + FOOTER
    found = boilerplate_lines([pa.array(texts[:50]), pa.array(texts[50:])], 0.5, 50)
    assert found.size == 1 and found.dtype == np.uint64
    assert boilerplate_lines([pa.array(texts)], 0.7, 50).size == 0
    assert boilerplate_lines([pa.array(texts)], 0.5, 61).size == 0
    assert boilerplate_lines([pa.array(texts)], 0.0, 1).size == 0


def test_a_message_with_a_footer_is_hashed_like_the_message():
    """A one-line message and its copy with the footer line: without the boilerplate their shingles barely
    overlap; with it left out they hash alike. A document that is only the footer is hashed whole, and the
    text keys are always of the whole texts."""
    rng = np.random.default_rng(1)
    texts = [sentence(rng, 6) for _ in range(60)]
    texts += [f"{t}\n{FOOTER}" for t in texts[:55]] + [FOOTER]
    bp = boilerplate_lines([pa.array(texts)], 0.3, 50)
    plain, stripped = hash_texts([pa.array(texts)], HASHING), hash_texts([pa.array(texts)], HASHING, boilerplate=bp)
    src, copy = np.arange(55), np.arange(60, 115)
    assert signature_jaccard(plain.signatures, src, copy).max() < 0.5
    assert (signature_jaccard(stripped.signatures, src, copy) == 1).all()
    assert (stripped.word_signatures[src] == stripped.word_signatures[copy]).all()
    assert (stripped.shingle_count[src] == stripped.shingle_count[copy]).all()
    assert (stripped.text_key == plain.text_key).all() and len(set(stripped.text_key[:115].tolist())) == 115
    assert (stripped.signatures[-1] == plain.signatures[-1]).all() and stripped.shingle_count[-1] > 10


def test_files_sharing_only_a_licence_header_stay_apart_and_their_copies_join(tmp_path):
    """80 short files with the same 8-line header (96 words) and 2 lines of their own, and copies of 10 of them
    with their last word changed: with the header as boilerplate only the copies join their files (the header
    was what made unrelated files alike: with ``boilerplate`` 0 they merge); the boilerplate is saved in the run."""
    rng = np.random.default_rng(2)
    files = [f"{HEADER}\n" + "\n".join(sentence(rng, 10) for _ in range(2)) for _ in range(80)]
    copies = [f.rsplit(" ", 1)[0] + " changed" for f in files[:10]]
    run = build_run(tmp_path, files + copies, k=1)
    dedup_stage(run, DedupConfig())
    group = load_groups(run)[0]
    assert load_npy(run.path(BOILERPLATE)).size == 8
    assert all(group[i] == group[80 + i] for i in range(10))
    assert np.unique(group).size == 80
    dedup_stage(run, DedupConfig(boilerplate=0.0))
    assert load_npy(run.path(BOILERPLATE)).size == 0 and np.unique(load_groups(run)[0]).size < 70


def test_lexical_near_copies_are_found_across_clusters(tmp_path, monkeypatch):
    """Each copy is put in another cluster than its source (labels rewritten as the stage reads them): no
    semantic edge joins them, the LSH bands over the whole corpus still do."""
    rng = np.random.default_rng(3)
    texts = ["\n".join(sentence(rng, 12) for _ in range(4)) for _ in range(30)]
    texts += [t.replace("\n", "\n ") + " tail" for t in texts[:10]]
    run = build_run(tmp_path, texts, k=1)
    labels = np.zeros(len(texts), np.int32)
    labels[30:] = 1
    real = dedup_stage_module.load_npy
    monkeypatch.setattr(dedup_stage_module, "load_npy",
                        lambda path, **kw: labels if str(path) == str(run.path(LABELS)) else real(path, **kw))
    dedup_stage(run, DedupConfig())
    group = load_groups(run)[0]
    assert all(group[i] == group[30 + i] for i in range(10)) and np.unique(group).size == 30
