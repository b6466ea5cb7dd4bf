"""Short documents in the dedup stage: a pair of short documents is compared on byte shingles, whatever side of
the word/byte switch each is on, for the shingle check and the word-set bars alike."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from clusterclip.dedup.checked import PairwiseWork, derive_checked_groups
from clusterclip.dedup.config import DedupConfig
from clusterclip.dedup.lexical import Hashing, candidate_pairs, hash_texts, short_pair_jaccard, signature_jaccard
from clusterclip.dedup.semantic import NONE_SIMILARITY

HASHING = Hashing(num_perm=128, shingle=3, seed=0, word_perm=64, char_ngram=5, char_words=10)
SOURCE = "split an sql identifier into a two element tuple of namespace and name"  # 13 words: 11 shingles
OTHERS = ["return the semi major axis for this spatial reference", "cannot open file %s for writing",
          "send one or more email message objects and return the number of messages sent",
          "force a value to be rendered as a non localized value regardless of the settings"]


def lexical_work(texts: list[str]) -> PairwiseWork:
    """The pairwise work of the lexical edges alone (no semantic edge), at the stage's defaults."""
    h = hash_texts([pa.array(texts)], HASHING)
    pairs, jac = candidate_pairs(h, DedupConfig().bands)
    n = len(texts)
    return PairwiseWork(np.full(n, -1), np.full(n, NONE_SIMILARITY, np.float32), pairs, jac,
                        np.array([len(t) for t in texts]), h.word_signatures, h.shingle_count, h.text_key,
                        h.signatures, h.byte_signatures, h.byte_rows())


def lexical_groups(texts: list[str]) -> np.ndarray:
    return derive_checked_groups(lexical_work(texts), DedupConfig()).group


def test_a_short_copy_and_its_source_across_the_word_byte_switch_are_one_group():
    """The source has 11 word shingles (hashed by words), its copy with the last two words cut 9 (hashed by
    bytes): their signatures are of different tokens (Jaccard 0), but both are short, so the pair is compared on
    their byte signatures and grouped; unrelated short documents are not."""
    copy = " ".join(SOURCE.split()[:-2])
    texts = [SOURCE, copy, *OTHERS]
    h = hash_texts([pa.array(texts)], HASHING)
    assert h.shingle_count[0] == 11 and h.shingle_count[1] > 10  # words; bytes (9 word shingles: below the switch)
    a, b = np.array([0]), np.array([1])
    assert signature_jaccard(h.signatures, a, b)[0] == 0.0
    assert short_pair_jaccard(h.signatures, h.byte_signatures, h.byte_rows(), a, b)[0] >= 0.7
    group = lexical_groups(texts)
    assert group[0] == group[1] and np.unique(group).size == len(texts) - 1


def test_only_short_documents_carry_byte_signatures():
    """Documents with fewer than twice ``char_words`` word shingles have a byte signature row, in document order;
    a long one has none, and is compared on its word shingles (the signatures)."""
    long = " ".join(f"word{i}" for i in range(40))
    texts = [SOURCE, long, "x", ""]
    h = hash_texts([pa.array(texts)], HASHING)
    assert h.short.tolist() == [True, False, True, False]
    assert h.byte_rows().tolist() == [0, -1, 1, -1] and h.byte_signatures.shape == (2, HASHING.num_perm)
    assert (h.signatures[2] == h.byte_signatures[1]).all()  # below the switch: the signature is the byte one
    off = hash_texts([pa.array(texts)], Hashing(128, 3, 0, 64))
    assert not off.short.any() and off.byte_signatures.shape == (0, 128)


def test_two_short_documents_meet_the_word_set_bars_on_their_bytes():
    """A message in a script without spaces is one "word": its copy with a word glued to it has word-set Jaccard 0
    to it, so the star check split them; both short, the bar is checked on their byte shingles and they are one
    group (the removed one's ``jaccard_to_kept`` says so), while other messages stay apart."""
    source = "アドレスは正しくありません、パスが必要です"
    texts = [source, source + "will", "间距大小设置不正确，请重新输入", "間隔の大きさが正しくありません"]
    work = lexical_work(texts)
    a, b = np.array([0]), np.array([1])
    assert signature_jaccard(work.word_signatures, a, b)[0] == 0.0 and work.word_jaccard(a, b)[0] >= 0.7
    found = derive_checked_groups(work, DedupConfig())
    assert found.group[0] == found.group[1] and np.unique(found.group).size == 3
    assert found.jaccard_to_kept[0] >= DedupConfig().confirm  # the copy is longer: it is kept, the source removed
