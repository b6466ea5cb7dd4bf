"""The supervised fine-tuning objective of the experiment (``--objective sft``): conversations in, response tokens
scored.

A document is a conversation: its turns in order, each ``content`` followed by a newline, then the end-of-text
id. The proxy trains and is evaluated on the *response* tokens only, as SFT trainers mask the prompt: every
assistant turn's tokens and the closing end-of-text id are targets, the system and user turns are context. The
mask travels with the tokens (:attr:`~clusterclip.experiment.data.TokenizedDocs.mask`), so training batches,
evaluation windows and the unigram floor all count response tokens and nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from clusterclip.contract.record_kinds import kind_of
from clusterclip.errors import ClusterClipError
from clusterclip.experiment.data import EOS, TokenizedDocs, cut_words

Turn = tuple[str, str]


def record_turns(texts: Sequence[str], records: Sequence[str | None], options: Mapping[str, Any]) -> list[list[Turn]]:
    """Each document's turns, from the records the corpus stage kept and the reader options it recorded; a document
    of plain text (no record) is refused: it has no response to learn."""
    kind_name = str(options.get("record_kind") or "auto")
    text_field = str(options.get("text_field") or "text")
    out = []
    for i, record in enumerate(records):
        kind = None if record is None else kind_of(fields := json.loads(record), kind_name, text_field)
        if kind is None or kind.name == "template":
            raise ClusterClipError(f"--objective sft needs conversation records (chat, sharegpt, alpaca, openorca); "
                                   f"document {i} ({texts[i][:40]!r}) is plain text: use --objective lm, or give "
                                   "conversation records")
        out.append(kind.turns(fields, None))
    return out


def cut_turns(turns: Sequence[Turn], max_words: int | None) -> list[Turn]:
    """Every turn cut to its first ``max_words`` words (all when None)."""
    return [(role, cut_words(content, max_words)) for role, content in turns]


def messages(turns: Sequence[Turn]) -> list[dict[str, str]]:
    """Turns as chat messages (what the split files hold, so the training split is read as chat records)."""
    return [{"role": role, "content": content} for role, content in turns]


def encode_turns(tokenizer: Any, docs: Sequence[Sequence[Turn]], batch: int = 4096) -> TokenizedDocs:
    """The conversations laid out flat (each turn's content and a newline, the end-of-text id after each
    conversation), with ``mask`` True on the tokens of assistant turns and on the end-of-text ids."""
    eos = int(tokenizer.token_to_id(EOS))
    texts = [content + "\n" for turns in docs for _, content in turns]
    response = np.fromiter((role == "assistant" for turns in docs for role, _ in turns), bool, len(texts))
    turns_per_doc = np.fromiter((len(t) for t in docs), np.int64, len(docs))
    ids: list[list[int]] = []
    for start in range(0, len(texts), batch):
        ids += [e.ids for e in tokenizer.encode_batch(texts[start:start + batch])]
    seg_len = np.fromiter((len(i) for i in ids), np.int64, len(ids))
    # every document's segments then one EOS piece: insert a piece of length 1 after each document's last turn
    ends = np.cumsum(turns_per_doc)
    piece_len = np.insert(seg_len, ends, 1)
    piece_mask = np.insert(response, ends, True)
    flat = np.full(int(piece_len.sum()), eos, np.int32)
    is_eos = np.zeros(len(piece_len), bool)
    is_eos[ends + np.arange(len(ends))] = True
    token_of_eos_piece = np.repeat(is_eos, piece_len)
    flat[~token_of_eos_piece] = np.fromiter((t for i in ids for t in i), np.int32, int(seg_len.sum()))
    doc_len = np.bincount(np.repeat(np.arange(len(docs)), turns_per_doc), weights=seg_len, minlength=len(docs))
    offsets = np.concatenate([[0], np.cumsum(doc_len.astype(np.int64) + 1)]).astype(np.int64)
    return TokenizedDocs(flat, offsets, eos, np.repeat(piece_mask, piece_len))
