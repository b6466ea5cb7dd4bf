"""The ``minilm`` embedder: all-MiniLM-L6-v2 through sentence-transformers, loaded offline."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from clusterclip.embed.base import MINILM_ID, EmbedderBase, digest, hf_progress, minilm_path, set_offline
from clusterclip.progress import progress_note

if TYPE_CHECKING:
    from clusterclip.contract.embed import EmbedRecord
    from clusterclip.store import RunDir


class MiniLMEmbedder(EmbedderBase):
    """all-MiniLM-L6-v2 through sentence-transformers, loaded offline from the local package.

    Texts are sorted by length (longest first) before batching, so batches hold similar lengths and
    little padding; results are put back in input order. The model is loaded on first use. A caller's bar
    advances by ``batch_size`` documents, a few seconds on a CPU (the batch size is part of the record, since
    it changes the last bits, so it is not cut finer for the bar).
    """

    name = "minilm"
    SUMMARY = "all-MiniLM-L6-v2 transformer (~100x slower on CPU)"
    REBUILD_OPTIONS = ("max_seq_length",)
    COMMAND_FLAGS = ("batch_size", "device")
    USES_GPU = True
    dim = 384
    DEFAULT_BATCH_SIZE = 64

    def __init__(self, *, batch_size: int = DEFAULT_BATCH_SIZE, device: str = "cpu", max_seq_length: int = 256,
                 progress: bool = True) -> None:
        super().__init__(batch_size, progress)
        self.device = device
        self.max_seq_length = max_seq_length
        self._model: Any = None

    @classmethod
    def from_record(cls, run: RunDir, record: EmbedRecord, *, batch_size: int | None = None,
                    device: str = "cpu", progress: bool = False) -> EmbedderBase:
        """As recorded, with the recorded batch size unless another is given (it changes the last bits)."""
        return super().from_record(run, record, batch_size=batch_size or record.embedder_config.get("batch_size"),
                                   device=device, progress=progress)

    def config(self) -> dict[str, Any]:
        """Model id and weights checksum, pooling, truncation, batch size and device type.

        Batch size and device are included because padding and kernels change the float results in the
        last bits, and the stage promises byte-identical re-runs.
        """
        return {
            "name": self.name,
            "model": MINILM_ID,
            "weights_sha256": digest(minilm_path() / "model.safetensors"),
            "dim": self.dim,
            "max_seq_length": self.max_seq_length,
            "pooling": "mean",
            "normalize": True,
            "batch_size": self.batch_size,
            "device": self.device.split(":")[0],
        }

    def _load(self) -> Any:
        if self._model is None:
            path = minilm_path()
            set_offline()
            progress_note(f"minilm: loading {MINILM_ID} on {self.device}", self.progress)
            from sentence_transformers import SentenceTransformer

            with hf_progress(self.progress):
                self._model = SentenceTransformer(str(path), device=self.device)
            self._model.max_seq_length = self.max_seq_length
        return self._model

    def _encode_batches(self, texts: list[str]) -> Iterator[tuple[Any, ...]]:
        model = self._load()
        order = np.argsort(-np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)), kind="stable")
        for start in range(0, len(texts), self.batch_size):
            idx = order[start:start + self.batch_size]
            batch = [texts[i] for i in idx]
            vecs = model.encode(batch, batch_size=len(idx), convert_to_numpy=True,
                                normalize_embeddings=True, show_progress_bar=False)
            yield idx, np.asarray(vecs, dtype=np.float32), self._kept(model, batch)

    def _kept(self, model: Any, batch: list[str]) -> np.ndarray:
        """The share of each text's tokens that truncation to ``max_seq_length`` (with [CLS] and [SEP]) keeps."""
        ids = model.tokenizer(batch, add_special_tokens=False, truncation=False)["input_ids"]
        lengths = np.fromiter(map(len, ids), dtype=np.float64, count=len(ids))
        return np.minimum(1.0, (self.max_seq_length - 2) / np.maximum(lengths, 1.0)).astype(np.float32)
