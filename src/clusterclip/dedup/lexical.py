"""Lexical near-copies: MinHash signatures of word shingles (rensa) and LSH banding (NumPy).

Texts are lower-cased by Arrow and split into words (runs of ASCII letters and digits, or any non-ASCII
byte) straight on the Arrow string buffers; word and shingle hashes are polynomial hashes computed with
prefix sums, so no Python code runs per document. ``rensa`` (Rust) turns the flat shingle hashes into
MinHash signatures (``RMinHash.digest_matrix_from_flat_token_hashes``): one call per batch, no Python
object per document, about an order of magnitude faster than ``datasketch``'s per-document ``MinHash``.
Banding is NumPy: per band one sort of 64-bit keys of (cluster, band); every member of a bucket is paired
with the bucket's first member, so pairs stay inside a cluster as the semantic ones do. Memory: the
signatures, ``N * num_perm * 4`` bytes, plus one batch of text.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_P = np.uint64(0x100000001B3)
_P_INV = np.uint64(pow(0x100000001B3, -1, 1 << 64))
_MULT = np.uint64(0x9E3779B97F4A7C15)
_EMPTY_SALT = np.uint64(0xE3B7)
_WORD = np.zeros(256, bool)
_WORD[[*range(48, 58), *range(97, 123), *range(128, 256)]] = True


def mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on a uint64 array (wrapping arithmetic)."""
    x = x.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


def shingle_hashes(texts: pa.Array, shingle: int, first: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Flat uint64 shingle hashes of ``texts`` and their row offsets (uint64 [n + 1]).

    A document with fewer than ``shingle`` words has its words as tokens; one with no word a token of
    its own (``first`` + row, so empty documents do not match each other)."""
    arr = pc.utf8_lower(pa.chunked_array([texts]).combine_chunks().cast(pa.large_string()))
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], np.int64, n + 1, arr.offset * 8)
    data = np.frombuffer(arr.buffers()[2], np.uint8)[offsets[0]:offsets[-1]] if n else np.zeros(0, np.uint8)
    offsets = offsets - offsets[0]
    word = _WORD[data]
    at_start = np.zeros(data.size, bool)
    at_start[offsets[:-1][offsets[:-1] < data.size]] = True
    starts = np.flatnonzero(word & (at_start | ~np.concatenate(([False], word[:-1]))))
    ends = np.flatnonzero(word & (np.concatenate((at_start[1:], [True])) | ~np.concatenate((word[1:], [False])))) + 1
    with np.errstate(over="ignore"):
        power = np.full(data.size, _P, np.uint64)
        power[:1] = 1
        power = np.cumprod(power, dtype=np.uint64)
        prefix = np.concatenate((np.zeros(1, np.uint64), np.cumsum(data.astype(np.uint64) * power, dtype=np.uint64)))
        words = mix((prefix[ends] - prefix[starts]) * _inverse_powers(starts) + (ends - starts).astype(np.uint64))
    doc = np.searchsorted(offsets, starts, side="right") - 1
    return _shingles(words, doc, n, shingle, first)


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


def signatures(batches: Iterable[pa.Array], n: int, num_perm: int, shingle: int, seed: int,
               first: int = 0) -> np.ndarray:
    """MinHash signatures (uint32 [n, num_perm]) of the texts in ``batches`` (rensa's ``RMinHash``), documents
    ``first..first+n-1`` of the corpus (the index only tells empty documents apart)."""
    from rensa import RMinHash

    sig = np.empty((n, num_perm), np.uint32)
    pos = 0
    for texts in batches:
        tokens, rows = shingle_hashes(texts, shingle, first + pos)
        digest = RMinHash.digest_matrix_from_flat_token_hashes(tokens, rows, num_perm, seed)
        sig[pos:pos + len(texts)] = np.asarray(digest.to_rows(), np.uint32).reshape(len(texts), num_perm)
        pos += len(texts)
    return sig


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
    jac = np.empty(len(pairs), np.float32)
    for a in range(0, len(pairs), max(1, chunk // num_perm)):
        p = pairs[a:a + max(1, chunk // num_perm)]
        jac[a:a + len(p)] = (sig[p[:, 0]] == sig[p[:, 1]]).mean(axis=1)
    return pairs, jac
