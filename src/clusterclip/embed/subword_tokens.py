"""Vectorised word tokens and hashed character n-grams, the features of the ``subword`` embedder.

A batch of texts is lowercased, joined and turned into code points once; ``\\w`` is a lookup table over all code
points (exactly ``re``'s ``\\w``), words are the runs of 2+ word characters (``lsa``'s ``\\b\\w\\w+\\b``), identified
by a 64-bit polynomial hash computed from prefix sums and counted with ``np.unique``. No Python code runs per
token, which keeps the n-gram block affordable. Nothing here knows about embedders.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

WORD_PATTERN = r"(?u)\b\w\w+\b"
"""What a word is (as ``lsa``'s scikit-learn vectorizer): :meth:`CodePoints.runs` finds exactly these runs."""

_U64 = np.uint64
_P = 1099511628211
"""Base of the polynomial hash (odd, so invertible modulo 2**64)."""
_P_INV = pow(_P, -1, 1 << 64)
_LEN_MIX = _U64(0x9E3779B97F4A7C15)
_BOW, _EOW = _U64(2), _U64(3)
"""Marks around a word, so that ``<th`` (a prefix) differs from ``th`` inside a word."""
_POWERS: tuple[np.ndarray, np.ndarray] = (np.ones(1, dtype=_U64), np.ones(1, dtype=_U64))


@functools.cache
def word_table() -> np.ndarray:
    """``bool[0x110000]``: is the code point a word character (``str.isalnum()`` or ``_``: what ``re``'s ``\\w``
    matches in a ``str`` pattern). Built once per process (0.2 s); read-only."""
    table = np.fromiter(map(str.isalnum, map(chr, range(0x110000))), dtype=bool, count=0x110000)
    table[ord("_")] = True
    table.flags.writeable = False
    return table


CJK_RANGES = ((0x3040, 0x30FF), (0x31F0, 0x31FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF),
              (0xFF66, 0xFF9F), (0x20000, 0x2FFFF))
"""Kana and Han ideographs: scripts written without spaces, where a run of word characters is a phrase."""


@functools.cache
def cjk_table() -> np.ndarray:
    """``bool[0x110000]``: is the code point kana or a Han ideograph (:data:`CJK_RANGES`); read-only."""
    table = np.zeros(0x110000, dtype=bool)
    for lo, hi in CJK_RANGES:
        table[lo:hi + 1] = True
    table &= word_table()
    table.flags.writeable = False
    return table


@functools.cache
def space_table() -> np.ndarray:
    """``bool[0x110000]``: is the code point white space (``str.isspace()``, what ``str.split()`` cuts on)."""
    table = np.fromiter(map(str.isspace, map(chr, range(0x110000))), dtype=bool, count=0x110000)
    table.flags.writeable = False
    return table


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``P**k`` and ``P**-k`` modulo 2**64 for ``k = 0..n`` (cached, grown on demand; uint64 wraps)."""
    global _POWERS
    if len(_POWERS[0]) <= n:
        size = max(n + 1, 2 * len(_POWERS[0]))
        with np.errstate(over="ignore"):
            pw = np.cumprod(np.full(size, _P, dtype=_U64))
            ipw = np.cumprod(np.full(size, _P_INV, dtype=_U64))
        _POWERS = (np.concatenate([[_U64(1)], pw[:-1]]), np.concatenate([[_U64(1)], ipw[:-1]]))
    return _POWERS


def _fmix(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser: every input bit affects every output bit."""
    h = h ^ (h >> _U64(33))
    h *= _U64(0xFF51AFD7ED558CCD)
    h ^= h >> _U64(33)
    h *= _U64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> _U64(33))


