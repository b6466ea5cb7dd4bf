"""What a finished embed stage left: the embedder it used (:func:`run_embedder`) and its vectors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.embed.base import Embedder
from clusterclip.embed.registry import FITTED_EMBEDDERS, get_embedder
from clusterclip.errors import ClusterClipError
from clusterclip.store import RunDir, load_npy
from clusterclip.store import layout as A


def run_embedder(run: RunDir, *, batch_size: int | None = None, device: str = "cpu",
                 progress: bool = False) -> Embedder:
    """The embedder a finished embed stage used, ready to embed new documents the same way (``add``).

    Built from the record's config; for ``lsa`` and ``static-vocab`` the fitted model is loaded from the run
    directory after its checksums are verified, so a missing or edited model is a clear error instead of
    other vectors.
    """
    rec = run.require(A.EMBED_STAGE, verify=False)
    cfg = dict(rec["config"]["embedder"])
    name = cfg.pop("name", rec.get("embedder"))
    fitted_cls = {c.name: c for c in FITTED_EMBEDDERS}.get(str(name))
    if fitted_cls is not None:
        rels = [f"{fitted_cls.MODEL_DIR}/{f}" for f in fitted_cls.MODEL_FILES]
        missing = [r for r in rels if r not in rec.get("artifacts", {}) or not run.path(r).is_file()]
        if missing:
            raise ClusterClipError(f"{run.root}: fitted {name} model missing ({', '.join(missing)}); re-run "
                                   "`clusterclip embed --force`")
        run.verify(A.EMBED_STAGE, rec, only=rels)
        emb = fitted_cls.load(run.path(fitted_cls.MODEL_DIR),
                              batch_size=batch_size or fitted_cls.DEFAULT_BATCH_SIZE, progress=progress)
        if emb.config() != rec["config"]["embedder"]:
            raise ClusterClipError(f"{run.path(fitted_cls.MODEL_DIR)}: fitted model options differ from the embed "
                                   "record")
        return emb
    keys = {"static": ("dim", "max_length", "vocab_limit"), "hashing": ("dim", "seed", "n_features"),
            "minilm": ("max_seq_length",)}.get(str(name), ())
    opts = {k: cfg[k] for k in keys if k in cfg}
    if name == "minilm":
        batch_size = batch_size or cfg.get("batch_size")
    return get_embedder(str(name), batch_size=batch_size, device=device, progress=progress, **opts)


def _embed_shards(run: RunDir, verify: bool) -> tuple[dict[str, Any], list[tuple[Path, int]]]:
    rec = run.require(A.EMBED_STAGE, verify=verify)
    shards = [(run.path(s["file"]), int(s["rows"])) for s in rec.get("shards", [])]
    if sum(r for _, r in shards) != rec["count"]:
        raise ClusterClipError(f"{run.record_path(A.EMBED_STAGE)}: shard rows do not add up to count; re-run `embed`")
    return rec, shards


def _load_shard(path: Path, rows: int, dim: int, mmap: bool) -> np.ndarray:
    arr = load_npy(path, mmap=mmap)
    if arr.shape != (rows, dim):
        raise ClusterClipError(f"{path}: shape {arr.shape}, expected {(rows, dim)}; re-run `embed`")
    return arr


def load_embeddings(run: RunDir, dtype: Any = np.float32, verify: bool = True) -> np.ndarray:
    """All embeddings as one ``[count, dim]`` array (float32 by default), artifacts verified first."""
    rec, shards = _embed_shards(run, verify)
    out = np.empty((rec["count"], rec["dim"]), dtype=dtype)
    pos = 0
    for path, rows in shards:
        out[pos:pos + rows] = _load_shard(path, rows, rec["dim"], mmap=True)
        pos += rows
    return out


def gather_embeddings(run: RunDir, rows: np.ndarray, verify: bool = True) -> np.ndarray:
    """Float32 embeddings of the documents ``rows`` (sorted indices), read from memory-mapped shards."""
    rec, shards = _embed_shards(run, verify)
    out = np.empty((len(rows), rec["dim"]), dtype=np.float32)
    start = 0
    for path, n in shards:
        lo, hi = np.searchsorted(rows, [start, start + n])
        if hi > lo:
            out[lo:hi] = _load_shard(path, n, rec["dim"], mmap=True)[rows[lo:hi] - start]
        start += n
    return out


def iter_embeddings(run: RunDir, batch_rows: int = 65536, verify: bool = True) -> Iterator[np.ndarray]:
    """Yield float32 blocks of ``batch_rows`` rows (the last one fewer) in document order.

    Shards are memory-mapped, so memory stays bounded by one block whatever the corpus size.
    """
    if batch_rows < 1:
        raise ClusterClipError(f"batch_rows must be >= 1, got {batch_rows}")
    rec, shards = _embed_shards(run, verify)
    pending: list[np.ndarray] = []
    have = 0
    for path, rows in shards:
        arr = _load_shard(path, rows, rec["dim"], mmap=True)
        pos = 0
        while pos < rows:
            take = min(batch_rows - have, rows - pos)
            pending.append(np.asarray(arr[pos:pos + take], dtype=np.float32))
            have += take
            pos += take
            if have == batch_rows:
                yield pending[0] if len(pending) == 1 else np.concatenate(pending)
                pending, have = [], 0
    if have:
        yield pending[0] if len(pending) == 1 else np.concatenate(pending)
