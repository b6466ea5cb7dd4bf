"""Tokenized exports of conversations: the chat template of ``--tokenizer``, a loss mask (``--assistant-only-loss``).

With ``--tokenizer`` on a corpus of conversation records, each conversation is tokenized as the tokenizer's chat
template renders its turns (``apply_chat_template``: role markers and special tokens), the ids a fine-tuning run
trains on; plain-text documents are tokenized as their text, as before. ``--assistant-only-loss`` adds the column
``loss_mask`` (uint8, one per token: 1 on the tokens of assistant turns, which the template marks with
``{% generation %}``, 0 on the prompt; 1 on every token of a plain-text document and on an appended EOS). A
tokenizer without a chat template (a bare ``tokenizer.json``) tokenizes conversations as their text (their turns'
contents a blank line apart), and the export's record says so (``identity.tokenizer.chat_template``: null).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from clusterclip.contract.corpus_texts import Parts
from clusterclip.export.tokenizer import Tokenizer, TokenizerError

log = logging.getLogger(__name__)

LOSS_MASK = "loss_mask"
_GENERATION = re.compile(r"{%-?\s*generation\s*-?%}")


def chat_template(name: str) -> tuple[Any, str | None]:
    """The ``transformers`` tokenizer of ``name`` and its chat template (``(None, None)`` for a ``tokenizer.json``
    file or when transformers is missing or cannot load it: no template to apply)."""
    path = Path(name)
    if path.is_file():
        return None, None
    try:
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(name)
    except Exception:  # no transformers, or a folder it cannot read: the export tokenizes the text
        return None, None
    return hf, getattr(hf, "chat_template", None) or None


@dataclass(frozen=True)
class ChatSpec:
    """What tokenizes a conversation stream, picklable for worker processes: the tokenizer's name, ``append_eos``
    and SHA-256, whether to write the loss mask, and the corpus' reader options (to read the records' turns)."""

    name: str
    append_eos: bool
    sha256: str
    assistant_only: bool
    options: tuple[tuple[str, Any], ...]


class ChatEncoder:
    """Token ids (and the loss mask) of rows of ``text`` and ``record`` (JSON; None: plain text)."""

    def __init__(self, tokenizer: Tokenizer, assistant_only: bool, options: dict[str, Any]) -> None:
        self.tokenizer, self.assistant_only, self.parts = tokenizer, assistant_only, Parts("all", options)
        self.options = tuple(sorted((k, options.get(k)) for k in ("record_kind", "text_field", "text_template")))
        name = tokenizer.identity["name"]
        self.hf, self.template = chat_template(name)
        if self.template is None:
            if assistant_only:
                raise TokenizerError(f"--assistant-only-loss needs the chat template of --tokenizer {name!r}, which "
                                     "has none (a folder saved by transformers, with its tokenizer_config.json)")
            log.warning("export: tokenizer %r has no chat template: conversations are tokenized as their text", name)
        elif assistant_only and not _GENERATION.search(self.template):
            raise TokenizerError(f"--assistant-only-loss: the chat template of {name!r} does not mark the assistant's "
                                 "tokens ({% generation %} ... {% endgeneration %}), so no mask can be read from it")

    @property
    def identity(self) -> dict[str, Any]:
        """The tokenizer's identity with its chat template's SHA-256 (None: conversations tokenized as text)."""
        digest = hashlib.sha256(self.template.encode()).hexdigest() if self.template else None
        return {**self.tokenizer.identity, "chat_template": digest}

    def spec(self) -> ChatSpec:
        ident = self.tokenizer.identity
        return ChatSpec(ident["name"], self.tokenizer.append_eos, ident["sha256"], self.assistant_only, self.options)

    def encode(self, texts: pa.ChunkedArray, records: pa.ChunkedArray, batch: int = 1024) -> dict[str, Any]:
        """``tokens`` (and ``loss_mask``) of the rows, ``batch`` rows at a time."""
        chunks = [self._encode(texts.slice(i, batch).to_pylist(), records.slice(i, batch).to_pylist())
                  for i in range(0, len(texts), batch)]
        dtype = pa.from_numpy_dtype(self.tokenizer.dtype)
        out = {"tokens": pa.chunked_array([c[0] for c in chunks], pa.list_(dtype))}
        if self.assistant_only:
            out[LOSS_MASK] = pa.chunked_array([c[1] for c in chunks], pa.list_(pa.uint8()))
        return out

    def _encode(self, texts: list[str], records: list[str | None]) -> tuple[pa.Array, pa.Array | None]:
        turns = [None if r is None or self.template is None else self.parts.turns(r) for r in records]
        chats = [i for i, t in enumerate(turns) if t]
        ids: list[list[int]] = [[] for _ in texts]
        masks: list[list[int]] = [[] for _ in texts]
        plain = [i for i in range(len(texts)) if not turns[i]]
        encode = getattr(self.tokenizer.tok, "encode_batch_fast", self.tokenizer.tok.encode_batch)
        for i, e in zip(plain, encode([texts[i] for i in plain], add_special_tokens=False), strict=True):
            ids[i], masks[i] = e.ids, [1] * len(e.ids)
        if chats:
            enc = self.hf.apply_chat_template([[{"role": r, "content": c} for r, c in turns[i]] for i in chats],
                                              tokenize=True, return_dict=True,
                                              return_assistant_tokens_mask=self.assistant_only)
            for j, i in enumerate(chats):
                ids[i] = list(enc["input_ids"][j])
                masks[i] = list(enc["assistant_masks"][j]) if self.assistant_only else []
        if self.tokenizer.append_eos:
            ids, masks = [[*i, self.tokenizer.eos] for i in ids], [[*m, 1] for m in masks]
        return _lists(ids, self.tokenizer.dtype), _lists(masks, np.dtype(np.uint8)) if self.assistant_only else None


def _lists(rows: list[list[int]], dtype: np.dtype) -> pa.Array:
    lengths = np.fromiter((len(r) for r in rows), np.int64, len(rows))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    flat = np.fromiter(itertools.chain.from_iterable(rows), dtype, int(offsets[-1]))
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat))