class CodePoints:
    """A text as code points with polynomial prefix hashes: the hash of ``cps[a:b]`` is
    ``sum_j cps[j] * P**(b-1-j)`` modulo 2**64 (:meth:`span_hash`), from ``prefix[j] = sum_{i<j} cps[i] * P**-i``."""

    def __init__(self, text: str | np.ndarray) -> None:
        """From a text, or from its code points (uint32) already."""
        cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32) if isinstance(text, str) \
            else np.asarray(text, dtype=np.uint32)
        self.cps = cps
        self.pw, ipw = _powers(len(cps) + 1)
        self.prefix = np.zeros(len(cps) + 1, dtype=_U64)
        with np.errstate(over="ignore"):
            np.cumsum(cps.astype(_U64) * ipw[:len(cps)], out=self.prefix[1:])

    def runs(self, chunks: bool = False, cjk: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Start and end (exclusive) of every run of 2+ word characters (``chunks``: of 1+ characters that are not
        white space, as ``str.split()`` cuts), in text order. With ``cjk``, kana and Han characters are not part
        of those runs: every two adjacent ones are a word (a bigram, as search engines index these scripts) and
        one alone is a word of its own; the words are then in order of their start."""
        inside = ~space_table()[self.cps] if chunks else word_table()[self.cps]
        east = cjk_table()[self.cps] if cjk and not chunks else None
        if east is not None:
            inside = inside & ~east
        edges = np.diff(inside.view(np.int8), prepend=np.int8(0), append=np.int8(0))
        starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
        keep = ends - starts >= (1 if chunks else 2)
        starts, ends = starts[keep], ends[keep]
        if east is None or not east.any():
            return starts, ends
        pair = east[:-1] & east[1:]
        alone = east & ~np.concatenate(([False], pair)) & ~np.concatenate((pair, [False]))
        at = np.concatenate((starts, np.flatnonzero(pair), np.flatnonzero(alone)))
        to = np.concatenate((ends, np.flatnonzero(pair) + 2, np.flatnonzero(alone) + 1))
        order = np.argsort(at, kind="stable")
        return at[order], to[order]

    def pieces(self) -> tuple[np.ndarray, np.ndarray]:
        """Start and end (exclusive) of every run of word characters and of every run of other characters that
        are not white space, in text order: ``foo(bar);`` is ``foo``, ``(``, ``bar``, ``);``."""
        kind = np.where(space_table()[self.cps], 0, np.where(word_table()[self.cps], 1, 2)).astype(np.int8)
        change = np.flatnonzero(np.diff(kind, prepend=np.int8(0), append=np.int8(0)) != 0)
        starts, ends = change[:-1], change[1:]
        keep = kind[starts] != 0
        return starts[keep], ends[keep]

    def span_hash(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Polynomial hash of each span ``cps[a:b]`` (0 for an empty span)."""
        with np.errstate(over="ignore"):
            return (self.prefix[b] - self.prefix[a]) * self.pw[np.maximum(b - 1, 0)]

    def word_keys(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """64-bit keys identifying the words ``cps[starts:ends]`` (hash mixed with the length, finalised)."""
        with np.errstate(over="ignore"):
            return _fmix(self.span_hash(starts, ends) + (ends - starts).astype(_U64) * _LEN_MIX)

    def ngram_buckets(self, starts: np.ndarray, ends: np.ndarray, ngram_range: tuple[int, int], bits: int,
                      seed: int, salt: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """``(word, bucket)`` for every character n-gram, ``n`` in ``ngram_range``, of every word
        ``cps[starts:ends]`` between begin/end marks (``<word>``): the n-gram's polynomial hash salted by ``n``,
        ``seed`` and ``salt`` (another kind of token), finalised, top ``bits`` bits. A window touching a mark is
        hashed as ``mark * P**len + span`` (begin) or ``span * P + mark`` (end): the hash of the marked string."""
        owners, buckets = [], []
        lengths = ends - starts
        for n in range(ngram_range[0], ngram_range[1] + 1):
            windows = np.maximum(lengths + 3 - n, 0)  # n-grams of the marked word, of length L + 2
            owner = np.repeat(np.arange(len(starts)), windows)
            if len(owner) == 0:
                continue
            first = np.concatenate([[0], np.cumsum(windows)[:-1]])
            k = np.arange(len(owner)) - np.repeat(first, windows)
            a = starts[owner] + k - 1  # the begin mark stands at starts - 1
            b = a + n
            bow, eow = k == 0, b == ends[owner] + 1
            lo, hi = np.where(bow, a + 1, a), np.where(eow, b - 1, b)
            h = self.span_hash(lo, hi)
            with np.errstate(over="ignore"):
                h = np.where(bow, h + _BOW * self.pw[hi - lo], h)
                h = np.where(eow, h * _U64(_P) + _EOW, h)
                h += _U64((0x632BE59BD9B4E019 * (n + 1) + 0x94D049BB133111EB * (seed + 1)
                           + 0x2545F4914F6CDD1D * salt) & ((1 << 64) - 1))
            owners.append(owner)
            buckets.append((_fmix(h) >> _U64(64 - bits)).astype(np.int64))
        if not owners:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return np.concatenate(owners), np.concatenate(buckets)

    def ngram_rows(self, starts: np.ndarray, ends: np.ndarray, ngram_range: tuple[int, int], bits: int, seed: int,
                   idf: np.ndarray | None = None, salt: int = 0) -> sp.csr_matrix:
        """``[words, 2**bits]`` float32 counts of each word's hashed n-grams (:meth:`ngram_buckets`), times the
        buckets' ``idf`` when given."""
        owner, bucket = self.ngram_buckets(starts, ends, ngram_range, bits, seed, salt)
        h = sp.csr_matrix((np.ones(len(owner), dtype=np.float32), (owner, bucket)), shape=(len(starts), 1 << bits))
        h.sum_duplicates()
        if idf is not None:
            h.data *= idf[h.indices]
        return h


def words_of(words: Sequence[str], cjk: bool = False) -> tuple[CodePoints, np.ndarray, np.ndarray]:
    """Code points and spans of a list of words (each one word as :meth:`CodePoints.runs` finds them, e.g. a
    vocabulary), in order."""
    cp = CodePoints("\n".join(words))
    starts, ends = cp.runs(cjk=cjk)
    if len(starts) != len(words):
        raise ValueError("every word must be one run of 2+ word characters")
    return cp, starts, ends


class TokenBatch:
    """A batch's words: ``counts`` (float32 CSR, documents x distinct words sorted by key), each word's ``keys`` and
    one span of it (``starts``, ``ends``) in the batch's code points ``cp``.

    The documents are lowercased (``str.lower``, as the vectorizers do) and joined with a space. With ``chunks``,
    ``split`` says what a word is: ``words``, runs of 2+ word characters (:meth:`CodePoints.runs`); ``chunks``,
    the white-space separated chunks (``str.split()``, what scikit-learn's ``char_wb`` analyzer cuts on);
    ``pieces``, runs of word characters and runs of other characters (:meth:`CodePoints.pieces`)."""

    def __init__(self, texts: Sequence[str], cjk: bool = False, split: str = "words") -> None:
        lows = list(map(str.lower, texts))
        lengths = np.fromiter(map(len, lows), dtype=np.int64, count=len(lows))
        self.cp = CodePoints(" ".join(lows))
        self.offsets = np.concatenate([[0], np.cumsum(lengths + 1)])
        spans = self.cp.pieces() if split == "pieces" else self.cp.runs(chunks=split == "chunks", cjk=cjk)
        self.counts, self.keys, self.starts, self.ends = self._count(*spans)

    def _count(self, starts: np.ndarray, ends: np.ndarray,
               docs: np.ndarray | None = None) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray, np.ndarray]:
        """Counts of the distinct spans (by key) per document; with ``docs``, of the spans in those documents."""
        doc = np.searchsorted(self.offsets, starts, side="right") - 1
        if docs is not None:
            keep = np.isin(doc, docs)
            starts, ends, doc = starts[keep], ends[keep], doc[keep]
        keys, first, inverse = np.unique(self.cp.word_keys(starts, ends), return_index=True, return_inverse=True)
        counts = sp.csr_matrix((np.ones(len(doc), dtype=np.float32), (doc, inverse.ravel())),
                               shape=(len(self.offsets) - 1, len(keys)))
        counts.sum_duplicates()
        return counts, keys, starts[first], ends[first]

    def chunks(self, docs: np.ndarray) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
        """``(counts, starts, ends)`` of the white-space separated chunks of the documents ``docs`` (all others get
        empty rows), as for words: for documents without any word (ASCII art, tables of symbols)."""
        counts, _, starts, ends = self._count(*self.cp.runs(chunks=True), docs)
        return counts, starts, ends


class KeyIndex:
    """Positions of 64-bit word keys in a fixed list (a vocabulary, the stop words): -1 when absent."""

    def __init__(self, keys: np.ndarray) -> None:
        self.order = np.argsort(keys, kind="stable")
        self.sorted = keys[self.order]

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """The position of each key in the list, or -1."""
        if len(self.sorted) == 0:
            return np.full(len(keys), -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.sorted, keys), len(self.sorted) - 1)
        return np.where(self.sorted[at] == keys, self.order[at], -1)


def sublinear(x: sp.spmatrix) -> sp.csr_matrix:
    """A float32 copy of the counts ``x`` with every stored count ``c`` replaced by ``1 + log(c)``."""
    x = sp.csr_matrix(x, dtype=np.float32, copy=True)
    np.log(x.data, out=x.data)
    x.data += 1.0
    return x


def row_norms(x: sp.spmatrix) -> np.ndarray:
    """L2 norm of each row of a sparse matrix (duplicates summed; index order does not matter), float32."""
    x = sp.csr_matrix(x)
    rows = np.repeat(np.arange(x.shape[0]), np.diff(x.indptr))
    return np.sqrt(np.bincount(rows, weights=np.square(x.data, dtype=np.float64), minlength=x.shape[0]))\
        .astype(np.float32)


def scale_rows(x: sp.csr_matrix, scale: np.ndarray) -> sp.csr_matrix:
    """A copy of ``x`` with row ``i`` times ``scale[i]``."""
    x = sp.csr_matrix(x, copy=True)
    x.data *= np.repeat(scale.astype(np.float32), np.diff(x.indptr))
    return x


def inverse(v: np.ndarray) -> np.ndarray:
    """``1 / v`` where ``v > 0``, else 0 (float32): scales that leave empty rows empty."""
    return np.where(v > 0, 1.0 / np.where(v > 0, v, 1.0), 0.0).astype(np.float32)
