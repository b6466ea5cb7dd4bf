"""Token counts of documents: a word/punctuation regex by default, or a Hugging Face tokenizer.

With ``--tokenizer``, a conversation (chat, ShareGPT, Alpaca, OpenOrca records) is counted as the tokens the
tokenizer's chat template makes of its turns (``apply_chat_template``: role markers, special tokens and all), so
that ``--budget-unit tokens`` budgets what a fine-tuning run trains on. A tokenizer without a chat template counts
the document's text (the turns' contents a blank line apart: no role markers), and says so once. Plain text and
``--text-template`` documents are always counted as their text.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from clusterclip.contract.record_kinds import KINDS, Template
from clusterclip.corpus.config import CorpusConfig
from clusterclip.corpus.records import DocBatch
from clusterclip.errors import ClusterClipError, first_line
from clusterclip.settings import SettingsError

log = logging.getLogger(__name__)

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")
TokenCounter = Callable[[DocBatch], np.ndarray]
"""Per-document token counts of a batch."""


def _regex_counts(texts: Sequence[str]) -> np.ndarray:
    return np.fromiter((len(_TOKEN_RE.findall(t)) for t in texts), dtype=np.int64, count=len(texts))


def conversations(batch: DocBatch) -> tuple[list[int], list[list[dict[str, str]]]]:
    """The rows of ``batch`` that are conversations (not plain text or a template) and their turns as chat
    messages (``{"role", "content"}``), parsed again from the records the reader kept."""
    if len(batch.records) != len(batch):
        return [], []
    rows = [i for i, (r, k) in enumerate(zip(batch.records, batch.kinds, strict=True))
            if r is not None and k in KINDS and k != Template.name]
    return rows, [[{"role": role, "content": content} for role, content in KINDS[batch.kinds[i]].turns(
        json.loads(batch.records[i]), None)] for i in rows]


def _load(tokenizer: str) -> Any:
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise SettingsError("tokenizer", "needs `pip install clusterclip[hf]`", CorpusConfig) from None
    try:
        return AutoTokenizer.from_pretrained(tokenizer)
    except Exception as exc:  # transformers raises OSError, ValueError, ImportError ... for unusable names
        raise ClusterClipError(f"cannot load tokenizer {tokenizer!r} (a folder, or a name in the local Hugging Face "
                               f"cache when offline): {first_line(exc)}") from None


@functools.lru_cache(maxsize=4)
def make_token_counter(tokenizer: str | None) -> TokenCounter:
    """Per-document token counts: a word/punctuation regex by default, or a Hugging Face tokenizer (its chat
    template for conversations, when it has one)."""
    if tokenizer is None:
        return lambda batch: _regex_counts(batch.texts)
    tok = _load(tokenizer)
    templated = bool(getattr(tok, "chat_template", None))
    warned: list[bool] = []

    def count_hf(batch: DocBatch) -> np.ndarray:
        rows, chats = conversations(batch) if templated or not warned else ([], [])
        if chats and not templated:
            log.warning("corpus: tokenizer %r has no chat template: conversations are counted as their text "
                        "(their turns' contents, without role markers)", tokenizer)
            warned.append(True)
            rows, chats = [], []
        counts = np.zeros(len(batch), np.int64)
        plain = np.ones(len(batch), bool)
        plain[rows] = False
        if plain.any():
            texts = [batch.texts[i] for i in np.flatnonzero(plain)]
            enc = tok(texts, add_special_tokens=False, return_attention_mask=False, verbose=False)
            counts[plain] = [len(ids) for ids in enc["input_ids"]]
        if chats:
            enc = tok.apply_chat_template(chats, tokenize=True, return_dict=True)
            counts[rows] = [len(ids) for ids in enc["input_ids"]]
        return counts

    return count_hf
