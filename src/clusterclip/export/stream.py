"""The planned stream an export writes: plan order with repeats expanded, read from the corpus in windows.

The plan is cut into windows of whole shards whose documents' text fits ``memory_mb`` (estimated from
the corpus parts' metadata); for each window the distinct documents it draws are read from the corpus
(only the row groups that hold them), optionally tokenized (:class:`Tokenizer`) and packed into samples
of ``seq_len`` tokens (:class:`Packer`), then cut into batches of ``shard_size`` rows (:func:`rebatch`).
Memory stays bounded by the limit (the text and its copies) plus one row group and one batch, whatever the
corpus size and plan length.
Every input (plan, labels, corpus parts, ``tokens.npy``) is checksum-verified before it is read
(:meth:`PlanStream.open`).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from clusterclip.contract.cluster import CLUSTER_STAGE, LABELS, load_labels
from clusterclip.contract.corpus import CORPUS_STAGE, TOKENS, CorpusIndex, CorpusRecord
from clusterclip.contract.plan import PLAN_TIERS, PlanRecord, plan_path, plan_stage_name
from clusterclip.contract.plan_locate import resolve_plan_path
from clusterclip.contract.plan_reader import open_plan
from clusterclip.engines import ordered_map
from clusterclip.errors import ClusterClipError
from clusterclip.export import buckets as B
from clusterclip.export.chat import LOSS_MASK, ChatEncoder
from clusterclip.export.records import RecordFields, body_columns, has_conversations
from clusterclip.export.tokenizer import Tokenizer
from clusterclip.store import RunDir, StaleArtifactError, load_npy
from clusterclip.store.paths import discard, is_remote

SLICE_BYTES = 1 << 28
"""Text per table handed on from a window (256 MiB): a window's text can exceed what one Arrow ``string``
array holds (2 GiB), its slices never do."""
STRING_LIMIT = 2**31 - 1


def windows(order: np.ndarray, corpus: CorpusIndex, labels: np.ndarray, window: int,
            tokenizer: Tokenizer | ChatEncoder | None, tiers: np.ndarray | None = None) -> Iterator[pa.Table]:
    """The planned stream, one window at a time, each in slices of at most about ``SLICE_BYTES`` of text:
    ``text`` (or ``tokens`` and ``loss_mask``, or the ``record``: :func:`~.records.body_columns`), ``id``,
    ``index``, ``cluster`` (and ``tier``, for a plan over strata)."""
    for w in range(0, order.shape[0], window):
        block = np.asarray(order[w:w + window], dtype=np.int64)
        docs, where = np.unique(block, return_inverse=True)
        rows = corpus.gather(docs)
        sizes = pc.binary_length(rows.column("text")).to_numpy(zero_copy_only=False).astype(np.int64)
        source = body_columns(rows, tokenizer)
        if int(sizes.sum()) > STRING_LIMIT:  # a take over more than 2 GiB of distinct text: 64-bit offsets
            source = {n: c.cast(pa.large_string()) if pa.types.is_string(c.type) else c for n, c in source.items()}
        for a, b in _slices(sizes[where]):
            take = pa.array(where[a:b])
            body = {n: c.take(take) for n, c in source.items()}
            body = {n: c.cast(pa.string()) if pa.types.is_large_string(c.type) else c for n, c in body.items()}
            yield with_tier(pa.table({**body, "id": rows.column("id").take(take), "index": pa.array(block[a:b]),
                                      "cluster": pa.array(np.asarray(labels[block[a:b]], dtype=np.int64))}),
                            tiers, block[a:b])
        rows = source = body = None  # not held while the next window is read


def with_tier(table: pa.Table, tiers: np.ndarray | None, docs: np.ndarray) -> pa.Table:
    """``table`` with the ``tier`` column of its documents (a plan over strata; the record names the tiers)."""
    if tiers is None:
        return table
    return table.append_column("tier", pa.array(np.asarray(tiers[docs], dtype=np.int64)))


def _slices(row_bytes: np.ndarray) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` of consecutive rows holding about ``SLICE_BYTES`` of text each (one row at least)."""
    ends = np.searchsorted(np.cumsum(row_bytes), np.arange(SLICE_BYTES, int(row_bytes.sum()), SLICE_BYTES),
                           side="right")
    cuts = np.unique(np.concatenate([[0], np.maximum(ends, 1), [row_bytes.size]]))
    yield from zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True)


