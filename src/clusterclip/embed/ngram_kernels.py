"""Compiled (numba) loops over character n-grams, a document at a time: each n-gram hashed, counted in a small
table, then listed (the fit) or weighed and projected (the encoder) without leaving compiled code.

N-grams follow scikit-learn's ``char_wb`` analyzer: each white-space separated word (``str.split``'s white space)
between one space on each side, its ``n``-grams for ``n`` in ``[n_min, n_max]``, and a padded word shorter than
``n_min`` once as a whole. An n-gram is identified by a 40-bit tag: the top 40 bits of a seeded polynomial hash of
its code points mod 2^64 (its length mixed in), finished by murmur3's 64-bit mixer. A table entry packs the tag
with a 24-bit field (a count in a document's table, saturating; a row number plus one in the fitted index), so one
probe reads one word; 2^40 tags keep collisions among a million fitted n-grams below one expected pair.
"""

from __future__ import annotations

import numba as nb
import numpy as np

_P = np.uint64(0x100000001B3)
_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_S24 = np.uint64(24)
_S33 = np.uint64(33)
_ONE = np.uint64(1)
_ZERO = np.uint64(0)
LOW = np.uint64((1 << 24) - 1)
"""The 24-bit field of an entry."""
TAG = ~LOW
"""The 40-bit tag of an entry."""
MAX_ROWS = (1 << 24) - 2
"""The most n-grams a fitted index holds (its field stores the row plus one)."""
_SPACE = np.uint64(33)
"""A padding space as hashed (code point 32, plus one like every code point)."""
_FIRST_BITS = 12
"""A document's count table starts at 2^12 slots and doubles when half full."""


@nb.njit(cache=True, inline="always")
def _is_space(c: int) -> bool:
    return (9 <= c <= 13) or c == 32 or (28 <= c <= 31) or c == 0x85 or c == 0xA0 or c == 0x1680 \
        or (0x2000 <= c <= 0x200A) or c == 0x2028 or c == 0x2029 or c == 0x202F or c == 0x205F or c == 0x3000


@nb.njit(cache=True, inline="always")
def _tag(h: np.uint64, n: int) -> np.uint64:
    h ^= np.uint64(n) * _M2
    h ^= h >> _S33
    h *= _M1
    h ^= h >> _S33
    h *= _M2
    h ^= h >> _S33
    return h & TAG


