"""Lexical near-copies: MinHash signatures of word shingles (rensa) and LSH banding (NumPy).

Texts are lower-cased by Arrow and split into words (runs of ASCII letters and digits, or any non-ASCII
byte) straight on the Arrow string buffers; word and shingle hashes are polynomial hashes computed with
prefix sums, so no Python code runs per document. ``rensa`` (Rust) turns the flat shingle hashes into
MinHash signatures (``RMinHash.digest_matrix_from_flat_token_hashes``): one call per batch, no Python
object per document, about an order of magnitude faster than ``datasketch``'s per-document ``MinHash``.
Banding is NumPy: per band one sort of 64-bit keys of the band (and the cluster, when labels are given: the
stage bands the whole corpus, since an edited copy can land in another cluster than its source); every member
of a bucket is paired with the bucket's first member. Memory: the signatures, ``N * num_perm * 4`` bytes, plus
one batch of text.

:func:`hash_texts` is the stage's one pass over the texts: besides the shingle signatures it gives, from the
same word hashes, what the derivation of groups checks edges with (:mod:`clusterclip.dedup.checked`): the
MinHash signatures of each document's *set of words* (word 1-shingles), its number of distinct shingles and
a key of its normalised text (lower-cased, ASCII whitespace runs collapsed to one space, trimmed; symbols
kept), so that documents with almost no words can still be told apart. All but the key are made of the text
without its boilerplate lines (:func:`boilerplate_lines`, :mod:`clusterclip.dedup.lines`). Short documents
also get signatures of their byte shingles, on which a pair of them is compared (:class:`Hashing`,
:func:`candidate_pairs`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from clusterclip.dedup.lines import document_lines, frequent_lines, keep_bytes, line_keys, line_spans, mix

_P = np.uint64(0x100000001B3)
_P_INV = np.uint64(pow(0x100000001B3, -1, 1 << 64))
_MULT = np.uint64(0x9E3779B97F4A7C15)
_EMPTY_SALT = np.uint64(0xE3B7)
_WORD = np.zeros(256, bool)
_WORD[[*range(48, 58), *range(97, 123), *range(128, 256)]] = True
_SPACE = np.zeros(256, bool)
_SPACE[[9, 10, 11, 12, 13, 32]] = True


@dataclass(frozen=True)
class _Lowered:
    """One batch of texts, lower-cased: the bytes (``data``), the row offsets into them (int64 [n + 1], from 0)
    and the polynomial prefix sums of the bytes (``prefix[i]``: sum of ``data[j] * P^j`` for ``j < i``)."""

    data: np.ndarray
    offsets: np.ndarray
    prefix: np.ndarray

    @property
    def n(self) -> int:
        return self.offsets.size - 1


def _lowered(texts: pa.Array) -> _Lowered:
    arr = pc.utf8_lower(pa.chunked_array([texts]).combine_chunks().cast(pa.large_string()))
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], np.int64, n + 1, arr.offset * 8)
    data = np.frombuffer(arr.buffers()[2], np.uint8)[offsets[0]:offsets[-1]] if n else np.zeros(0, np.uint8)
    return _Lowered(data, offsets - offsets[0], _prefix(data))


def _prefix(data: np.ndarray) -> np.ndarray:
    """``[0, d0, d0 + d1 P, ...]``: prefix sums of ``data[j] * P^j`` (mod 2^64)."""
    with np.errstate(over="ignore"):
        power = np.full(data.size, _P, np.uint64)
        power[:1] = 1
        power = np.cumprod(power, dtype=np.uint64)
        return np.concatenate((np.zeros(1, np.uint64), np.cumsum(data.astype(np.uint64) * power, dtype=np.uint64)))


def _span_hashes(prefix: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Hashes of the byte spans ``[starts[i], ends[i])`` that depend only on their bytes, not on where they are."""
    with np.errstate(over="ignore"):
        return mix((prefix[ends] - prefix[starts]) * _inverse_powers(starts) + (ends - starts).astype(np.uint64))