class Packer:
    """Cuts the concatenated token stream into samples of ``seq_len`` tokens, in stream order.

    A document that does not end at a sample boundary continues at the start of the next sample; the
    tokens left after the last full sample are dropped (``dropped``).
    """

    def __init__(self, seq_len: int) -> None:
        self.seq_len = seq_len
        self.carry: dict[str, np.ndarray] = {}
        self.dropped = 0

    def pack(self, batch: pa.Table) -> pa.Table:
        """The full samples of the stream so far (``tokens``, and a ``loss_mask`` packed alike when it has one)."""
        columns = [c for c in ("tokens", LOSS_MASK) if c in batch.column_names]
        if not self.carry:
            self.carry = {c: np.zeros(0, np.int64) for c in columns}
        out = {}
        for name in columns:
            flat = pc.list_flatten(batch.column(name)).to_numpy()
            stream = np.concatenate([self.carry[name].astype(flat.dtype), flat])
            n = stream.size // self.seq_len
            self.carry[name] = stream[n * self.seq_len:]
            offsets = pa.array(np.arange(n + 1, dtype=np.int32) * self.seq_len)
            out[name] = pa.ListArray.from_arrays(offsets, pa.array(stream[:n * self.seq_len]))
        self.dropped = int(self.carry["tokens"].size)
        return pa.table(out)


def too_much_pad(multiple: int, rows: int) -> ClusterClipError:
    """The error for a ``--pad-to-multiple`` whose pad would repeat rows more than once (beyond the plan's cap)."""
    return ClusterClipError(f"--pad-to-multiple {multiple:,} would add {(-rows) % multiple:,} pad rows to the "
                            f"stream's {rows:,}: rows would repeat more than once more, beyond the plan's cap; choose "
                            f"a multiple of at most {rows:,} rows (ranks x batch size)")


class Padder:
    """Repeats the stream's first rows after its end so that the row count is a multiple of ``multiple``
    (``--pad-to-multiple``: the pad ``DistributedSampler`` adds, made part of the export so that a loader that
    drops incomplete global batches, like litdata under several ranks, reads every planned row)."""

    def __init__(self, multiple: int) -> None:
        self.multiple = multiple
        self.head: list[pa.Table] = []
        self.kept = 0
        self.rows = 0
        self.pad = 0

    def __call__(self, tables: Iterator[pa.Table]) -> Iterator[pa.Table]:
        for table in tables:
            if self.kept < self.multiple - 1:
                part = table.slice(0, self.multiple - 1 - self.kept)
                self.head.append(part)
                self.kept += part.num_rows
            self.rows += table.num_rows
            yield table
        self.pad = (-self.rows) % self.multiple
        if self.pad > self.rows:
            raise too_much_pad(self.multiple, self.rows)
        if self.pad and self.rows:
            head = pa.concat_tables(self.head).combine_chunks()
            yield head.take(pa.array(np.arange(self.pad) % head.num_rows))


def rebatch(tables: Iterator[pa.Table], size: int) -> Iterator[pa.Table]:
    """Batches of exactly ``size`` rows (the last may be shorter), whatever the windows' sizes, each in one
    chunk (a batch whose text exceeds one Arrow array, 2 GiB, stays in several). Every batch, and the rows
    of a table left over once its batches are cut, is a copy that owns its buffers, so no batch keeps a
    whole window or bucket alive; rows still pending are never copied (that would copy a bucket once per
    batch cut from it)."""
    pending: list[pa.Table] = []
    held = 0
    for table in tables:
        pending.append(table)
        held += table.num_rows
        del table  # not held while the next table is made
        if held < size:
            continue
        joined = pa.concat_tables(pending)
        while held >= size:
            yield _owned(joined.slice(joined.num_rows - held, size))
            held -= size
        pending = [_owned(joined.slice(joined.num_rows - held))] if held else []
        del joined
    if held:
        yield _owned(pa.concat_tables(pending))


