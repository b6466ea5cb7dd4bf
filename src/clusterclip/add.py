"""``clusterclip add``: append new documents to a finished run, assign them to the frozen centroids, and
report drift.

The new documents become corpus parts after the existing ones (indices ``N..N+M-1``; old indices never
change, so existing plans stay valid for the documents they index), embedding shards after the existing
ones (same embedder, rebuilt from the embed record), and rows appended to ``tokens.npy``, ``labels.npy``
and ``scores.npy`` (assigned with :func:`clusterclip.cluster.assign`, the cluster stage's code). The
corpus, embed and cluster records are then rewritten so that every later command sees one consistent,
grown run. Memory is bounded by the new documents: old ids, tokens, labels and scores are streamed.

Crash safety: before the first existing artifact changes, ``add-journal.json`` saves the records the add
started from. A re-run of the same add finds it and redoes every step from those records (each step is
deterministic and rewrites only by atomic rename), so it ends with the bytes of an uninterrupted run; the
journal goes last. A re-run after completion finds the inputs in the corpus record and does nothing.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from clusterclip.corpus import (
    PART_ROWS,
    ReadOptions,
    ReadStats,
    expand_inputs,
    inputs_fingerprint,
    make_token_counter,
    open_parquet,
    read_unit,
    work_units,
)
from clusterclip.errors import BadRecordError, ClusterClipError
from clusterclip.settings import Settings, between, setting
from clusterclip.stages import grow_stage
from clusterclip.store import (
    RunDir,
    atomic_path,
    config_hash,
    load_json,
    load_npy,
    save_json,
    save_npy,
)
from clusterclip.store import layout as A

log = logging.getLogger(__name__)

DRIFT_PERCENTILE = 5.0
READ_FIELDS = ("text_field", "id_field", "group_field", "on_bad_record", "split")
COPY_ROWS = 1 << 16


@dataclass(frozen=True)
class AddConfig(Settings):
    """Options of ``clusterclip add`` beyond the reader options (those default to the corpus record's)."""

    drift_threshold: float = setting(
        0.10, check=between(0.0, 1.0, closed=True),
        help="recommend `cluster --refit` when more than this share of the new documents is less similar to "
             "every centroid than the 5th percentile of the existing documents (new documents like the old "
             "ones give about 0.05; 0.10 is twice that, over 3 standard errors above it from 200 documents on)")


# ------------------------------------------------------------------------------------ streamed arrays


def _npy_rows(path: Path, stop: int, chunk: int = COPY_ROWS) -> Iterator[np.ndarray]:
    """Rows ``[0, stop)`` of a 1-d ``.npy`` file in chunks, through a read-only memory map (file pages,
    never a copy of the whole array)."""
    arr = load_npy(path, mmap=True)
    if arr.ndim != 1 or arr.shape[0] < stop:
        raise ClusterClipError(f"{path}: expected a 1-d array of at least {stop} rows, got shape {arr.shape}")
    for start in range(0, stop, chunk):
        yield np.array(arr[start:min(start + chunk, stop)])


def append_npy(path: Path, keep: int, new: np.ndarray) -> None:
    """Replace the 1-d array at ``path`` by its first ``keep`` rows followed by ``new``, atomically and
    streamed; the bytes are those ``np.save`` writes for the whole array. ``path`` may already hold the
    result (a re-run after a kill): its first ``keep`` rows are the same either way."""
    new = np.ascontiguousarray(new)
    header = {"descr": np.lib.format.dtype_to_descr(new.dtype), "fortran_order": False,
              "shape": (keep + len(new),)}
    with atomic_path(path) as tmp, open(tmp, "wb") as out:
        np.lib.format.write_array_header_1_0(out, header)
        for block in _npy_rows(path, keep):
            out.write(np.ascontiguousarray(block, dtype=new.dtype).tobytes())
        out.write(new.tobytes())


def lower_percentile(path: Path, n: int, q: float) -> float:
    """``np.percentile(x, q, method="lower")`` of the first ``n`` float32 values of a ``.npy`` file, exact,
    in two streamed passes of a radix select (65,536 counters each) instead of loading the array."""
    rank = int(np.floor(q / 100.0 * (n - 1)))

    def keys() -> Iterator[np.ndarray]:
        for block in _npy_rows(path, n):
            bits = np.asarray(block, dtype=np.float32).view(np.uint32)
            yield np.where(bits >> 31, ~bits, bits | np.uint32(0x80000000))

    high = np.zeros(1 << 16, dtype=np.int64)
    for k in keys():
        high += np.bincount(k >> 16, minlength=1 << 16)
    cum = np.cumsum(high)
    hi = int(np.searchsorted(cum, rank, side="right"))
    rank -= int(cum[hi - 1]) if hi else 0
    low = np.zeros(1 << 16, dtype=np.int64)
    for k in keys():
        low += np.bincount(k[(k >> 16) == hi] & 0xFFFF, minlength=1 << 16)
    key = np.uint32((hi << 16) | int(np.searchsorted(np.cumsum(low), rank, side="right")))
    bits = key ^ np.uint32(0x80000000) if key >> 31 else ~key
    return float(np.array([bits], dtype=np.uint32).view(np.float32)[0])


# ------------------------------------------------------------------------------------------- drift


def drift_report(old_scores: Path, n_old: int, new_scores: np.ndarray, new_labels: np.ndarray,
                 old_sizes: np.ndarray, threshold: float) -> dict[str, Any]:
    """The drift statistics of an add: the share of new documents whose best cosine to any centroid is
    below the existing documents' 5th percentile (``scores.npy``), and the growth of every cluster."""
    cut = lower_percentile(old_scores, n_old, DRIFT_PERCENTILE)
    below = int(np.count_nonzero(new_scores < cut))
    share = below / max(1, len(new_scores))
    added = np.bincount(new_labels, minlength=len(old_sizes)).astype(np.int64)
    growth = added / np.maximum(old_sizes, 1)
    return {
        "documents_before": int(n_old), "documents_added": len(new_scores),
        "percentile": DRIFT_PERCENTILE, "similarity_cut": round(cut, 6), "below_cut": below,
        "drift_share": round(share, 6), "drift_threshold": threshold, "recommend_refit": share > threshold,
        "cluster_before": old_sizes.astype(int).tolist(), "cluster_added": added.tolist(),
        "cluster_growth": [round(float(g), 6) for g in growth],
    }


def format_drift(report: dict[str, Any], run: RunDir) -> str:
    """The drift report as ``clusterclip add`` prints it."""
    if report.get("already_added"):
        return (f"{', '.join(report['inputs'])}: already added to {run.root}; nothing to do "
                f"(the latest add's drift report is {run.path(A.DRIFT_REPORT)})")
    growth = np.asarray(report["cluster_growth"])
    top = np.argsort(-growth, kind="stable")[:5]
    lines = [
        f"added {report['documents_added']:,} documents to {report['documents_before']:,} in {run.root}",
        f"drift: {report['drift_share']:.1%} of the new documents are less similar to every centroid than "
        f"the 5th percentile of the existing ones (cosine {report['similarity_cut']:.4f}); threshold "
        f"{report['drift_threshold']:.0%}",
        "fastest-growing clusters: " + ", ".join(
            f"{c} (+{report['cluster_added'][c]} on {report['cluster_before'][c]}, {growth[c]:.0%})" for c in top),
    ]
    if report["recommend_refit"]:
        lines.append(f"recommendation: re-cluster with `clusterclip cluster {run.root} --refit` (then re-plan)")
    else:
        lines.append("the existing clusters still fit the new documents; no re-clustering needed")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ reading and ids


@dataclass
class _NewDocs:
    parts: list[str]
    tokens: np.ndarray
    ids: list[str]
    unit_ends: list[int]
    stats: ReadStats
    groups: Counter[str]


def _read_new(run: RunDir, base: dict[str, Any], units: Sequence[Any], opts: ReadOptions,
              progress: bool) -> _NewDocs:
    """Read the new inputs into parts after the corpus', indexed from its count."""
    from clusterclip.corpus import PartWriter
    from clusterclip.progress import progress_bar

    first_part = len(_parts(base["corpus"]))
    writer = PartWriter(run.root, lambda i: A.corpus_part(first_part + i),
                        make_token_counter(base["corpus"]["config"].get("tokenizer")), PART_ROWS,
                        first_index=int(base["corpus"]["count"]))
    stats, ids, ends = ReadStats(), [], []
    with progress_bar("add: read", "docs", enabled=progress) as bar:
        for unit in units:
            for batch in read_unit(unit, opts, stats):
                writer.add(batch)
                ids.extend(batch.ids)
                bar.update(len(batch))
            ends.append(len(ids))
    read = writer.finish(stats)
    return _NewDocs(read.parts, read.tokens, ids, ends, stats, read.groups)


def _parts(corpus_rec: dict[str, Any]) -> list[str]:
    return sorted(r for r in corpus_rec["artifacts"] if r.startswith(f"{A.CORPUS_DIR}/") and r.endswith(".parquet"))


def _located_ids(unit: Any, opts: ReadOptions) -> Iterator[tuple[str, str]]:
    """``(location, id)`` of every good record of a work unit, for error messages (re-reads the unit)."""
    from clusterclip import corpus as C

    if unit.fmt.startswith("jsonl"):
        records: Any = ((s, loc, r, C.json_document) for s, loc, r in C.jsonl_records(unit.path, unit.fmt))
    elif unit.fmt in ("parquet", "hf"):
        batches = C.parquet_batches(unit.path, opts) if unit.fmt == "parquet" else C.hf_batches(unit.path, opts)
        records = ((s, loc, r, C.record_document) for src, before, cols in batches
                   for s, loc, r in C._column_records(src, cols, before, None))
    else:
        files, root = ((unit.path,), unit.path.parent) if unit.fmt == "txt" else (unit.files, unit.path)
        records = ((s, loc, r, C.txt_document) for s, loc, r in C.txt_records(files, root))
    for source, loc, record, to_document in records:
        try:
            doc_id = to_document(record, opts, source, loc)[0]
        except BadRecordError:
            continue
        yield (f"{source}:{loc}" if loc is not None else source), doc_id


def _where_new(units: Sequence[Any], new: _NewDocs, pos: int, opts: ReadOptions) -> str:
    """File and line (or row) of the ``pos``-th new document."""
    unit_no = int(np.searchsorted(new.unit_ends, pos, side="right"))
    skip = pos - (new.unit_ends[unit_no - 1] if unit_no else 0)
    for i, (where, _) in enumerate(_located_ids(units[unit_no], opts)):
        if i == skip:
            return where
    return f"{units[unit_no].path} (document {skip + 1})"


def check_new_ids(run: RunDir, base: dict[str, Any], units: Sequence[Any], new: _NewDocs, opts: ReadOptions) -> None:
    """Refuse new ids that an existing document has (streaming the old parts' id column) or that two new
    documents share; the error names both places."""
    hint = (f"ids come from field {opts.id_field!r}" if opts.id_field else
            "ids default to FILE:LINE, so a new file named like an old one collides: rename it or use --id-field")
    first: dict[str, int] = {}
    for pos, doc_id in enumerate(new.ids):
        if doc_id in first:
            raise ClusterClipError(
                f"{_where_new(units, new, pos, opts)}: id {doc_id!r} is also the id of "
                f"{_where_new(units, new, first[doc_id], opts)} (new documents); ids must be unique ({hint})")
        first[doc_id] = pos
    values = pa.array(new.ids, pa.string())
    row0 = 0
    for rel in _parts(base["corpus"]):
        pf = open_parquet(run.path(rel))
        for rb in pf.iter_batches(batch_size=8192, columns=["id"]):
            hits = np.flatnonzero(pc.is_in(rb.column(0), value_set=values).to_numpy(zero_copy_only=False))
            if hits.size:
                doc_id = rb.column(0)[int(hits[0])].as_py()
                raise ClusterClipError(
                    f"{_where_new(units, new, first[doc_id], opts)}: id {doc_id!r} is already in the run, "
                    f"document {row0 + int(hits[0])} ({rel}); ids must be unique across old and new documents "
                    f"({hint})")
            row0 += rb.num_rows


# ---------------------------------------------------------------------------------------- the steps


def _journal(run: RunDir, key: str, inputs: Sequence[str], opts: ReadOptions) -> dict[str, Any]:
    """The journal of this add: resumed when one for the same add exists, else started from the current
    (checked) records."""
    path = run.path(A.ADD_JOURNAL)
    if path.exists():
        journal = load_json(path)
        if journal["key"] != key:
            raise ClusterClipError(
                f"{run.root}: an interrupted `clusterclip add` of {', '.join(journal['inputs'])} is pending "
                f"({A.ADD_JOURNAL}); re-run that add to finish it first")
        return journal
    for stage in A.STAGES:
        run.require(stage, verify=False)
        run.verify(stage, checksums=False)
    run.require_current(A.EMBED_STAGE, A.CORPUS_STAGE)
    run.require_current(A.CLUSTER_STAGE, A.EMBED_STAGE)
    base = {stage: run.record(stage) for stage in A.STAGES}
    return {"key": key, "inputs": list(inputs), "read": asdict(opts), "base": base,
            "sizes": load_npy(run.path(A.SIZES)).astype(int).tolist()}


def _embed_new(run: RunDir, base: dict[str, Any], new_parts: Sequence[str], n_new: int,
               progress: bool) -> list[dict[str, Any]]:
    """Embed the new documents into shards after the existing ones, with the recorded embedder."""
    from clusterclip.embed import _local_shards, run_embedder
    from clusterclip.progress import progress_bar

    rec = base["embed"]
    emb = run_embedder(run)
    if emb.config() != rec["config"]["embedder"]:
        raise ClusterClipError(f"{run.root}: cannot rebuild the embed stage's embedder ({emb.name}) with the "
                               "recorded options; embed the whole corpus again instead of adding to it")
    shard_size = int(rec["config"]["shard_size"])
    first = len(rec["shards"])
    shards = []
    with progress_bar(f"add: embed ({emb.name})", "doc", n_new, progress) as bar:
        blocks = _local_shards(emb, [run.path(p) for p in new_parts], 0, shard_size, n_new, bar)
        for i, shard in enumerate(blocks):
            rel = A.embed_shard(first + i)
            save_npy(run.path(rel), shard)
            shards.append({"file": rel, "rows": len(shard)})
    return shards


def _assign_new(run: RunDir, shards: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """Labels and cosines of the new shards against the frozen centroids (the cluster stage's code)."""
    from clusterclip.cluster import ASSIGN_BATCH, assign

    def blocks() -> Iterator[np.ndarray]:
        for s in shards:
            arr = load_npy(run.path(s["file"]), mmap=True)
            for start in range(0, len(arr), ASSIGN_BATCH):
                yield np.asarray(arr[start:start + ASSIGN_BATCH], dtype=np.float32)

    return assign(blocks(), load_npy(run.path(A.CENTROIDS)))


def _write_records(run: RunDir, journal: dict[str, Any], new: _NewDocs, shards: list[dict[str, Any]],
                   scores_new: np.ndarray, sizes: np.ndarray, seconds: float) -> None:
    """Rewrite the corpus, embed and cluster records for the grown run (metadata of untouched artifacts is
    reused), so each stage is current with the one before it."""
    base, n_old = journal["base"], int(journal["base"]["corpus"]["count"])
    corpus, embed, cluster = base["corpus"], base["embed"], base["cluster"]
    n = n_old + len(new.ids)
    entry = {"key": journal["key"], "inputs": journal["inputs"], "first_index": n_old, "count": len(new.ids),
             "parts": new.parts, "skipped": new.stats.skipped}
    groups = Counter(corpus.get("groups", {})) + new.groups
    corpus_cfg = {**corpus["config"], "added": [*corpus["config"].get("added", []),
                                                 {"inputs": journal["inputs"], "read": journal["read"]}]}
    grow_stage(run, corpus, config_hash({"base": corpus["inputs_hash"], "added": journal["key"]}),
               [*_parts(corpus), *new.parts, A.TOKENS], seconds, _untouched(corpus), (),
               config=corpus_cfg, count=n, tokens=int(corpus["tokens"]) + int(new.tokens.sum()),
               skipped=corpus["skipped"] + new.stats.skipped,
               skipped_examples=(corpus.get("skipped_examples", []) + new.stats.examples)[:ReadStats.max_examples],
               groups=dict(sorted(groups.items(), key=lambda kv: -kv[1])),
               inputs=[*corpus.get("inputs", []), *journal["fingerprint"]],
               additions=[*corpus.get("additions", []), entry])
    grow_stage(run, embed, run.output_hash(A.CORPUS_STAGE), [*embed["artifacts"], *(s["file"] for s in shards)], 0.0,
               _untouched(embed), (A.CORPUS_STAGE,), count=n, shards=[*embed["shards"], *shards])
    objective = (float(cluster["objective"]) * n_old + float(scores_new.sum(dtype=np.float64))) / n
    grow_stage(run, cluster, run.output_hash(A.EMBED_STAGE), list(cluster["artifacts"]), 0.0, _untouched(cluster),
               (A.EMBED_STAGE,), objective=objective, fit_count=int(cluster.get("fit_count", n_old)),
               size_min=int(sizes.min()), size_median=float(np.median(sizes)), size_max=int(sizes.max()))


_GROWN = (A.TOKENS, A.LABELS, A.SCORES, A.SIZES)
"""Artifacts an add rewrites: their recorded metadata is never reused (they are hashed again)."""


def _untouched(rec: dict[str, Any]) -> dict[str, Any]:
    return {rel: meta for rel, meta in rec["artifacts"].items() if rel not in _GROWN}


def add_key(resolved: Sequence[Any], opts: ReadOptions) -> tuple[str, list[dict[str, Any]]]:
    """What identifies an add: the new inputs' fingerprint (paths, sizes, mtimes) and the reader options."""
    fingerprint = inputs_fingerprint(resolved)
    return config_hash({"inputs": fingerprint, "read": asdict(opts)}), fingerprint


def add_documents(run: RunDir, inputs: Sequence[str | os.PathLike[str]], read: ReadOptions | None = None,
                  config: AddConfig | None = None, progress: bool = True, engine: str = "local") -> dict[str, Any]:
    """Append the documents of ``inputs`` to the finished run ``run`` and return the drift report.

    ``read`` defaults to the reader options the corpus stage recorded. Only ``engine="local"`` is
    supported. A re-run after completion changes nothing and returns ``{"already_added": True, ...}``; a
    re-run after a kill finishes the add. The caller holds the run-directory lock.
    """
    from clusterclip.engines import check_engine

    config = config or AddConfig()
    if check_engine(engine) != "local":
        raise ClusterClipError("clusterclip add runs on --engine local only: the Ray reader and encoder number "
                               "documents from 0, not after an existing corpus")
    if not inputs:
        raise ClusterClipError("clusterclip add needs at least one NEW_INPUT")
    corpus_rec = run.require(A.CORPUS_STAGE, verify=False)
    opts = read or ReadOptions(**{f: corpus_rec["config"][f] for f in READ_FIELDS})
    resolved = expand_inputs(inputs)
    key, fingerprint = add_key(resolved, opts)
    if not run.path(A.ADD_JOURNAL).exists() and key in {a["key"] for a in corpus_rec.get("additions", [])}:
        return {"already_added": True, "inputs": [str(p) for p in inputs]}
    journal = _journal(run, key, [str(p) for p in inputs], opts)
    journal["fingerprint"] = fingerprint
    return _add(run, journal, resolved, opts, config, progress)


def _add(run: RunDir, journal: dict[str, Any], resolved: Sequence[Any], opts: ReadOptions, config: AddConfig,
         progress: bool) -> dict[str, Any]:
    t0 = time.perf_counter()
    base, n_old = journal["base"], int(journal["base"]["corpus"]["count"])
    units = work_units(resolved)
    first_part = len(_parts(base["corpus"]))
    try:
        new = _read_new(run, base, units, opts, progress)
        if not new.ids:
            raise ClusterClipError(f"{', '.join(journal['inputs'])}: no usable documents to add")
        check_new_ids(run, base, units, new, opts)
    except ClusterClipError:
        if not run.path(A.ADD_JOURNAL).exists():
            for path in run.path(A.CORPUS_DIR).glob(A.CORPUS_PART_GLOB):
                if int(path.stem.split("-")[1]) >= first_part:
                    path.unlink()
        raise
    save_json(run.path(A.ADD_JOURNAL), journal)
    append_npy(run.path(A.TOKENS), n_old, new.tokens)
    shards = _embed_new(run, base, new.parts, len(new.ids), progress)
    labels, scores = _assign_new(run, shards)
    old_sizes = np.asarray(journal["sizes"], dtype=np.int64)
    sizes = old_sizes + np.bincount(labels, minlength=len(old_sizes))
    report = drift_report(run.path(A.SCORES), n_old, scores, labels, old_sizes, config.drift_threshold)
    append_npy(run.path(A.LABELS), n_old, labels)
    append_npy(run.path(A.SCORES), n_old, scores)
    save_npy(run.path(A.SIZES), sizes)
    _write_records(run, journal, new, shards, scores, sizes, time.perf_counter() - t0)
    save_json(run.path(A.DRIFT_REPORT), {"inputs": journal["inputs"], **report})
    run.path(A.ADD_JOURNAL).unlink()
    return load_json(run.path(A.DRIFT_REPORT))