def _words(low: _Lowered) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of the words of a batch, in order, and the row of each."""
    starts, hashes = _word_spans(low)
    return hashes, np.searchsorted(low.offsets, starts, side="right") - 1


def _word_spans(low: _Lowered) -> tuple[np.ndarray, np.ndarray]:
    """The first byte of each word of a batch, in order, and its hash."""
    data, offsets = low.data, low.offsets
    word = _WORD[data]
    at_start = np.zeros(data.size, bool)
    at_start[offsets[:-1][offsets[:-1] < data.size]] = True
    starts = np.flatnonzero(word & (at_start | ~np.concatenate(([False], word[:-1]))))
    ends = np.flatnonzero(word & (np.concatenate((at_start[1:], [True])) | ~np.concatenate((word[1:], [False])))) + 1
    return starts, _span_hashes(low.prefix, starts, ends)


def batch_lines(texts: pa.Array) -> np.ndarray:
    """The distinct keys of the lines of each text of a batch, one array (what :func:`boilerplate_lines` counts)."""
    low = _lowered(texts)
    starts, doc = line_spans(low.data, low.offsets)
    return document_lines(line_keys(starts, *_word_spans(low))[0], doc)


def boilerplate_lines(batches: Iterable[pa.Array], share: float, min_documents: int) -> np.ndarray:
    """Sorted uint64 keys of the lines that at least ``share`` of the texts in ``batches`` (and at least
    ``min_documents`` of them) contain: :mod:`clusterclip.dedup.lines`."""
    per, n = [], 0
    for texts in batches:
        per.append(batch_lines(texts))
        n += len(texts)
    return frequent_lines(per, n, share, min_documents)


def _stripped(low: _Lowered, boilerplate: np.ndarray | None) -> tuple[_Lowered, np.ndarray, np.ndarray]:
    """The batch without its ``boilerplate`` lines (itself when there are none), and the hashes of its words left
    and the row of each."""
    starts, hashes = _word_spans(low)
    doc = np.searchsorted(low.offsets, starts, side="right") - 1
    if boilerplate is None or not boilerplate.size or not low.data.size:
        return low, hashes, doc
    mask, offsets, words = keep_bytes(low.data, low.offsets, boilerplate, starts, hashes)
    if mask.all():
        return low, hashes, doc
    data = low.data[mask]
    return _Lowered(data, offsets, _prefix(data)), hashes[words], doc[words]


def shingle_hashes(texts: pa.Array, shingle: int, first: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Flat uint64 shingle hashes of ``texts`` and their row offsets (uint64 [n + 1]).

    A document with fewer than ``shingle`` words has its words as tokens; one with no word a token of
    its own (``first`` + row, so empty documents do not match each other)."""
    low = _lowered(texts)
    return _shingles(*_words(low), low.n, shingle, first)


def _inverse_powers(starts: np.ndarray) -> np.ndarray:
    """``P^-s`` (mod 2^64) for every start ``s``, by binary exponentiation, vectorised."""
    out = np.ones(starts.size, np.uint64)
    base = np.full(starts.size, _P_INV, np.uint64)
    e = starts.astype(np.uint64)
    with np.errstate(over="ignore"):
        while e.size and int(e.max()):
            odd = (e & np.uint64(1)).astype(bool)
            out[odd] *= base[odd]
            base *= base
            e >>= np.uint64(1)
    return out


