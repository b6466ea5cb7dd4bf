"""Boilerplate lines: lines (of words) that many documents share, left out of the texts before they are hashed.

A line such as a licence header's, "Share this article", "Read more..." or a navigation menu is in hundreds of
documents that are otherwise unrelated. Hashed with the rest it makes unrelated documents look alike (two source
files with the same licence header and little else), and it hides a copy of a short document behind the line
added to it (a one-line message plus a footer shares few shingles with the message). So a line that at least a
share of the documents contain (counted once per document, on a seeded sample: :func:`frequent_lines`) is
*boilerplate* and is removed from the text that the signatures, word sets and shingle counts are made of, unless
every line of a document is boilerplate (then the document is hashed whole, so exact copies of such a document
stay copies). The normalised-text key is always of the whole text. The same idea as the line and paragraph
deduplication of CCNet and Dolma, used here only for what the similarity is measured on.

A line is identified by its words (runs of letters and digits, or of non-ASCII bytes; symbols and whitespace do
not count), so re-spacing or re-punctuating it does not make it a new line. Pure NumPy over one batch's bytes.
"""

from __future__ import annotations

import numpy as np

NEWLINE = 10
_SALT = np.uint64(0x6C696E65)


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


def line_spans(data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The lines of a batch of texts (``data`` their bytes, ``offsets`` int64 [n + 1] the rows' spans): each line's
    first byte (int64 [L], ascending; a line ends where the next begins, the last at ``data.size``, and holds its
    ``\\n``) and its row."""
    n = offsets.size - 1
    filled = offsets[:-1][np.diff(offsets) > 0]
    after = np.flatnonzero(data == NEWLINE) + 1
    starts = np.unique(np.concatenate((filled, after[after < data.size])))
    return starts, np.searchsorted(offsets, starts, side="right") - 1 if n else starts


def line_keys(starts: np.ndarray, word_starts: np.ndarray, word_hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """uint64 [L]: a key per line from its words in order (0 for a line without words), given the lines' first
    bytes and the words' first bytes (ascending) and hashes; and the line of each word."""
    keys = np.zeros(starts.size, np.uint64)
    line = np.searchsorted(starts, word_starts, side="right") - 1
    if not word_starts.size:
        return keys, line
    first = np.flatnonzero(np.concatenate(([True], line[1:] != line[:-1])))
    rank = np.arange(line.size) - np.repeat(first, np.diff(np.append(first, line.size)))
    with np.errstate(over="ignore"):
        parts = mix(word_hashes ^ mix(rank.astype(np.uint64) + _SALT))
        keys[line[first]] = mix(np.add.reduceat(parts, first) + np.uint64(1)) | np.uint64(1)
    return keys, line


def document_lines(keys: np.ndarray, line_doc: np.ndarray) -> np.ndarray:
    """The distinct non-zero line keys of each document, as one uint64 array (a key once per document)."""
    worded = keys != 0
    k, d = keys[worded], line_doc[worded]
    order = np.lexsort((k, d))
    k, d = k[order], d[order]
    new = np.concatenate(([True], (k[1:] != k[:-1]) | (d[1:] != d[:-1]))) if k.size else np.zeros(0, bool)
    return k[new]


def frequent_lines(per_document: list[np.ndarray], documents: int, share: float, min_documents: int) -> np.ndarray:
    """Sorted uint64 keys of the lines that at least ``max(share * documents, min_documents)`` of ``documents``
    documents contain (``per_document``: :func:`document_lines` of each batch); none when ``share`` is 0."""
    if share <= 0 or not per_document:
        return np.zeros(0, np.uint64)
    keys, counts = np.unique(np.concatenate(per_document), return_counts=True)
    return keys[counts >= max(int(np.ceil(share * documents)), min_documents)].astype(np.uint64)


def keep_bytes(data: np.ndarray, offsets: np.ndarray, boilerplate: np.ndarray, word_starts: np.ndarray,
               word_hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What is left of a batch without its boilerplate lines, a document whose every line with words is
    boilerplate kept whole: its bytes (bool [data.size]), the rows' new offsets and its words (bool, per word:
    a word never spans lines, so the words left are the old words of the lines left, hashes unchanged)."""
    n = offsets.size - 1
    starts, doc = line_spans(data, offsets)
    keys, word_line = line_keys(starts, word_starts, word_hashes)
    drop = np.isin(keys, boilerplate) & (keys != 0)
    worded = np.bincount(doc, weights=keys != 0, minlength=n)
    dropped = np.bincount(doc, weights=drop, minlength=n)
    drop &= (dropped < worded)[doc]
    lengths = np.diff(np.append(starts, data.size))
    mask = np.repeat(~drop, lengths)
    kept = np.bincount(np.repeat(doc, lengths), weights=mask, minlength=n).astype(np.int64)
    return mask, np.concatenate(([0], np.cumsum(kept))), ~drop[word_line]
