"""Data side of the experiment: subset and cut documents, stratified split, BPE tokenizer, token streams.

Token arrays use one layout throughout: ``flat`` holds every document's tokens followed by the
end-of-text id, back to back, and ``offsets[i]:offsets[i+1]`` is document ``i`` (EOS included). Gathering
documents and cutting held-out documents into evaluation windows are pure numpy index arithmetic on that
layout, so no Python loop ever runs per token. Training batches are packed as the plan is read through the
sampler (``clusterclip.experiment.batches``).
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from clusterclip.errors import ClusterClipError

EOS = "<|endoftext|>"
_WORD_RE = re.compile(r"\S+")


def cut_words(text: str, max_words: int | None) -> str:
    """The prefix of ``text`` holding its first ``max_words`` words (formatting kept); all when None/0."""
    if not max_words:
        return text
    ends = [m.end() for m in itertools.islice(_WORD_RE.finditer(text), max_words)]
    return text[: ends[-1]] if ends else text


def choose_subset(n: int, size: int | None, seed: int) -> np.ndarray:
    """Sorted seeded sample of ``size`` of ``n`` document indices (all when None/0 or >= n).

    A uniform sample keeps the corpus' natural imbalance between domains, which is what the strategies
    are meant to correct.
    """
    if not size or size >= n:
        return np.arange(n, dtype=np.int64)
    return np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False)).astype(np.int64)


def stratified_split(strata: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Boolean mask of held-out rows: ``fraction`` of every stratum, stochastically rounded.

    A stratum of ``n`` rows loses ``floor(fraction * n + u)`` of them (``u`` uniform, seeded), so the
    held-out share is ``fraction`` in expectation for strata of every size, including single rows.
    """
    if not 0.0 < fraction < 1.0:
        raise ClusterClipError(f"held-out fraction must be in (0, 1), got {fraction}")
    strata = np.asarray(strata)
    rng = np.random.default_rng(seed)
    _, cell, sizes = np.unique(strata, return_inverse=True, return_counts=True)
    take = np.floor(fraction * sizes + rng.random(sizes.size)).astype(np.int64)
    order = rng.permutation(strata.size)
    order = order[np.argsort(cell[order], kind="stable")]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    rank = np.empty(strata.size, dtype=np.int64)
    rank[order] = np.arange(strata.size) - np.repeat(starts, sizes)
    return rank < take[cell]


# ----------------------------------------------------------------------------------------- tokenizer


def train_tokenizer(texts: Sequence[str], vocab_size: int, path: str | os.PathLike[str]) -> object:
    """Train a byte-level BPE tokenizer (``tokenizers``) on ``texts`` and save it to ``path``.

    Byte level means every string is encodable (no unknown token); ``<|endoftext|>`` is id 0 and
    separates documents in packed sequences.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from clusterclip.store import atomic_path

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer, length=len(texts))
    with atomic_path(path) as tmp:
        tok.save(str(tmp))
    return tok


def load_tokenizer(path: str | os.PathLike[str]) -> object:
    """The tokenizer saved by :func:`train_tokenizer` (reused on resume so token ids never change)."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(Path(path)))


@dataclass
class TokenizedDocs:
    """Documents as one flat token array (each followed by EOS) plus ``offsets`` ``[N + 1]``; ``mask`` (bool, like
    ``flat``; None: every token) marks the tokens that are targets of the loss (``--objective sft``: responses)."""

    flat: np.ndarray
    offsets: np.ndarray
    eos: int
    mask: np.ndarray | None = None

    @property
    def lengths(self) -> np.ndarray:
        """Tokens per document, EOS included: the unit of token budgets."""
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return self.offsets.size - 1


def encode_docs(tokenizer: object, texts: Sequence[str], batch: int = 1024) -> TokenizedDocs:
    """Encode ``texts`` and lay them out flat with an EOS after every document."""
    eos = tokenizer.token_to_id(EOS)  # type: ignore[attr-defined]
    chunks: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    for start in range(0, len(texts), batch):
        ids = [e.ids for e in tokenizer.encode_batch(list(texts[start:start + batch]))]  # type: ignore[attr-defined]
        n = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids)) + 1
        flat = np.full(int(n.sum()), eos, dtype=np.int32)
        ends = np.cumsum(n)
        body = np.ones(flat.size, dtype=bool)
        body[ends - 1] = False
        flat[body] = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int((n - 1).sum()))
        chunks.append(flat)
        lengths.append(n)
    n_all = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(n_all)]).astype(np.int64)
    flat_all = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int32)
    return TokenizedDocs(flat_all, offsets, int(eos))


# ------------------------------------------------------------------------------------------- streams


def gather_stream(docs: TokenizedDocs, order: np.ndarray, values: np.ndarray | None = None) -> np.ndarray:
    """The token stream of ``order`` (document indices, repeats allowed): documents back to back (``values``: an
    array laid out like ``docs.flat``, such as its mask, gathered instead of the tokens)."""
    order = np.asarray(order, dtype=np.int64)
    lengths = docs.lengths[order]
    starts = docs.offsets[:-1][order]
    out_starts = np.cumsum(lengths) - lengths
    idx = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(starts - out_starts, lengths)
    return (docs.flat if values is None else values)[idx]


def select_docs(docs: TokenizedDocs, ids: np.ndarray) -> TokenizedDocs:
    """The documents ``ids`` (in that order) as a layout of their own."""
    lengths = docs.lengths[ids]
    return TokenizedDocs(gather_stream(docs, ids), np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
                         docs.eos, None if docs.mask is None else gather_stream(docs, ids, docs.mask))


@dataclass
class EvalWindows:
    """Documents cut into model-sized windows; ``doc`` maps each window back to its document."""

    inputs: np.ndarray
    targets: np.ndarray
    doc: np.ndarray


def eval_windows(docs: TokenizedDocs, doc_ids: np.ndarray, context: int) -> EvalWindows:
    """Windows that score every token of the given documents exactly once.

    Document ``i`` is read as ``EOS, tokens..., EOS`` (the leading EOS is the end of whatever came
    before, as in training); its targets are its tokens and its final EOS, cut into consecutive
    windows of ``context`` targets. Padding targets, and targets outside ``docs.mask``, are ``-1``.
    """
    doc_ids = np.asarray(doc_ids, dtype=np.int64)
    shifted = np.concatenate([[docs.eos], docs.flat]).astype(np.int64)
    n = docs.lengths[doc_ids]
    per_doc = -(-n // context)
    win_doc = np.repeat(doc_ids, per_doc)
    first = np.cumsum(per_doc) - per_doc
    win_k = np.arange(int(per_doc.sum())) - np.repeat(first, per_doc)
    start = docs.offsets[:-1][win_doc] + win_k * context
    valid = np.minimum(context, np.repeat(n, per_doc) - win_k * context)
    pos = start[:, None] + np.arange(context)[None, :]
    mask = np.arange(context)[None, :] < valid[:, None]
    limit = shifted.size - 1
    inputs = shifted[np.minimum(pos, limit)]
    scored = mask if docs.mask is None else mask & docs.mask[np.minimum(pos, docs.flat.size - 1)]  # flat[p]
    targets = np.where(scored, shifted[np.minimum(pos + 1, limit)], -1)  # is shifted[p + 1]
    inputs = np.where(mask, inputs, docs.eos)
    return EvalWindows(inputs, targets, win_doc)
