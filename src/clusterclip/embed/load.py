"""The embedder a finished embed stage used (:func:`run_embedder`), rebuilt from its record."""

from __future__ import annotations

from clusterclip.contract.embed import EmbedRecord
from clusterclip.embed.base import Embedder
from clusterclip.embed.registry import embedder_class
from clusterclip.store import RunDir


def run_embedder(run: RunDir, *, batch_size: int | None = None, device: str = "cpu",
                 progress: bool = False) -> Embedder:
    """The embedder a finished embed stage used, ready to embed new documents the same way (``add``).

    Built from the record's config by the embedder's class (:meth:`EmbedderBase.from_record
    <clusterclip.embed.base.EmbedderBase.from_record>`); a fitted model is loaded from the run directory
    after its checksums are verified, so a missing or edited model is a clear error instead of other vectors.
    """
    rec = EmbedRecord.require(run, verify=False)
    name = rec.embedder_config.get("name", rec.embedder)
    return embedder_class(str(name)).from_record(run, rec, batch_size=batch_size, device=device, progress=progress)