def _shingles(words: np.ndarray, doc: np.ndarray, n: int, k: int, first: int) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of every ``k`` consecutive words of one document, grouped by document, with row offsets."""
    counts = np.bincount(doc, minlength=n)
    m = words.size - k + 1
    if m > 0:
        ok = doc[k - 1:] == doc[:m]
        h = np.zeros(m, np.uint64)
        with np.errstate(over="ignore"):
            for j in range(k):
                h = h * _MULT + words[j:j + m]
        sh, sh_doc = mix(h[ok]), doc[:m][ok]
    else:
        sh, sh_doc = np.zeros(0, np.uint64), np.zeros(0, np.int64)
    short = counts < k
    few = short[doc] if doc.size else np.zeros(0, bool)
    empty = np.flatnonzero(counts == 0)
    tokens = np.concatenate((sh, words[few], mix(np.arange(first, first + n, dtype=np.uint64)[empty] ^ _EMPTY_SALT)))
    owner = np.concatenate((sh_doc, doc[few], empty))
    order = np.argsort(owner, kind="stable")
    rows = np.concatenate(([0], np.cumsum(np.bincount(owner, minlength=n)))).astype(np.uint64)
    return tokens[order], rows


def _digest(tokens: np.ndarray, rows: np.ndarray, num_perm: int, seed: int) -> np.ndarray:
    """MinHash signatures (uint32 [n, num_perm]) of the flat token hashes of ``n`` documents (rensa)."""
    from rensa import RMinHash

    n = rows.size - 1
    digest = RMinHash.digest_matrix_from_flat_token_hashes(tokens, rows, num_perm, seed)
    return np.asarray(digest.to_rows(), np.uint32).reshape(n, num_perm)


def signatures(batches: Iterable[pa.Array], n: int, num_perm: int, shingle: int, seed: int,
               first: int = 0) -> np.ndarray:
    """MinHash signatures (uint32 [n, num_perm]) of the texts in ``batches`` (rensa's ``RMinHash``), documents
    ``first..first+n-1`` of the corpus (the index only tells empty documents apart)."""
    sig = np.empty((n, num_perm), np.uint32)
    pos = 0
    for texts in batches:
        sig[pos:pos + len(texts)] = _digest(*shingle_hashes(texts, shingle, first + pos), num_perm, seed)
        pos += len(texts)
    return sig


@dataclass(frozen=True)
class Hashing:
    """What the texts are hashed with: shingle signatures of ``num_perm`` permutations of ``shingle``-word
    shingles, word-set signatures of ``word_perm`` permutations, both with MinHash seed ``seed``. A document with
    fewer than ``char_words`` distinct word shingles (a message, a dictionary entry, a line of symbols) has
    ``char_ngram``-byte shingles of its normalised text instead (0: off), so its signature and shingle count say
    something about it. Every document with fewer than ``2 * char_words`` word shingles (*short*) also gets a
    signature of those byte shingles (``byte_signatures``): a pair of short documents is compared on them, so a
    near-copy and its source on the two sides of the switch are compared on one kind of token."""

    num_perm: int
    shingle: int
    seed: int
    word_perm: int
    char_ngram: int = 0
    char_words: int = 0


SHORT_FACTOR = 2
"""Documents with fewer than ``SHORT_FACTOR * char_words`` word shingles carry byte signatures: a document with
fewer than ``char_words`` has Jaccard at most about ``1 / SHORT_FACTOR`` (0.5, below every bar) with a longer one."""


@dataclass(frozen=True)
class TextHashes:
    """Per document: ``signatures`` (uint32 [n, num_perm], of its shingles), ``word_signatures`` (uint32
    [n, word_perm], of its set of words), ``shingle_count`` (int32 [n], its distinct shingles), ``text_key``
    (uint64 [n], of its normalised text) and ``short`` (bool [n]: it has a row in ``byte_signatures``, uint32
    [short.sum(), num_perm], the signatures of its byte shingles, in document order)."""

    signatures: np.ndarray
    word_signatures: np.ndarray
    shingle_count: np.ndarray
    text_key: np.ndarray
    short: np.ndarray
    byte_signatures: np.ndarray

    @staticmethod
    def concat(parts: Iterable[TextHashes], hashing: Hashing) -> TextHashes:
        """The hashes of consecutive documents, in order (no part: zero documents)."""
        parts = list(parts)
        empty = TextHashes(np.zeros((0, hashing.num_perm), np.uint32), np.zeros((0, hashing.word_perm), np.uint32),
                           np.zeros(0, np.int32), np.zeros(0, np.uint64), np.zeros(0, bool),
                           np.zeros((0, hashing.num_perm), np.uint32))
        return TextHashes(*(np.concatenate([getattr(p, f.name) for p in (empty, *parts)]) for f in fields(TextHashes)))

    def byte_rows(self) -> np.ndarray:
        """int64 [n]: each document's row in ``byte_signatures`` (-1: not short)."""
        return np.where(self.short, np.cumsum(self.short) - 1, -1).astype(np.int64)


def hash_texts(batches: Iterable[pa.Array], hashing: Hashing, first: int = 0,
               boilerplate: np.ndarray | None = None) -> TextHashes:
    """:class:`TextHashes` of the texts in ``batches`` (documents ``first``, ``first + 1``, ... of the corpus):
    each batch is lower-cased, its ``boilerplate`` lines (sorted keys, :func:`boilerplate_lines`) left out, and
    its words hashed once, for the shingle signatures, the word-set signatures and the shingle counts; the text
    keys are of the whole texts."""
    parts, pos = [], first
    for texts in batches:
        whole = _lowered(texts)
        low, words, doc = _stripped(whole, boilerplate)
        tokens, rows = _shingles(words, doc, low.n, hashing.shingle, pos)
        word_tokens, word_rows = _shingles(words, doc, low.n, 1, pos)
        norm = _normalised(low)
        count = _distinct(tokens, rows)
        sig = _digest(tokens, rows, hashing.num_perm, hashing.seed)
        short = np.zeros(low.n, bool)
        if hashing.char_ngram > 0:
            short = (count < SHORT_FACTOR * hashing.char_words) & (norm[2] > norm[1])
            docs = np.flatnonzero(short)
            byte_tokens, owner = _char_shingles(*norm, docs, hashing.char_ngram)
            byte_rows = np.concatenate(([0], np.cumsum(np.bincount(owner, minlength=low.n)[docs]))).astype(np.uint64)
            byte_sig = _digest(byte_tokens, byte_rows, hashing.num_perm, hashing.seed)
            few = count[docs] < hashing.char_words
            sig[docs[few]] = byte_sig[few]
            count[docs[few]] = _distinct(byte_tokens, byte_rows)[few]
        else:
            byte_sig = np.zeros((0, hashing.num_perm), np.uint32)
        parts.append(TextHashes(sig, _digest(word_tokens, word_rows, hashing.word_perm, hashing.seed),
                                count, _text_keys(whole), short, byte_sig))
        pos += low.n
    return TextHashes.concat(parts, hashing)


_CHAR_SALT = np.uint64(0xC4A3)


def _char_shingles(norm: np.ndarray, starts: np.ndarray, ends: np.ndarray, docs: np.ndarray,
                   k: int) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of every ``k`` consecutive bytes of the normalised texts of ``docs`` (a text shorter than ``k``:
    itself), salted apart from word shingles, and the document of each."""
    s, e = starts[docs], ends[docs]
    m = np.maximum(e - s - k + 1, 1)
    at = np.repeat(s, m) + np.arange(int(m.sum())) - np.repeat(np.cumsum(m) - m, m)
    return _span_hashes(_prefix(norm), at, np.minimum(at + k, np.repeat(e, m))) ^ _CHAR_SALT, np.repeat(docs, m)


def _distinct(tokens: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """int32 [n]: distinct tokens per document (``tokens`` grouped by document, ``rows`` their offsets). One
    sort of 64-bit keys: the document in the high bits, the token hash's low bits below it (a collision inside
    one document at 50+ bits is negligible)."""
    n = rows.size - 1
    shift = np.uint64(64 - max(1, n.bit_length()))
    owner = np.repeat(np.arange(n, dtype=np.uint64), np.diff(rows).astype(np.int64))
    keys = np.sort((owner << shift) | (tokens & ((np.uint64(1) << shift) - np.uint64(1))))
    new = np.concatenate(([True], keys[1:] != keys[:-1])) if keys.size else np.zeros(0, bool)
    return np.bincount((keys[new] >> shift).astype(np.int64), minlength=n).astype(np.int32)


def _text_keys(low: _Lowered) -> np.ndarray:
    """uint64 [n]: a hash of each lower-cased text with its ASCII whitespace runs made one space and trimmed
    (equal texts after that normalisation get equal keys; symbols count, unlike in the words)."""
    norm, starts, ends = _normalised(low)
    return _span_hashes(_prefix(norm), starts, ends)


def _normalised(low: _Lowered) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The batch's texts lower-cased with their ASCII whitespace runs made one space and trimmed: the bytes and
    each row's span of them. Byte-wide operations only."""
    data, offsets, n = low.data, low.offsets, low.n
    space = _SPACE[data]
    keep = ~space
    keep[1:] |= space[1:] & ~space[:-1]  # the first byte of each whitespace run stands for the run
    keep[:1] |= space[:1]
    norm = data[keep]
    norm[_SPACE[norm]] = 32
    counts = np.zeros(n, np.int64)
    filled = np.flatnonzero(np.diff(offsets) > 0)
    if filled.size:  # a row's segment runs to the next filled row's start (empty rows hold no bytes)
        counts[filled] = np.add.reduceat(keep.view(np.uint8), offsets[filled], dtype=np.int64)
    ends = np.cumsum(counts)
    starts = ends - counts
    last = max(norm.size - 1, 0)
    starts += (counts > 0) & (norm[np.minimum(starts, last)] == 32) if norm.size else 0  # trim one space
    ends -= (ends > starts) & (norm[np.maximum(ends - 1, 0)] == 32) if norm.size else 0
    return norm, starts, ends


