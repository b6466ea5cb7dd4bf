"""``clusterclip export --blend``: one Megatron source per cluster (per stratum), and the plan's mixture as a blend.

For trainers that blend sources themselves instead of reading the planned stream. Each cluster with planned
tokens becomes one source ``cluster-NNNNN.bin``/``.idx`` (the existing Megatron writer, one per cluster)
holding each document the plan may draw once, in corpus order: every document of the cluster, or under
``--duplicates drop`` only the kept representatives. A plan over strata has one source per stratum,
``cluster-NNNNN-tier-TTT`` (the tier's index; the record names its label), and leaves out the tiers it never
draws (rate 0): a blend cannot say "draw this tier four times as often" inside one source.

Beside them, :mod:`clusterclip.mixture.blend` writes the
blend: ``megatron_data_path.txt`` (Megatron-LM ``--data-path`` weight/prefix lines) and
``olmo_source_mixture.json`` (an OLMo-core 3.0 source mixture whose token files are the ``.bin`` files
themselves: OLMo-core memory-maps headerless token arrays, and a Megatron ``.bin`` is exactly that; the dtype
is in the record, ``blend.olmo_dtype``).

The weights are the plan's realised token mixture in the export tokenizer's tokens: cluster ``c``'s share
of ``sum(draws[d] * tokens[d])`` over the planned draws. Each source's repetition is its planned tokens over
its own tokens (its average repetition); OLMo-core's limit is that, raised to its minimum of 1. Neither
trainer enforces the plan's per-document cap. Sources are written ``MAX_OPEN`` at a time, each group in one
pass over the corpus windows that hold its documents (memory: one window of text and its tokens, about 26
bytes per document).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from clusterclip.contract.dedup import load_groups
from clusterclip.errors import ClusterClipError
from clusterclip.export.publish import ExportFolder
from clusterclip.export.stream import PlanStream, window_rows
from clusterclip.export.writers.megatron import MegatronWriter
from clusterclip.mixture.blend import write_blend
from clusterclip.store import StaleArtifactError

MAX_OPEN = 256
"""Sources written at once (each holds an open file); more clusters take one more pass over the corpus each."""
SOURCE = "cluster-{:05d}"
"""A source's Megatron prefix (and OLMo-core source name): its cluster id, five digits."""
SOURCE_TIER = "cluster-{:05d}-tier-{:03d}"
"""A stratum's source: its cluster and tier index."""
DATA_PATH = "megatron_data_path.txt"
OLMO_CONFIG = "olmo_source_mixture.json"


def olmo_dtype(token_dtype: np.dtype) -> np.dtype:
    """The dtype OLMo-core reads the ``.bin`` files with: ``uint16``, or ``uint32`` for ``int32`` ids (same
    bytes, ids are never negative); OLMo-core reads unsigned types only."""
    return np.dtype(np.uint16 if np.dtype(token_dtype).itemsize == 2 else np.uint32)


def drawable(src: PlanStream) -> np.ndarray:
    """Which documents the plan may draw (bool per document): all, or the kept representatives of its
    duplicate groups under ``--duplicates drop``, and not those of a tier it never draws (rate 0)."""
    mask = np.ones(src.corpus.n, bool)
    if src.record.config.dedup == "drop":
        _, kept = load_groups(src.run)
        mask[:] = False
        mask[np.asarray(kept, np.int64)] = True
    if src.tiers is not None:
        rates = np.array([t["rate"] for t in src.record.stats["strata"]["tiers"]], np.float64)
        mask &= rates[np.asarray(src.tiers, np.int64)] > 0
    return mask


def source_keys(src: PlanStream) -> tuple[np.ndarray, dict[int, tuple[str, dict[str, Any]]]]:
    """The source of each document (its cluster, or its stratum: cluster x tiers + tier) and, per key, the
    source's prefix and what the record says of it."""
    labels = np.array(src.labels, np.int64)
    if src.tiers is None:
        return labels, {c: (SOURCE.format(c), {"cluster": c}) for c in np.unique(labels).tolist()}
    t = len(src.tier_labels)
    keys = labels * t + np.asarray(src.tiers, np.int64)
    names = {}
    for key in np.unique(keys).tolist():
        c, tier = divmod(key, t)
        names[key] = (SOURCE_TIER.format(c, tier), {"cluster": c, "tier": src.tier_labels[tier]})
    return keys, names