@nb.njit(cache=True)
def _rehash(table: np.ndarray, used: np.ndarray, n_used: int, bits: int) -> tuple:
    """Move the ``n_used`` entries of a ``2^bits`` table into ``2^(bits + 1)`` slots, of the same buffer while it
    is large enough, else of a new one twice its size; returns the buffers and the new ``bits``."""
    moved = np.empty(n_used, np.uint64)
    for u in range(n_used):
        moved[u] = table[used[u]]
        table[used[u]] = _ZERO
    if (1 << (bits + 1)) > len(table):
        table = np.zeros(2 * len(table), np.uint64)
        used = np.empty(len(table) // 2 + 1, np.int64)
    mask = np.uint64((1 << (bits + 1)) - 1)
    for u in range(n_used):
        slot = _probe(table, mask, moved[u] & TAG)
        table[slot] = moved[u]
        used[u] = slot
    return table, used, bits + 1


@nb.njit(cache=True, inline="always")
def _probe(table: np.ndarray, mask: np.uint64, tag: np.uint64) -> np.uint64:
    """The slot of ``tag`` in a table of ``mask + 1`` slots: the one holding it, else the empty slot where it
    belongs (linear probing from the tag's home slot). Every table of this module is probed through here."""
    slot = (tag >> _S24) & mask
    while table[slot] != _ZERO and (table[slot] & TAG) != tag:
        slot = (slot + _ONE) & mask
    return slot


@nb.njit(cache=True, inline="always")
def _insert(table: np.ndarray, mask: np.uint64, tag: np.uint64) -> int:
    """Count ``tag`` in ``table``; its slot when it is new there, else -1."""
    slot = _probe(table, mask, tag)
    entry = table[slot]
    if entry == _ZERO:
        table[slot] = tag | _ONE
        return np.int64(slot)
    if (entry & LOW) != LOW:
        table[slot] = entry + _ONE
    return -1


@nb.njit(cache=True, inline="always")
def _pad(cps: np.ndarray, i: int, j: int, word: np.ndarray) -> tuple:
    """The word ``cps[i:j]`` between two spaces, as hashed, in ``word`` (a larger buffer when it does not fit)."""
    length = j - i + 2
    if len(word) < length:
        word = np.empty(2 * length, np.uint64)
    word[0] = _SPACE
    for t in range(i, j):
        word[t - i + 1] = np.uint64(cps[t]) + _ONE
    word[length - 1] = _SPACE
    return word, length


@nb.njit(cache=True)
def count_document(cps: np.ndarray, start: int, end: int, n_min: int, n_max: int, seed: np.uint64,
                   table: np.ndarray, used: np.ndarray) -> tuple:
    """Count the n-grams of ``cps[start:end]`` into ``table`` (all zero on entry, its used-slot list ``used`` half
    its length plus one); returns the buffers (new ones when the document outgrew them), the number of distinct
    n-grams (their slots in ``used``, first seen first) and of occurrences. The caller zeroes the used slots."""
    bits = _FIRST_BITS
    mask = np.uint64((1 << bits) - 1)
    n_used = 0
    total = 0
    word = np.empty(256, np.uint64)
    i = start
    while i < end:
        while i < end and _is_space(cps[i]):
            i += 1
        if i >= end:
            break
        j = i
        while j < end and not _is_space(cps[j]):
            j += 1
        word, length = _pad(cps, i, j, word)
        for a in range(length):
            h = seed
            for n in range(1, n_max + 1):
                if a + n > length:
                    break
                h = h * _P + word[a + n - 1]
                if n < n_min and not (a == 0 and n == length):
                    continue
                total += 1
                slot = _insert(table, mask, _tag(h, n))
                if slot >= 0:
                    used[n_used] = slot
                    n_used += 1
                    if 2 * n_used > (1 << bits):
                        table, used, bits = _rehash(table, used, n_used, bits)
                        mask = np.uint64((1 << bits) - 1)
        i = j
    return table, used, n_used, total


def new_table() -> tuple[np.ndarray, np.ndarray]:
    """A zeroed count table of 2^16 slots and its used-slot list (:func:`count_document` grows them)."""
    return np.zeros(1 << 16, np.uint64), np.empty((1 << 15) + 1, np.int64)


@nb.njit(cache=True, nogil=True)
def list_ngrams(cps: np.ndarray, bounds: np.ndarray, n_min: int, n_max: int, seed: np.uint64,
                table: np.ndarray, used: np.ndarray) -> tuple:
    """Every document's distinct n-gram tags and counts (documents ``cps[bounds[d]:bounds[d + 1]]``): ``(indptr,
    tags, counts, table, used)``, a document's tags in first-seen order, and the (zeroed) count table to reuse."""
    n_docs = len(bounds) - 1
    indptr = np.zeros(n_docs + 1, np.int64)
    tags = np.empty(1 << 16, np.uint64)
    counts = np.empty(1 << 16, np.int32)
    for d in range(n_docs):
        table, used, n_used, _ = count_document(cps, bounds[d], bounds[d + 1], n_min, n_max, seed, table, used)
        at = indptr[d]
        if at + n_used > len(tags):
            grown = max(2 * len(tags), at + n_used)
            tags = np.concatenate((tags, np.empty(grown - len(tags), np.uint64)))
            counts = np.concatenate((counts, np.empty(grown - len(counts), np.int32)))
        for u in range(n_used):
            entry = table[used[u]]
            tags[at + u] = entry & TAG
            counts[at + u] = np.int32(entry & LOW)
            table[used[u]] = _ZERO
        indptr[d + 1] = at + n_used
    return indptr, tags[:indptr[n_docs]], counts[:indptr[n_docs]], table, used


@nb.njit(cache=True)
def build_index(tags: np.ndarray) -> np.ndarray:
    """The fitted index: tag ``tags[r]`` holds row ``r``, at most a quarter of the slots full."""
    size = 1 << max(4, int(np.ceil(np.log2(max(1, 4 * len(tags))))))
    index = np.zeros(size, np.uint64)
    mask = np.uint64(size - 1)
    for r in range(len(tags)):
        index[_probe(index, mask, tags[r])] = tags[r] | np.uint64(r + 1)
    return index


@nb.njit(cache=True, inline="always")
def _row(index: np.ndarray, mask: np.uint64, tag: np.uint64) -> int:
    """The fitted row of ``tag``, or -1."""
    return np.int64(index[_probe(index, mask, tag)] & LOW) - 1


@nb.njit(cache=True, nogil=True, fastmath=True)
def project(cps: np.ndarray, bounds: np.ndarray, n_min: int, n_max: int, seed: np.uint64,  # noqa: PLR0913
            table: np.ndarray, used: np.ndarray, index: np.ndarray, idf: np.ndarray, scale: np.ndarray,
            components: np.ndarray, out: np.ndarray, coverage: np.ndarray) -> tuple:
    """Each document's sublinear TF-IDF row over the indexed n-grams (``(1 + log count) idf``, L2-normalised) times
    the int8 ``components`` (``[n-grams, dim]``, row ``r`` scaled by ``scale[r]``) into ``out``, and the share of
    its n-gram occurrences that are indexed into ``coverage``; returns the (zeroed) count table to reuse. The rows
    and weights are looked up first and summed after, so the lookups' cache misses overlap."""
    dim = components.shape[1]
    mask = np.uint64(len(index) - 1)
    acc = np.zeros(dim, np.float32)
    rows = np.empty(len(used), np.int64)
    weights = np.empty(len(used), np.float32)
    for d in range(len(bounds) - 1):
        table, used, n_used, total = count_document(cps, bounds[d], bounds[d + 1], n_min, n_max, seed, table,
                                                    used)
        if len(rows) < n_used:
            rows = np.empty(len(used), np.int64)
            weights = np.empty(len(used), np.float32)
        norm2 = 0.0
        hits = 0
        m = 0
        for u in range(n_used):
            entry = table[used[u]]
            table[used[u]] = _ZERO
            r = _row(index, mask, entry & TAG)
            if r < 0:
                continue
            c = np.int64(entry & LOW)
            w = (1.0 + np.log(c)) * idf[r]
            norm2 += w * w
            hits += c
            rows[m] = r
            weights[m] = np.float32(w * scale[r])
            m += 1
        acc[:] = 0.0
        for t in range(m):
            row = components[rows[t]]
            wt = weights[t]
            for k in range(dim):
                acc[k] += wt * np.float32(row[k])
        inv = np.float32(1.0 / np.sqrt(norm2)) if norm2 > 0 else np.float32(0.0)
        for k in range(dim):
            out[d, k] = acc[k] * inv
        coverage[d] = hits / total if total > 0 else 0.0
    return table, used