def lsh_pairs(sig: np.ndarray, bands: int, labels: np.ndarray | None = None,
              chunk: int = 1 << 20) -> tuple[np.ndarray, np.ndarray]:
    """Candidate pairs (int64 [P, 2], first < second, unique) that share a band (and a cluster, when
    ``labels`` are given), and their Jaccard estimates."""
    n, num_perm = sig.shape
    r = num_perm // bands
    found = []
    start = mix(np.zeros(n, np.uint64) if labels is None else np.asarray(labels).astype(np.uint64) + np.uint64(1))
    for b in range(bands):
        key = start
        with np.errstate(over="ignore"):
            for j in range(b * r, (b + 1) * r):
                key = mix(key * _MULT + sig[:, j].astype(np.uint64))
        order = np.argsort(key, kind="stable")
        ks = key[order]
        head = np.flatnonzero(np.concatenate(([True], ks[1:] != ks[:-1])))
        run = np.repeat(head, np.diff(np.append(head, n)))
        member = np.flatnonzero(run != np.arange(n))
        found.append(np.stack([order[run[member]], order[member]], axis=1))
    pairs = np.concatenate(found) if found else np.zeros((0, 2), np.int64)
    pairs = np.unique(np.sort(pairs, axis=1), axis=0).astype(np.int64)
    return pairs, signature_jaccard(sig, pairs[:, 0], pairs[:, 1], max(1, chunk // num_perm))


def candidate_pairs(hashes: TextHashes, bands: int) -> tuple[np.ndarray, np.ndarray]:
    """The LSH candidate pairs (int64 [P, 2], first < second, unique) of the signatures and, among the short
    documents, of their byte signatures, with each pair's shingle Jaccard estimate (:func:`short_pair_jaccard`)."""
    pairs, jac = lsh_pairs(hashes.signatures, bands)
    docs = np.flatnonzero(hashes.short)
    if docs.size < 2:
        return pairs, jac
    pairs = np.unique(np.concatenate([pairs, docs[lsh_pairs(hashes.byte_signatures, bands)[0]]]), axis=0)
    rows = hashes.byte_rows()
    return pairs, short_pair_jaccard(hashes.signatures, hashes.byte_signatures, rows, pairs[:, 0], pairs[:, 1])


def short_pair_jaccard(sig: np.ndarray, byte_sig: np.ndarray, byte_rows: np.ndarray, a: np.ndarray,
                       b: np.ndarray) -> np.ndarray:
    """float32 Jaccard estimates of the pairs ``(a[i], b[i])``: of their byte signatures (rows ``byte_rows``,
    -1: none) when both documents are short, else of their signatures ``sig`` (shingle or word-set ones)."""
    ra, rb = byte_rows[a], byte_rows[b]
    both = (ra >= 0) & (rb >= 0)
    out = np.empty(a.size, np.float32)
    out[~both] = signature_jaccard(sig, a[~both], b[~both])
    out[both] = signature_jaccard(byte_sig, ra[both], rb[both])
    return out


def signature_jaccard(sig: np.ndarray, a: np.ndarray, b: np.ndarray, chunk: int = 1 << 16) -> np.ndarray:
    """float32 MinHash Jaccard estimates of the document pairs ``(a[i], b[i])``: the share of equal slots."""
    out = np.empty(a.size, np.float32)
    for s in range(0, a.size, chunk):
        out[s:s + chunk] = (sig[a[s:s + chunk]] == sig[b[s:s + chunk]]).mean(axis=1)
    return out
