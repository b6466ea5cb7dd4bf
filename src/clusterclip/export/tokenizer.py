"""The tokenizer of a tokenized export (``--tokenizer``): loaded once, every unusable one refused in one line.

A path to a ``tokenizer.json`` (or a folder holding one) is read with ``tokenizers``; a folder without one, or
a name, with ``transformers.AutoTokenizer`` (offline runs need the name in the local cache). Ids are encoded
without special tokens; ``append_eos`` ends each document with the tokenizer's EOS id.
"""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from clusterclip.errors import ClusterClipError, first_line

EOS_TOKENS = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", "[SEP]")
"""Tokens tried, in order, as the EOS of a bare ``tokenizer.json`` (a ``transformers`` one names its own)."""


class TokenizerError(ClusterClipError):
    """A ``--tokenizer`` that cannot be loaded: missing, malformed, unknown offline, or its library absent."""


def _from_file(name: str, file: Path) -> tuple[Any, str | None]:
    try:
        from tokenizers import Tokenizer as HfTokenizer
    except ImportError:
        raise TokenizerError("--tokenizer needs the tokenizers package: pip install 'clusterclip[hf]'") from None
    try:
        tok = HfTokenizer.from_file(str(file))
    except Exception as exc:  # tokenizers raises a bare Exception for malformed files
        raise TokenizerError(f"--tokenizer {name!r}: {file} is not a valid tokenizer.json "
                             f"({first_line(exc)})") from None
    return tok, next((t for t in EOS_TOKENS if tok.token_to_id(t) is not None), None)


def _from_transformers(name: str) -> tuple[Any, str | None]:
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise TokenizerError(f"--tokenizer {name!r} is not a tokenizer.json file or folder, and loading it by name "
                             "needs transformers: pip install 'clusterclip[hf]'") from None
    try:
        hf = AutoTokenizer.from_pretrained(name)
    except Exception as exc:  # transformers raises OSError, ValueError, ImportError ... for unusable names
        where = "folder" if Path(name).is_dir() else "name (offline runs need it in the local Hugging Face cache)"
        raise TokenizerError(f"--tokenizer {name!r}: cannot load this {where}: {first_line(exc)}; pass a "
                             "tokenizer.json or a folder holding one") from None
    backend = getattr(hf, "backend_tokenizer", None)
    if backend is None:
        raise TokenizerError(f"--tokenizer {name!r} has no fast (Rust) tokenizer; save one as tokenizer.json "
                             "(tokenizer.save_pretrained on a fast tokenizer) and pass that")
    return backend, hf.eos_token or hf.sep_token


def load(name: str) -> tuple[Any, str | None]:
    """``(tokenizers.Tokenizer, EOS token or None)`` for ``name``; :class:`TokenizerError` when unusable."""
    if not isinstance(name, str) or not name.strip():
        raise TokenizerError(f"--tokenizer must name a tokenizer.json, a folder or a model, got {name!r}")
    path = Path(name)
    file = path / "tokenizer.json" if path.is_dir() else path
    if file.is_file():
        return _from_file(name, file)
    if path.is_dir():
        if not any(path.iterdir()):
            raise TokenizerError(f"--tokenizer {name!r}: the folder is empty (no tokenizer.json)")
        return _from_transformers(name)
    if path.is_absolute() or name.startswith((".", "~")) or name.endswith(".json") or name.count("/") > 1:
        raise TokenizerError(f"--tokenizer {name!r}: no such file or folder")
    return _from_transformers(name)


class Tokenizer:
    """A fast Hugging Face tokenizer: ids without special tokens, plus the EOS id when ``append_eos``."""

    def __init__(self, name: str, append_eos: bool) -> None:
        self.tok, eos = load(name)
        # Saved tokenizers often carry a model's truncation and padding (MiniLM's: 128 tokens); an export
        # wants every token of every document.
        self.tok.no_truncation()
        self.tok.no_padding()
        self.eos = self.tok.token_to_id(eos) if eos is not None else None
        if append_eos and self.eos is None:
            raise TokenizerError(f"tokenizer {name!r} has no EOS token ({', '.join(EOS_TOKENS)}); drop --append-eos")
        self.append_eos = append_eos
        vocab = self.tok.get_vocab_size(with_added_tokens=True)
        self.dtype = np.dtype(np.uint16 if vocab <= 2**16 else np.int32)
        digest = hashlib.sha256(self.tok.to_str().encode()).hexdigest()
        self.identity = {"name": name, "sha256": digest, "vocab_size": vocab,
                         "eos_id": self.eos if append_eos else None, "dtype": self.dtype.name}

    def encode(self, texts: pa.ChunkedArray, batch: int = 1024) -> pa.ChunkedArray:
        """Token ids of ``texts`` as a ``list<uint16|int32>`` array, encoded ``batch`` texts at a time so that
        Python lists of ids never hold more than one batch."""
        return pa.chunked_array([self._encode(texts.slice(i, batch).to_pylist())
                                 for i in range(0, len(texts), batch)], pa.list_(pa.from_numpy_dtype(self.dtype)))

    def _encode(self, texts: list[str]) -> pa.Array:
        # encode_batch_fast (tokenizers >= 0.21) skips the character offsets an export never reads: the same
        # ids, about a quarter faster
        encode = getattr(self.tok, "encode_batch_fast", self.tok.encode_batch)
        ids = [e.ids for e in encode(texts, add_special_tokens=False)]
        if self.append_eos:
            ids = [[*i, self.eos] for i in ids]
        lengths = np.fromiter((len(i) for i in ids), np.int64, len(ids))
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        flat = np.fromiter(itertools.chain.from_iterable(ids), self.dtype, int(offsets[-1]))
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat))
