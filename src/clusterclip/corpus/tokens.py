"""Token counts of documents: a word/punctuation regex by default, or a Hugging Face tokenizer."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

import numpy as np

from clusterclip.corpus.config import CorpusConfig
from clusterclip.errors import ClusterClipError, first_line
from clusterclip.settings import SettingsError

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


@functools.lru_cache(maxsize=4)
def make_token_counter(tokenizer: str | None) -> Callable[[list[str]], np.ndarray]:
    """Per-document token counts: a word/punctuation regex by default, or a Hugging Face tokenizer."""
    if tokenizer is None:
        def count(texts: list[str]) -> np.ndarray:
            return np.fromiter((len(_TOKEN_RE.findall(t)) for t in texts), dtype=np.int64, count=len(texts))

        return count
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise SettingsError("tokenizer", "needs `pip install clusterclip[hf]`", CorpusConfig) from None
    try:
        tok = AutoTokenizer.from_pretrained(tokenizer)
    except Exception as exc:  # transformers raises OSError, ValueError, ImportError ... for unusable names
        raise ClusterClipError(f"cannot load tokenizer {tokenizer!r} (a folder, or a name in the local Hugging Face "
                               f"cache when offline): {first_line(exc)}") from None

    def count_hf(texts: list[str]) -> np.ndarray:
        enc = tok(texts, add_special_tokens=False, return_attention_mask=False, verbose=False)
        return np.fromiter((len(ids) for ids in enc["input_ids"]), dtype=np.int64, count=len(texts))

    return count_hf
