"""The ``embed`` stage: corpus parts in, float16 shards of unit vectors out, resumable shard by shard."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.contract.corpus import CORPUS_STAGE, CorpusRecord, corpus_parts, count_rows
from clusterclip.contract.corpus_texts import Parts, TextReader, sample_texts
from clusterclip.contract.embed import (
    CONFIDENCE_COLUMNS,
    CONFIDENCE_GLOB,
    EMBED_DIR,
    EMBED_PROGRESS,
    EMBED_SHARD_GLOB,
    EMBED_STAGE,
    EmbedRecord,
    confidence_shard,
    embed_shard,
    shards_confidence,
)
from clusterclip.embed.base import Embedder, FittedEmbedder, confidence_of
from clusterclip.embed.config import EmbedConfig
from clusterclip.embed.registry import fitted_embedders, get_embedder
from clusterclip.errors import ClusterClipError, disk_full_at
from clusterclip.progress import progress_bar
from clusterclip.stages import Built, Job, Stage, run_stage
from clusterclip.store import RunDir, file_digest, load_json, save_json, save_npy

CHUNKS_PER_CALL = 16
"""Encoder batches per ``encode`` call: the stage encodes chunks of ``CHUNKS_PER_CALL`` x the batch size."""


def _reusable_shards(run: RunDir, progress: Any, job: Job, shard_size: int, n_docs: int) -> list[dict[str, Any]]:
    """Leading shards listed in the progress file that match this build's config and inputs and are intact
    (checked by checksum: their bytes become part of the stage's output)."""
    if not isinstance(progress, dict) or progress.get("config_hash") != job.config_hash \
            or progress.get("inputs_hash") != job.inputs_hash:
        return []
    done: list[dict[str, Any]] = []
    for i, entry in enumerate(progress.get("shards", [])):
        rel, conf = embed_shard(i), confidence_shard(i)
        if entry.get("file") != rel or entry.get("rows") != min(shard_size, n_docs - i * shard_size) \
                or entry.get("confidence") != conf or not _intact(run, rel, entry.get("sha256")) \
                or not _intact(run, conf, entry.get("confidence_sha256")):
            break
        done.append(entry)
    return done


def _intact(run: RunDir, rel: str, sha256: Any) -> bool:
    path = run.path(rel)
    return path.is_file() and file_digest(path) == sha256


def _start_progress(run: RunDir, job: Job, shard_size: int, n_docs: int) -> dict[str, Any]:
    """The progress file of this build, written at once: the shards reusable from an interrupted build of
    the same config and corpus (none when forced)."""
    path = run.path(EMBED_PROGRESS)
    path.parent.mkdir(parents=True, exist_ok=True)
    previous = None
    if not job.force and path.exists():
        with contextlib.suppress(ValueError, OSError):
            previous = load_json(path)
    state = {"config_hash": job.config_hash, "inputs_hash": job.inputs_hash, "shard_size": shard_size,
             "shards": _reusable_shards(run, previous, job, shard_size, n_docs)}
    if state["shards"] and isinstance(previous, dict) and isinstance(previous.get("model"), dict):
        state["model"] = previous["model"]
    save_json(path, state)
    return state


def _chunk_rows(emb: Embedder, shard_size: int) -> int:
    """Texts per encode call: fixed chunks from each shard's start, so results do not depend on resumes."""
    return min(shard_size, CHUNKS_PER_CALL * int(getattr(emb, "batch_size", 1024)))


def _encode_checked(emb: Embedder, texts: list[str],
                    on_rows: Callable[[int], Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``emb``'s vectors and confidence of ``texts`` (``on_rows``: each encoder batch's row count, for the bar);
    a wrong shape or a non-finite value (a foreign embedder) is an error."""
    vecs, conf = confidence_of(emb, texts, on_rows)
    if vecs.shape != (len(texts), emb.dim) or not np.isfinite(vecs).all() or not np.isfinite(conf).all():
        raise ClusterClipError(f"embedder {emb.name!r} returned shape {vecs.shape} or non-finite "
                               f"values for {len(texts)} texts (expected dim {emb.dim})")
    return vecs, conf


Shard = tuple[np.ndarray, np.ndarray]
"""A shard's float16 vectors and its float32 confidence (``[rows, 2]``)."""


def encode_shards(emb: Embedder, parts: Sequence[Path], first_shard: int, shard_size: int, n_docs: int,
                  bar: Any, texts: Parts | None = None) -> Iterator[Shard]:
    """Encode the shards from ``first_shard`` on in this process (``shard_size`` rows but the last); ``bar``
    advances with every encoder batch; ``texts``: the part of each conversation embedded (``--embed-part``)."""
    chunk_rows = _chunk_rows(emb, shard_size)
    reader = TextReader(parts, first_shard * shard_size, parts=texts)
    for start in range(first_shard * shard_size, n_docs, shard_size):
        rows = min(shard_size, n_docs - start)
        shard = np.empty((rows, emb.dim), dtype=np.float16)
        conf = np.empty((rows, len(CONFIDENCE_COLUMNS)), dtype=np.float32)
        for off in range(0, rows, chunk_rows):
            texts = reader.take(min(chunk_rows, rows - off))
            shard[off:off + len(texts)], conf[off:off + len(texts)] = _encode_checked(emb, texts, bar.update)
        yield shard, conf


def _ray_shards(emb: Embedder, parts: Sequence[Path], first_shard: int, shard_size: int, n_docs: int,
                bar: Any) -> Iterator[Shard]:
    """Encode the shards from ``first_shard`` on with Ray Data actors (same bytes as :func:`encode_shards`)."""
    from clusterclip.engines import ray_embed_shards

    for rows in ray_embed_shards(parts, first_shard * shard_size, n_docs, shard_size, emb,
                                 batch_rows=_chunk_rows(emb, shard_size)):
        bar.update(len(rows))
        yield np.ascontiguousarray(rows[:, :emb.dim], dtype=np.float16), np.ascontiguousarray(rows[:, emb.dim:])


def embed_stage(
    run: RunDir,
    config: EmbedConfig | None = None,
    *,
    embedder: Embedder | None = None,
    force: bool = False,
    progress: bool = True,
    engine: str = "local",
    command: Sequence[str] = (),
) -> EmbedRecord:
    """Embed every corpus document into ``embeddings/shard-NNNNN.npy`` and write the ``embed`` record.

    Shards hold ``config.shard_size`` float16 unit-norm rows (the last one fewer), in document order. The stage
    is skipped when its record is fresh (same config, same corpus, intact shards) unless ``force``. It
    resumes after a kill: ``embeddings/progress.json`` lists finished shards with their checksums, and
    shards that match the current config and corpus are reused. Texts are encoded in fixed chunks that
    start at shard boundaries, so the result does not depend on where a run resumed. The embedder is the one
    ``config`` names (built with its ``batch_size``, ``device`` and ``extra`` options), or ``embedder``, an
    :class:`Embedder` instance (then only ``config.shard_size`` is used). ``engine="ray"`` encodes on Ray Data
    actors (:mod:`clusterclip.engines`; the name is validated where the session opens,
    :class:`clusterclip.engines.EngineConfig`) with the same result; the engine is not part of the config, so
    switching engines does not re-run a finished stage. Memory is bounded by one shard; the build runs under
    the run directory's lock. Returns the record.
    """
    config = config or EmbedConfig()
    emb = embedder if embedder is not None else get_embedder(
        config.embedder, batch_size=config.batch_size, device=config.device, progress=progress, **config.extra)
    shard_size = config.shard_size
    inputs_hash = run.output_hash(CORPUS_STAGE)
    # the part joins the settings only when it is not the default, so runs embedded before it stay fresh
    cfg = {"embedder": emb.config(), "shard_size": shard_size,
           **({"part": config.embed_part} if config.embed_part != "all" else {})}
    model = cfg["embedder"].get("model", emb.name)
    corpus = CorpusRecord.require(run, verify=False)
    texts = Parts(config.embed_part, corpus.config.text_options())
    if not texts.whole and engine == "ray":
        raise ClusterClipError(f"--embed-part {config.embed_part} reads the records of the corpus parts, which the "
                               "ray engine's reader does not: embed with --engine local")
    stage = Stage(EMBED_STAGE, cfg, inputs_hash, reads={CORPUS_STAGE: None},
                  build=lambda job: _build_embeddings(run, emb, model, shard_size, engine, progress, job, texts),
                  command=command or corpus.command or (), record=EmbedRecord)
    with disk_full_at(run.path(EMBED_DIR), kept="finished shards are kept and the next run resumes after them"):
        return run_stage(run, stage, force)


def _build_embeddings(run: RunDir, emb: Embedder, model: str, shard_size: int, engine: str, progress: bool,
                      job: Job, texts: Parts) -> Built:
    """Encode every shard not reusable from an interrupted build, listing each in the progress file as
    soon as it is in place; remove shards of an earlier, longer corpus."""
    parts = corpus_parts(run)
    n_docs = count_rows(parts)
    state = _start_progress(run, job, shard_size, n_docs)
    model_files = _fit_model(run, emb, parts, n_docs, state, texts) if isinstance(emb, FittedEmbedder) else []
    model = getattr(emb, "model_name", None) or model
    done = state["shards"]
    first = len(done)
    bar = progress_bar(f"embed ({emb.name}, {engine})", "doc", n_docs, progress, initial=first * shard_size)
    shards = _ray_shards(emb, parts, first, shard_size, n_docs, bar) if engine == "ray" else \
        encode_shards(emb, parts, first, shard_size, n_docs, bar, texts)
    with bar:
        for s, (shard, conf) in zip(range(first, -(-n_docs // shard_size)), shards, strict=True):
            done.append(write_shard(run, s, shard, conf))
            save_json(run.path(EMBED_PROGRESS), state)
    files = [f for d in done for f in (d["file"], d["confidence"])]
    for glob in (EMBED_SHARD_GLOB, CONFIDENCE_GLOB):
        for p in run.path(EMBED_DIR).glob(glob):
            if f"{EMBED_DIR}/{p.name}" not in files:
                p.unlink()
    for cls in fitted_embedders():
        if not (model_files and isinstance(emb, cls)):
            shutil.rmtree(run.path(cls.MODEL_DIR), ignore_errors=True)
    shards = [{k: d[k] for k in ("file", "rows", "confidence")} for d in done]
    summary = shards_confidence(run, shards)
    return Built(files + model_files, dict(embedder=emb.name, model=model, dim=emb.dim, dtype="float16", engine=engine,
                                           count=n_docs, shards=shards, confidence=summary))


def write_shard(run: RunDir, i: int, shard: np.ndarray, conf: np.ndarray) -> dict[str, Any]:
    """Save shard ``i`` and its confidence; their progress entry (files, rows, checksums)."""
    rel, crel = embed_shard(i), confidence_shard(i)
    save_npy(run.path(rel), shard)
    save_npy(run.path(crel), np.ascontiguousarray(conf, dtype=np.float32))
    return {"file": rel, "rows": len(shard), "sha256": file_digest(run.path(rel)), "confidence": crel,
            "confidence_sha256": file_digest(run.path(crel))}


def _fit_model(run: RunDir, emb: FittedEmbedder, parts: Sequence[Path], n_docs: int,
               state: dict[str, Any], texts: Parts) -> list[str]:
    """Fit ``emb`` on a seeded sample of the corpus and save it under its ``MODEL_DIR`` (or, when resuming,
    load the model the reused shards were made with); returns the model's files for the stage record."""
    rels = [f"{emb.MODEL_DIR}/{f}" for f in emb.MODEL_FILES]
    kept = state.get("model")
    if isinstance(kept, dict) and set(kept) == set(rels) and all(
            run.path(r).is_file() and file_digest(run.path(r)) == kept[r] for r in rels):
        emb.adopt(type(emb).load(run.path(emb.MODEL_DIR)))  # type: ignore[arg-type]
        return rels
    if n_docs < 2:
        raise ClusterClipError(f"the {emb.name} embedder needs at least 2 documents to fit, the corpus has {n_docs}")
    emb.fit(sample_texts(parts, n_docs, emb.sample_size, emb.seed, texts))
    emb.save(run.path(emb.MODEL_DIR))
    state["shards"] = []
    state["model"] = {r: file_digest(run.path(r)) for r in rels}
    save_json(run.path(EMBED_PROGRESS), state)
    return rels