def estimate_bytes(src: PlanStream, documents: int) -> int:
    """A generous estimate of the sources' size: their text at one token per two bytes, plus 16 bytes per
    document (the ``.idx`` entries)."""
    text = src.corpus.text_bytes * documents / max(src.corpus.n, 1)
    return int(text / 2 * src.token_dtype.itemsize + 16 * documents)


def shares(amounts: np.ndarray) -> list[float]:
    """``amounts`` over their total, the last one ``1.0 - sum(the others)``, so that Python's ``sum`` of them in
    order is exactly 1.0 (OLMo-core releases check ``sum(target_ratio) != 1.0`` exactly); it differs from its
    exact share by the others' rounding error, about 1e-16 per share."""
    w = (np.asarray(amounts, np.float64) / float(np.sum(amounts))).tolist()
    w[-1] = 1.0 - sum(w[:-1])
    return w


class Tally:
    """Per source (cluster, or stratum): the planned draws, the documents and tokens written, the planned tokens,
    the most draws of one document; ``names``: each source's prefix and what the record says of it."""

    def __init__(self, labels: np.ndarray, counts: np.ndarray, k: int) -> None:
        self.counts = counts
        self.draws = np.bincount(labels, weights=counts, minlength=k).astype(np.int64)
        self.documents = np.zeros(k, np.int64)
        self.tokens = np.zeros(k, np.int64)
        self.planned = np.zeros(k, np.int64)
        self.top = np.zeros(k, np.int64)
        np.maximum.at(self.top, labels, counts)
        self.reads = 0
        self.names: dict[int, tuple[str, dict[str, Any]]] = {}

    def add(self, docs: np.ndarray, labels: np.ndarray, lengths: np.ndarray) -> None:
        k = self.tokens.size
        self.documents += np.bincount(labels, minlength=k)
        self.tokens += np.bincount(labels, weights=lengths, minlength=k).astype(np.int64)
        self.planned += np.bincount(labels, weights=lengths * self.counts[docs], minlength=k).astype(np.int64)


def _write_group(src: PlanStream, folder: ExportFolder, clusters: np.ndarray, docs: np.ndarray,
                 tally: Tally, window: int, keys: np.ndarray, names: dict[int, tuple[str, dict[str, Any]]]) -> None:
    """Write the sources ``clusters`` (source keys) from their documents ``docs`` (ascending), a window at a time."""
    assert src.tokenizer is not None
    writers = {int(c): MegatronWriter(folder.staging, src.token_dtype, prefix=names[int(c)][0]) for c in clusters}
    for w in range(0, docs.size, window):
        chunk = docs[w:w + window]
        rows = src.corpus.gather(chunk)
        tokens = src.tokenizer.encode(rows.column("text"))
        labels = keys[chunk]
        tally.add(chunk, labels, pc.list_value_length(tokens).to_numpy(zero_copy_only=False).astype(np.int64))
        by_cluster = np.argsort(labels, kind="stable")  # stable: corpus order inside each cluster
        table = pa.table({"tokens": tokens}).take(pa.array(by_cluster))
        grouped = labels[by_cluster]
        cuts = np.flatnonzero(np.diff(grouped, prepend=-1, append=-1))
        for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
            writers[int(grouped[a])].write(table.slice(a, b - a))
        tally.reads += 1
    for writer in writers.values():
        writer.close()


