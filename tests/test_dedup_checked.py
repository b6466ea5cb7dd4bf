"""Duplicate groups that do not chain (``clusterclip.dedup.checked``): confirmed semantic edges, the
low-information guard and the star check, on their own and through the stage."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import clusterclip.dedup.stage as dedup_stage_module
from clusterclip.cli.main import main
from clusterclip.contract.corpus import read_column
from clusterclip.contract.dedup import load_groups
from clusterclip.dedup.checked import PairwiseWork, derive_checked_groups, signature_jaccard
from clusterclip.dedup.config import DedupConfig
from clusterclip.dedup.groups import derive_groups
from clusterclip.dedup.lexical import Hashing, hash_texts, shingle_hashes, signatures
from clusterclip.dedup.semantic import NONE_SIMILARITY
from clusterclip.dedup.stage import dedup_stage
from clusterclip.store import RunDir, load_npy

HASHING = Hashing(num_perm=128, shingle=3, seed=0, word_perm=64)
LATIN = "abcdefghijklmnopqrstuvwxyz"
GREEK = "αβγδεζηθικλμνξοπρστυφχψω"


def words(rng: np.random.Generator, letters: str, count: int) -> list[str]:
    return ["".join(rng.choice(list(letters), rng.integers(3, 9))) for _ in range(count)]


def drawing(rng: np.random.Generator) -> str:
    """ASCII art: symbol lines with a few ``o`` and ``x`` (the only words; few distinct shingles)."""
    symbols = [*"*|-_/\\<>()[]{}=+#.~^ ", "o", "x"]
    return "\n".join("".join(rng.choice(symbols, rng.integers(12, 30))) for _ in range(rng.integers(5, 9)))


def edited(text: str, rng: np.random.Generator, swaps: int = 3) -> str:
    """A near-copy: adjacent words swapped, one word dropped, two lines exchanged, whitespace changed."""
    lines = [line.split() for line in text.split("\n")]
    for _ in range(swaps):
        line = lines[int(rng.integers(len(lines)))]
        i = int(rng.integers(len(line) - 1))
        line[i], line[i + 1] = line[i + 1], line[i]
    del lines[0][int(rng.integers(len(lines[0])))]
    lines[1], lines[2] = lines[2], lines[1]
    return "\n".join("  ".join(line) for line in lines)


def mixed_corpus(seed: int = 0) -> tuple[list[str], list[tuple[int, int]]]:
    """Unrelated texts (words of one vocabulary, another script, ASCII art) plus near-copies and one
    re-spaced copy of a drawing; returns the texts and the (source, copy) pairs."""
    rng = np.random.default_rng(seed)
    vocab = words(rng, LATIN, 3000)
    texts = ["\n".join(" ".join(rng.choice(vocab, 20)) for _ in range(6)) for _ in range(40)]
    texts += ["\n".join(" ".join(words(rng, GREEK, 12)) for _ in range(5)) for _ in range(10)]
    texts += [drawing(rng) for _ in range(16)]
    pairs = [(s, len(texts) + i) for i, s in enumerate(range(0, 16, 2))]
    texts += [edited(texts[s], rng) for s, _ in pairs]
    pairs.append((45, len(texts)))
    texts.append(edited(texts[45], rng, swaps=2))
    pairs.append((50, len(texts)))
    texts.append("  " + texts[50].replace("\n", " \n  ").upper())  # same text up to case and whitespace
    return texts, pairs


def build_run(tmp_path, texts: list[str], k: int = 1):
    rows = [{"id": f"d{i}", "text": t} for i, t in enumerate(texts)]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["embed", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "run"), "--embedder", "hashing",
                 "--id-field", "id", "-q"]) == 0
    assert main(["cluster", str(tmp_path / "run"), "--k", str(k), "-q"]) == 0
    return RunDir(tmp_path / "run")


def multi_groups(group: np.ndarray) -> set[frozenset[int]]:
    """The groups of two or more members, as sets."""
    found: dict[int, set[int]] = {}
    for i, g in enumerate(group.tolist()):
        found.setdefault(g, set()).add(i)
    return {frozenset(m) for m in found.values() if len(m) > 1}


# ------------------------------------------------------------------------------------- through the stage


def test_identical_embeddings_of_unrelated_documents_do_not_merge(tmp_path, monkeypatch):
    """Every document gets the same embedding (cosine 1: what documents the embedder barely saw get), so every
    semantic edge is within eps; the groups are still exactly the injected copies: no semantic edge is
    confirmed between unrelated texts, and drawings whose only words are ``o`` and ``x`` (shingle Jaccard 1)
    join only the re-spaced copy of themselves."""
    texts, pairs = mixed_corpus()
    run = build_run(tmp_path, texts)
    monkeypatch.setattr(dedup_stage_module, "fetch_rows", lambda run, rows: np.ones((len(rows), 4), np.float32) / 2)
    rec = dedup_stage(run, DedupConfig())
    group = load_groups(run)[0]
    assert rec.semantic_edges == len(texts) - 1 and rec.unconfirmed_semantic >= len(texts) - 1 - len(pairs)
    found = multi_groups(group)
    assert all(any(g <= set(p) for p in pairs) for g in found)  # nothing but injected copies merges
    assert frozenset(pairs[-1]) in found  # the re-spaced drawing: same normalised text
    plain = derive_groups(*(load_npy(run.path(f"dedup/{n}.npy")) for n in
                            ("neighbour", "similarity", "lexical_pairs", "lexical_jaccard")),
                          load_npy(run.path("tokens.npy")), 0.05, 0.7)
    assert plain.kept.size == 1  # the plain components chain everything into one group
    removed = pq.read_table(run.path("dedup/removed.parquet")).to_pydict()
    assert min(removed["word_jaccard"]) >= np.float32(0.6) and len(removed["removed_id"]) == rec.removed


def test_near_copies_with_swaps_and_reordered_lines_are_still_found(tmp_path):
    """Copies with adjacent words swapped, a word dropped, two lines exchanged and whitespace changed stay in
    their source's group (word sets do not move under swaps), with the real embeddings and several clusters:
    the checks lose none of the pairs the plain components find. (eps 0.1: the hashing embedder's bigrams move
    under swaps, cosines 0.93-0.99 on these short random texts.)"""
    texts, pairs = mixed_corpus(seed=1)
    run = build_run(tmp_path, texts, k=3)
    rec = dedup_stage(run, DedupConfig(eps=0.1))
    group = load_groups(run)[0]
    plain = derive_groups(*(load_npy(run.path(f"dedup/{n}.npy")) for n in
                            ("neighbour", "similarity", "lexical_pairs", "lexical_jaccard")),
                          load_npy(run.path("tokens.npy")), 0.1, 0.7)
    for source, copy in pairs:
        assert group[source] == group[copy] and plain.group[source] == plain.group[copy]
    assert rec.removed == len(pairs)  # and nothing else: the drawings' semantic edges are refused
    assert rec.unconfirmed_semantic > 0 and plain.removed.size > len(pairs)
    assert read_column(run, "id")[:3] == ["d0", "d1", "d2"]  # corpus order is input order
    sigs = signatures([pa.array([texts[s] for s, _ in pairs[:4]] + [texts[c] for _, c in pairs[:4]])], 8, 64, 1, 0)
    copies = signature_jaccard(sigs, np.arange(4), np.arange(4, 8))
    assert copies.min() >= 0.9  # only the dropped word moves the word set


# --------------------------------------------------------------------------------------------- unit level


def work_of(texts: list[str], neighbour: np.ndarray, similarity: np.ndarray, tokens: np.ndarray,
            pairs: np.ndarray | None = None, pair_jaccard: np.ndarray | None = None) -> PairwiseWork:
    h = hash_texts([pa.array(texts)], HASHING)
    pairs = np.zeros((0, 2), np.int64) if pairs is None else pairs
    pair_jaccard = np.zeros(0, np.float32) if pair_jaccard is None else pair_jaccard
    return PairwiseWork(neighbour, similarity, pairs, pair_jaccard, tokens, h.word_signatures, h.shingle_count,
                        h.text_key)


def test_a_chain_whose_ends_differ_is_cut_by_the_star_check():
    """A~B~C~D~E: each text shifts a window of 100 words by 12, so neighbours share most words and the ends
    few. Every semantic edge is confirmed; the plain components hold all five; the star check keeps near A
    only what is near A and regroups the rest around their own kept document."""
    vocab = [f"w{i}" for i in range(200)]
    texts = [" ".join(vocab[12 * i:12 * i + 100]) for i in range(5)]
    tokens = np.array([104, 103, 102, 101, 100])  # A is kept, then B, ...
    neighbour, similarity = np.array([-1, 0, 1, 2, 3]), np.array([NONE_SIMILARITY, 1, 1, 1, 1], np.float32)
    work = work_of(texts, neighbour, similarity, tokens)
    steps = signature_jaccard(work.word_signatures, np.arange(4), np.arange(1, 5))
    assert steps.min() >= 0.6 and signature_jaccard(work.word_signatures, np.array([0]), np.array([4]))[0] < 0.6
    assert derive_groups(neighbour, similarity, work.pairs, work.pair_jaccard, tokens, 0.05, 1.0).kept.size == 1
    found = derive_checked_groups(work, DedupConfig())
    assert found.semantic_accepted == 4 and found.split >= 1 and found.group[0] != found.group[4]
    removed = found.removed
    assert np.all(signature_jaccard(work.word_signatures, removed, found.kept[found.group[removed]]) >= 0.6)
    assert np.all(found.jaccard_to_kept[removed] >= 0.6) and found.min_jaccard.min() >= 0.6
    sample = found.largest(1)[0]
    assert sample.kept == 0 and sample.jaccard == found.min_jaccard[found.group[0]]


def test_low_information_documents_join_only_equal_texts():
    """Two different drawings share their only words (shingle and word-set Jaccard 1): the guard refuses the
    edge; a re-spaced, upper-cased copy has the same normalised text and is accepted."""
    a = " /\\_/\\ o\n( o.o )x\n > ^ < "
    b = " #### o\n|====|x o\n ~~~~ "
    texts = [a, b, "  " + a.upper().replace("\n", "  \n"), "the quick brown fox jumps over the lazy dog " * 3]
    tokens = np.array([10, 9, 8, 30])
    pairs = np.array([[0, 1], [0, 2]])
    work = work_of(texts, np.full(4, -1), np.full(4, NONE_SIMILARITY, np.float32), tokens, pairs,
                   np.ones(2, np.float32))
    assert work.shingle_count[:3].max() < 10 and work.text_key[0] == work.text_key[2] != work.text_key[1]
    found = derive_checked_groups(work, DedupConfig())
    assert found.group[0] == found.group[2] != found.group[1] and found.lexical_accepted == 1
    off = derive_checked_groups(work, DedupConfig(min_shingles=0))
    assert off.group[0] == off.group[1] == off.group[2]


def test_a_semantic_edge_needs_shared_shingles_not_only_shared_words():
    """Two pages of one template hold the same words in another order (word-set Jaccard 1, few shared
    3-word shingles): their cosine-1 edge is refused with ``shingle_confirm``; a copy with one word dropped is
    kept."""
    rng = np.random.default_rng(5)
    page = words(rng, LATIN, 60)
    texts = [" ".join(page), " ".join(rng.permutation(page)), " ".join(page[:30] + page[31:])]
    h = hash_texts([pa.array(texts)], HASHING)
    work = PairwiseWork(np.array([-1, 0, 0]), np.array([NONE_SIMILARITY, 1, 1], np.float32), np.zeros((0, 2),
                        np.int64), np.zeros(0, np.float32), np.array([60, 60, 59]), h.word_signatures,
                        h.shingle_count, h.text_key, h.signatures)
    assert signature_jaccard(h.word_signatures, np.array([0]), np.array([1]))[0] > 0.9
    assert signature_jaccard(h.signatures, np.array([0]), np.array([1]))[0] < 0.2
    found = derive_checked_groups(work, DedupConfig(shingle_confirm=0.5))
    assert found.group[0] == found.group[2] != found.group[1] and found.semantic_accepted == 1
    assert derive_checked_groups(work, DedupConfig(shingle_confirm=0.0)).kept.size == 1


def test_short_messages_are_hashed_by_their_bytes_and_join_their_copies():
    """A message of a few words has too few word shingles to say anything (the guard let it join equal texts
    only); hashed by 5-byte shingles instead, its copy with a changed mark or word joins it, another message
    and a drawing with the same words do not."""
    texts = ["cannot open file %s for writing", "Cannot open file %s for writing!", "cannot open the file %s for "
             "writing", "cannot read directory %s", " /\\_/\\ o\n( o.o )x", " #### o\n|====|x o"]
    hashing = Hashing(num_perm=128, shingle=3, seed=0, word_perm=64, char_ngram=5, char_words=10)
    h = hash_texts([pa.array(texts)], hashing)
    assert h.shingle_count.min() >= 10 and hash_texts([pa.array(texts)], HASHING).shingle_count.max() < 10
    pairs = np.array([(i, j) for i in range(6) for j in range(i + 1, 6)], np.int64)
    work = PairwiseWork(np.full(6, -1), np.full(6, NONE_SIMILARITY, np.float32), pairs,
                        signature_jaccard(h.signatures, pairs[:, 0], pairs[:, 1]), np.array([6, 6, 7, 4, 3, 3]),
                        h.word_signatures, h.shingle_count, h.text_key, h.signatures)
    found = derive_checked_groups(work, DedupConfig(jaccard=0.5))
    assert found.group[0] == found.group[1] == found.group[2]
    assert len({found.group[0], found.group[3], found.group[4], found.group[5]}) == 4


@hs.composite
def random_work(draw):
    """Random stored work: signatures that descend from a few roots by replacing a share of their slots (so
    Jaccard estimates spread over [0, 1]), semantic edges to earlier members of one cluster, lexical pairs
    inside clusters, few-shingle documents with a few shared text keys."""
    n = draw(hs.integers(1, 40))
    rng = np.random.default_rng(draw(hs.integers(0, 2**16)))
    labels = rng.integers(0, draw(hs.integers(1, 4)), n)
    sig = rng.integers(0, 2**32, (n, 64), dtype=np.uint32)
    for i in range(1, n):
        parent = int(rng.integers(i))
        keep = rng.random(64) < rng.uniform(0.2, 1.0)
        sig[i] = np.where(keep, sig[parent], sig[i])
    neighbour = np.full(n, -1, np.int64)
    similarity = np.full(n, NONE_SIMILARITY, np.float32)
    for i in range(n):
        same = np.flatnonzero(labels[:i] == labels[i])
        if same.size:
            neighbour[i], similarity[i] = rng.choice(same), rng.uniform(0.9, 1.0)
    cand = np.array([(i, j) for i in range(n) for j in range(i + 1, n) if labels[i] == labels[j]], np.int64)
    cand = cand[rng.random(len(cand)) < 0.3].reshape(-1, 2)
    work = PairwiseWork(neighbour, similarity, cand, rng.uniform(0.5, 1.0, len(cand)).astype(np.float32),
                        rng.integers(1, 6, n), sig, rng.integers(0, 20, n).astype(np.int32),
                        rng.integers(0, 3, n).astype(np.uint64))
    config = DedupConfig(eps=draw(hs.sampled_from([0.0, 0.05, 0.1])), jaccard=draw(hs.sampled_from([0.6, 0.8, 1.0])),
                         confirm=draw(hs.sampled_from([0.0, 0.3, 0.6])), verify=draw(hs.sampled_from([0.0, 0.5, 0.8])),
                         min_shingles=draw(hs.sampled_from([0, 5, 10])))
    return work, labels, config


@given(random_work(), hs.integers(1, 5))
@settings(max_examples=150, deadline=None)
def test_checked_groups_are_a_confirmed_partition_with_the_kept_rule(case, max_rounds):
    """Groups partition the documents (ids 0..G-1, kept ascending, ``group[kept[g]] == g``), never span a
    cluster, keep the kept rule's choice (most tokens, then lowest index), and every removed document's
    word-set Jaccard estimate to its kept one is ``>= max(confirm, verify)`` and passes the guard. With no
    checks at all the groups are the plain components."""
    work, labels, config = case
    found = derive_checked_groups(work, config, max_rounds=max_rounds)
    n, kept, group = labels.size, found.kept, found.group
    assert group.shape == (n,) and np.array_equal(group[kept], np.arange(kept.size)) and np.all(np.diff(kept) > 0)
    assert np.array_equal(labels[kept[group]], labels)
    for g in range(kept.size):
        members = np.flatnonzero(group == g)
        assert kept[g] == members[np.lexsort((members, -work.tokens[members]))[0]]
    removed = found.removed
    head = kept[group[removed]]
    est = signature_jaccard(work.word_signatures, removed, head)
    assert np.all(est >= np.float32(max(config.confirm, config.verify)))
    assert np.array_equal(est, found.jaccard_to_kept[removed])
    assert np.all(work.informative(removed, head, config.min_shingles))
    if config.confirm == config.verify == config.min_shingles == 0:
        plain = derive_groups(work.neighbour, work.similarity, work.pairs, work.pair_jaccard, work.tokens,
                              config.eps, config.jaccard)
        assert np.array_equal(plain.group, group) and np.array_equal(plain.kept, kept)


def test_text_keys_equal_python_normalisation_and_counts_distinct_shingles():
    texts = ["Hello   World\n foo", "hello world foo", "  hello\tworld foo  ", "", "   ", "héllo wörld", "HÉLLO WÖRLD",
             "hello world foo!", "a b c a b c a b c"]
    h = hash_texts([pa.array(texts[:4]), pa.array(texts[4:])], HASHING, first=7)
    norm = [" ".join(t.lower().split()) for t in texts]
    for i in range(len(texts)):
        for j in range(len(texts)):
            assert (h.text_key[i] == h.text_key[j]) == (norm[i] == norm[j]), (texts[i], texts[j])
    assert h.shingle_count.tolist() == [1, 1, 1, 1, 1, 2, 2, 1, 3]  # two words: the words are the tokens
    whole = signatures([pa.array(texts)], len(texts), 128, 3, 0, first=7)
    assert np.array_equal(h.signatures, whole)
    assert np.array_equal(h.word_signatures, signatures([pa.array(texts)], len(texts), 64, 1, 0, first=7))


@given(hs.lists(hs.text(alphabet=" \t\n\r\x0b\x0cabAB.é*Ö", max_size=12), min_size=1, max_size=30),
       hs.integers(1, 30), hs.integers(0, 100))
@settings(max_examples=100, deadline=None)
def test_text_keys_and_shingle_counts_equal_python(texts, cut, first):
    """Equal keys exactly for equal normalised texts (lower-cased, ASCII whitespace runs one space, trimmed),
    whatever the batches; shingle counts equal the distinct shingle hashes of each document."""
    cut = min(cut, len(texts))
    h = hash_texts([pa.array(texts[:cut]), pa.array(texts[cut:])], HASHING, first=first)
    norm = [" ".join(t.lower().split()) for t in texts]
    same_key = h.text_key[:, None] == h.text_key[None, :]
    assert np.array_equal(same_key, np.array([[a == b for b in norm] for a in norm]))
    for i, t in enumerate(texts):
        tokens = shingle_hashes(pa.array([t]), 3, first + i)[0]
        assert h.shingle_count[i] == np.unique(tokens).size


@pytest.mark.parametrize("verify", [0.0, 0.9])
def test_verify_below_confirm_still_confirms_every_removed_document(verify):
    rng = np.random.default_rng(3)
    vocab = [f"w{i}" for i in range(400)]
    base = list(rng.choice(vocab, 80))
    texts = [" ".join(base)] + [" ".join(base[:80 - 8 * i] + list(rng.choice(vocab, 8 * i))) for i in range(1, 6)]
    n = len(texts)
    work = work_of(texts, np.array([-1, 0, 1, 2, 3, 4]), np.array([NONE_SIMILARITY, 1, 1, 1, 1, 1], np.float32),
                   np.arange(n, 0, -1))
    found = derive_checked_groups(work, DedupConfig(confirm=0.5, verify=verify))
    assert np.all(found.jaccard_to_kept[found.removed] >= np.float32(max(0.5, verify)))