def _owned(table: pa.Table) -> pa.Table:
    """``table`` copied into one chunk of its own (left in several where its text exceeds one Arrow array)."""
    try:
        columns = [pa.concat_arrays(c.chunks) if c.num_chunks else pa.array([], c.type) for c in table.columns]
    except (pa.ArrowInvalid, pa.ArrowCapacityError):
        return table
    return pa.Table.from_arrays(columns, schema=table.schema)


BATCH_COPIES = 3
"""Copies of one batch alive at once (its rows as they come, the batch joined into one chunk, the writer's)."""
WINDOW_COPIES = 4
"""Copies of a window's text alive at once (as read, the planned rows taken from it, a batch and the writer's
buffers: 4.1x the text measured on 10^5 documents of 3.6 KB); a window holds a quarter of ``--memory-mb``."""


def window_rows(corpus: CorpusIndex, n_rows: int, memory_mb: int, shard_size: int) -> int:
    """Plan rows per window: all when the corpus text fits a window (``memory_mb / WINDOW_COPIES``), else whole
    shards that fit it."""
    limit = memory_mb * 2**20 / WINDOW_COPIES
    if corpus.text_bytes <= limit:
        return max(n_rows, 1)
    return max(1, int(limit / (corpus.text_bytes / corpus.n)) // shard_size) * shard_size


class PlanStream:
    """The verified inputs of one export (plan, corpus, labels, tokenizer) and the batches they make."""

    def __init__(self, run: RunDir, plan_name: str | None, tokenizer: str | None, append_eos: bool,
                 keep_record: bool | None = False, assistant_only: bool = False) -> None:
        """Open plan ``plan_name`` (the only plan when None) of ``run``, refusing a stale plan and checking
        the checksums of the plan, the corpus parts and the labels. ``keep_record`` (None: when the corpus holds
        conversations and no tokenizer is given) streams each document's record (:mod:`.records`); a tokenizer
        over conversations applies their chat template (:mod:`.chat`, with ``assistant_only`` its loss mask)."""
        self.run = run
        order_file = resolve_plan_path(run.root, plan_name) if plan_name else resolve_plan_path(run.root)
        self.name = order_file.parent.name
        self.record = PlanRecord.require(run, plan_stage_name(self.name), verify=True, current=True)
        corpus = CorpusRecord.require(run, verify=False)
        chats = has_conversations(corpus)
        self.keep_record = chats and tokenizer is None if keep_record is None else keep_record
        if assistant_only and not chats:
            raise ClusterClipError(f"{run.root}: --assistant-only-loss masks the prompts of conversations, and the "
                                   "corpus holds none (every token is a target): drop --assistant-only-loss")
        self.corpus = CorpusIndex(run, records=self.keep_record or (chats and tokenizer is not None))
        self.fields: RecordFields | None = None
        """Set by :meth:`typed_records`: the records' fields as typed columns (``parquet``, ``hf``)."""
        self.order = open_plan(order_file, n_docs=self.corpus.n).verified()
        self.labels = load_labels(run, mmap=True)
        if self.labels.shape != (self.corpus.n,) or not np.issubdtype(self.labels.dtype, np.integer):
            raise StaleArtifactError(f"{run.path(LABELS)}: {self.labels.dtype} {self.labels.shape} labels for a "
                                     f"corpus of {self.corpus.n} documents; rebuild them with "
                                     f"`{run.rebuild_command(CLUSTER_STAGE, force=True)}`")
        tiers = plan_path(self.name, PLAN_TIERS)
        self.tiers = load_npy(run.path(tiers), mmap=True) if tiers in self.record.artifacts else None
        """A plan over strata: each document's tier (the ``tier`` column; ``tier_labels`` names them)."""
        self.tier_labels = [t["label"] for t in self.record.stats.get("strata", {}).get("tiers", [])]
        self.tokenizer = Tokenizer(tokenizer, append_eos) if tokenizer is not None else None
        self.encoder: Tokenizer | ChatEncoder | None = self.tokenizer
        if self.tokenizer is not None and chats:
            self.encoder = ChatEncoder(self.tokenizer, assistant_only, corpus.config.text_options())
        self.plan_sha256: str = self.record.artifacts[self.record.order_file()]["sha256"]
        self.identity = self.record.order_identity()
        """The plan's identity (what ``ClusterClipSampler`` states name)."""
        self.window = 1
        self.buckets = 0
        self.packer: Packer | None = None
        self.padder: Padder | None = None

    @property
    def draws(self) -> int:
        """Planned documents (repeats expanded)."""
        return int(self.order.shape[0])

    @property
    def tokenizer_identity(self) -> dict[str, Any] | None:
        """The tokenizer's identity (over conversations, with its chat template's SHA-256)."""
        return None if self.encoder is None else self.encoder.identity

    def typed_records(self) -> list[str]:
        """Write the records' fields as typed columns (:class:`~.records.RecordFields`, inferred from the corpus);
        their names."""
        self.fields = RecordFields(self.run)
        return self.fields.names

    @property
    def token_dtype(self) -> np.dtype:
        """The dtype of token ids (``int32`` without a tokenizer, for writers that ask)."""
        return self.tokenizer.dtype if self.tokenizer is not None else np.dtype(np.int32)

    def batch_warning(self, memory_mb: int, shard_size: int) -> str | None:
        """Why a batch of ``shard_size`` rows would exceed ``memory_mb`` (a batch is held whole, up to
        ``BATCH_COPIES`` times, at the corpus's mean document), and the ``--shard-size`` that fits; else None."""
        mean = self.corpus.text_bytes / max(self.corpus.n, 1)
        held = BATCH_COPIES * min(shard_size, max(self.draws, 1)) * mean
        if held <= memory_mb * 2**20:
            return None
        fits = max(1, int(memory_mb * 2**20 / (BATCH_COPIES * max(mean, 1))))
        return (f"a batch of --shard-size {shard_size:,} rows holds about {held / BATCH_COPIES / 2**20:,.0f} MiB of "
                f"text at this corpus's mean document ({mean / 1024:,.1f} KiB), held up to {BATCH_COPIES} times: more "
                f"than --memory-mb {memory_mb:,}; --shard-size {fits:,} would fit")

    def bucketed(self, memory_mb: int) -> bool:
        """Whether the corpus text exceeds one window (``memory_mb / WINDOW_COPIES``), so the stream goes through
        buckets (:mod:`.buckets`)."""
        return self.corpus.text_bytes * WINDOW_COPIES > memory_mb * 2**20

    def estimate_bytes(self, doubled: bool, scratch: bool = False) -> int:
        """A generous estimate of the bytes the export writes: the planned documents' text (the larger of
        the corpus's mean document per draw and the plan's token count at the corpus's bytes per token) plus
        a row's fields; with a tokenizer, one token per two bytes of text; ``doubled`` (a writer that
        ``WRITES_TWICE``, ``hf``: its stream, then the saved copy) twice that; ``scratch`` adds the buckets' copy
        of the planned text and the plan's pairs."""
        corpus, run = self.corpus, self.run
        planned = self.record.stats.get("tokens")
        text = self.draws * corpus.text_bytes / max(corpus.n, 1)
        if planned and TOKENS in CorpusRecord.require(run, verify=False).artifacts:
            run.require(CORPUS_STAGE, only=[TOKENS])
            total = int(np.asarray(load_npy(run.path(TOKENS), mmap=True), dtype=np.int64).sum())
            if total > 0:
                text = max(text, planned * corpus.text_bytes / total)
        if self.tokenizer is None:
            size = text + 64 * self.draws
        else:
            size = text / 2 * self.tokenizer.dtype.itemsize + 8 * self.draws
        return int(size * (2 if doubled else 1) + (text + 48 * self.draws if scratch else 0))

    def batches(self, memory_mb: int, shard_size: int, seq_len: int | None, pad_to_multiple: int | None = None,
                scratch: Path | None = None, engine: str = "local", workers: int = 1) -> Iterator[pa.Table]:
        """The stream in batches of ``shard_size`` rows, packed into ``seq_len`` samples when given and padded
        to a multiple of ``pad_to_multiple`` rows; sets ``window`` (plan rows per corpus read), ``buckets``,
        ``packer`` and ``padder``. A corpus over ``memory_mb`` goes through buckets in ``scratch`` (one pass
        over the corpus, :mod:`clusterclip.export.buckets`, its tasks on ``engine`` with ``workers`` processes);
        without ``scratch``, through windows (a pass each)."""
        self.window = window_rows(self.corpus, self.draws, memory_mb, shard_size)
        stream: Iterator[pa.Table]
        if scratch is not None and self.bucketed(memory_mb):
            stream = self._bucketed(memory_mb, scratch, engine, workers)
        else:
            stream = windows(self.order, self.corpus, self.labels, self.window, self.encoder, self.tiers)
        self.packer = Packer(seq_len) if seq_len is not None else None
        if self.packer is not None:
            stream = map(self.packer.pack, stream)
        if pad_to_multiple is not None and seq_len is None and (-self.draws) % pad_to_multiple > self.draws:
            raise too_much_pad(pad_to_multiple, self.draws)
        self.padder = Padder(pad_to_multiple) if pad_to_multiple is not None else None
        if self.padder is not None:
            stream = self.padder(stream)
        batched = rebatch(stream, shard_size)
        return batched if self.fields is None else map(self.fields.table, batched)

    def _bucketed(self, memory_mb: int, scratch: Path, engine: str, workers: int) -> Iterator[pa.Table]:
        """The stream through buckets (:mod:`.buckets`): the scatter and gather tasks run here (one worker),
        in ``workers`` processes or on Ray; each bucket's rows get their ``index`` and ``cluster`` here."""
        parallel = engine == "ray" or workers > 1
        limit = B.bucket_bytes(memory_mb, 1 if engine == "ray" else workers)
        rows = B.bucket_rows(self.corpus.text_bytes, self.corpus.n, limit)
        scratch.mkdir(parents=True, exist_ok=True)
        units = B.partition(self.order, self.corpus.row_groups(), np.asarray(self.corpus.rg_bytes, np.float64),
                            limit, scratch)
        records = self.corpus.records
        held = list(ordered_map(B.scatter_unit, [(u, rows, str(scratch), self.corpus.rebuild, records)
                                                 for u in units], engine, workers))
        spans = B.bucket_spans(self.draws, rows)
        self.buckets = len(spans)
        fragments = B.fragments_by_bucket(held, units, len(spans), scratch)
        tok: B.Encoder = self.encoder
        if parallel and isinstance(self.encoder, ChatEncoder):
            tok = self.encoder.spec()
        elif parallel and self.tokenizer is not None:
            ident = self.tokenizer.identity
            tok = B.TokenizerSpec(ident["name"], self.tokenizer.append_eos, ident["sha256"])
        if parallel:
            calls = [(k, lo, hi, fragments[k], tok, str(scratch), records) for k, lo, hi in spans]
            tables = map(B.read_bucket, ordered_map(B.gather_to_file, calls, engine, workers))
        else:
            tables = ordered_map(B.gather_bucket, [(k, lo, hi, fragments[k], tok, records) for k, lo, hi in spans])
        try:
            for (_, lo, hi), table in zip(spans, tables, strict=True):
                block = np.asarray(self.order[lo:hi], dtype=np.int64)
                out = with_tier(table.append_column("index", pa.array(block)).append_column(
                    "cluster", pa.array(np.asarray(self.labels[block], dtype=np.int64))), self.tiers, block)
                del table
                yield out
                del out
                pa.default_memory_pool().release_unused()
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
            if is_remote(scratch):
                discard(scratch)  # what tasks on other machines sent to the store

    def stats(self) -> dict[str, Any]:
        """What the record says about the stream once it was written."""
        reads = 1 if self.buckets else -(-self.draws // self.window) if self.order.size else 0
        return {"documents": self.draws, "dropped_tokens": self.packer.dropped if self.packer is not None else 0,
                "pad_rows": self.padder.pad if self.padder is not None else 0, "corpus_reads": reads,
                "buckets": self.buckets}