def write_sources(src: PlanStream, folder: ExportFolder, memory_mb: int, shard_size: int) -> Tally:
    """Write one source per cluster with planned draws into the staging folder; the tally says what went in."""
    keys, names = source_keys(src)
    labels = keys.copy()  # marked below
    k = int(labels.max(initial=-1)) + 1
    counts = np.bincount(np.asarray(src.order, np.int64), minlength=src.corpus.n)
    mask = drawable(src)
    if counts[~mask].any():
        bad = int(np.flatnonzero(counts * ~mask)[0])
        raise StaleArtifactError(f"plan {src.name!r} draws document {bad}, which its duplicate groups do not keep; "
                                 f"re-plan it (`{src.run.rebuild_command(src.record.stage, force=True)}`)")
    tally = Tally(labels, counts, k)
    sources = np.flatnonzero(tally.draws > 0)
    labels[~mask] = -1  # in place: what is left to write, per document
    for g in range(0, sources.size, MAX_OPEN):
        group = sources[g:g + MAX_OPEN]
        docs = np.flatnonzero(np.isin(labels, group))
        _write_group(src, folder, group, docs, tally, window_rows(src.corpus, docs.size, memory_mb, shard_size),
                     keys, names)
    tally.names = names
    return tally


def blend_record(src: PlanStream, folder: ExportFolder, tally: Tally) -> dict[str, Any]:
    """Write the blend files beside the sources (removing sources whose planned documents hold no token) and
    return what ``export.json`` says about them."""
    out = folder.out.absolute()
    used = np.flatnonzero(tally.planned > 0)
    for c in np.flatnonzero((tally.draws > 0) & (tally.planned == 0)):
        for suffix in (".bin", ".idx"):
            (folder.staging / (tally.names[int(c)][0] + suffix)).unlink()
    if not used.size:
        raise ClusterClipError("--blend: the plan's documents hold no token: nothing to blend")
    total = int(tally.planned.sum())
    names = {int(c): tally.names[int(c)][0] for c in used}
    weights = dict(zip(names.values(), shares(tally.planned[used]), strict=True))
    repetition = {names[c]: int(tally.planned[c]) / int(tally.tokens[c]) for c in names}
    dtype = olmo_dtype(src.token_dtype)
    write_blend(folder.staging, weights, {n: str(out / n) for n in names.values()},
                {n: [str(out / f"{n}.bin")] for n in names.values()},
                max_repetition={n: max(1.0, r) for n, r in repetition.items()}, max_tokens=total, layout="source_list")
    sources = [{**tally.names[c][1], "prefix": n, "documents": int(tally.documents[c]), "tokens": int(tally.tokens[c]),
                "planned_draws": int(tally.draws[c]), "planned_tokens": int(tally.planned[c]),
                "weight": weights[n], "repetition": repetition[n], "max_repeat_observed": int(tally.top[c])}
               for c, n in names.items()]
    empty = [int(c) for c in np.flatnonzero(tally.planned == 0) if src.tiers is None or int(c) in tally.names]
    omitted = [{**tally.names.get(c, ("", {"cluster": c}))[1], "planned_draws": int(tally.draws[c]),
                "reason": "no planned draws" if tally.draws[c] == 0 else "its planned documents hold no token"}
               for c in empty]
    return {"sources": sources, "omitted": omitted, "planned_tokens": total,
            "max_repeat": src.record.config.max_repeat,
            "token_dtype": src.token_dtype.name, "olmo_dtype": dtype.name,
            "megatron_data_path": DATA_PATH, "olmo_source_mixture": OLMO_CONFIG}


def write_blend_export(src: PlanStream, folder: ExportFolder, memory_mb: int, shard_size: int) -> dict[str, Any]:
    """Write the sources and the blend into the staging folder; the record's counts and ``blend`` section."""
    if any(c.isspace() for c in str(folder.out.absolute())):
        raise ClusterClipError(f"{folder.out}: --blend writes its absolute path into {DATA_PATH}, whose entries "
                               "Megatron splits at whitespace: choose a --dest without spaces")
    tally = write_sources(src, folder, memory_mb, shard_size)
    blend = blend_record(src, folder, tally)
    written = int(sum(s["documents"] for s in blend["sources"]))
    return {"rows": written, "columns": ["tokens"], "documents": src.draws, "dropped_tokens": 0, "pad_rows": 0,
            "corpus_reads": tally.reads, "buckets": 0, "blend": blend}
