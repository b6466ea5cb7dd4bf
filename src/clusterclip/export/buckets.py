"""The planned stream of a corpus larger than ``--memory-mb``: one pass over the corpus, in parallel tasks.

Reading the plan window by window re-reads, for every window, the row groups its documents live in; a
plan in random order touches nearly all of them, so an export cost about ``draws / window`` passes over the
corpus. Here the corpus is read **once**, in three steps, each a set of independent tasks that run in this
process, in worker processes or as Ray tasks (:func:`clusterclip.engines.ordered_map`):

1. :func:`partition` (the driver): one streaming pass over the plan sends every ``(document, position)`` pair to
   the *unit* (a run of consecutive row groups holding about one bucket of planned text) that holds the
   document, in a scratch file per unit. The driver holds one chunk of the plan, never its inverse.
2. :func:`scatter_unit` (a task per unit): reads the unit's row groups, takes each planned copy and writes
   them grouped by *bucket* (``bucket_rows`` consecutive plan positions) into one Arrow IPC file.
3. :func:`gather_bucket` (a task per bucket, handed on in plan order): reads its rows from every unit file,
   sorts them by position, checks it holds exactly its positions, and tokenizes them when asked.

Each corpus byte is read once and written once more to scratch. Memory per task: one unit or bucket of
text (:func:`bucket_rows`) up to ``HELD_COPIES`` times; on the driver, one chunk of the plan. A scratch folder in
object storage (a working copy, :mod:`clusterclip.store.replica`) is how tasks on machines that share no disk hand
each other these files: each is sent to the store once written and fetched by the task that reads it.
"""

from __future__ import annotations

import functools
import itertools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from clusterclip.contract.corpus import RowGroup, in_index_order, row_columns, with_records
from clusterclip.contract.corpus_texts import open_part
from clusterclip.errors import ClusterClipError
from clusterclip.export.chat import ChatEncoder, ChatSpec
from clusterclip.export.records import RECORD, body_columns
from clusterclip.export.tokenizer import Tokenizer
from clusterclip.store.paths import discard
from clusterclip.store.replica import ensure_local, local_path, published

BUCKET_BYTES = 1 << 30
"""The most text one bucket or unit holds (1 GiB): within one Arrow ``string`` array, however large
``--memory-mb``."""
SCHEMA = pa.schema([("position", pa.int64()), ("id", pa.string()), ("text", pa.string())])
RECORD_SCHEMA = SCHEMA.append(pa.field(RECORD, pa.string()))
"""A scratch file's columns; with the records of conversations (``--keep-record``, a chat template), also them."""
HELD_COPIES = 3
"""Copies of a bucket alive at once in a task (as read, sorted, joined into one chunk)."""
PLAN_CHUNK = 1 << 22
"""Plan positions the driver routes at a time (:func:`partition`): 64 MiB of pairs."""
STRING_LIMIT = 2**31 - 1
PAIR_BYTES = 24
"""What a scatter task holds per planned copy besides its text: the ``(document, position)`` pair and its sort."""


def bucket_bytes(memory_mb: int, workers: int) -> int:
    """Text per bucket and per unit: ``memory_mb`` shared by ``workers`` tasks, each holding ``HELD_COPIES``
    copies, and at most ``BUCKET_BYTES``."""
    return max(1, min(memory_mb * 2**20 // (HELD_COPIES * max(workers, 1)), BUCKET_BYTES))


def bucket_rows(text_bytes: int, n_docs: int, limit: int) -> int:
    """Plan positions per bucket: as many as hold ``limit`` bytes at the corpus's mean document."""
    return max(1, int(limit / max(text_bytes / max(n_docs, 1), 1)))


@dataclass(frozen=True)
class Unit:
    """A scatter task's work: consecutive row groups and the scratch file of their planned pairs."""

    number: int
    groups: tuple[RowGroup, ...]
    pairs: str


def partition(order: np.ndarray, groups: list[RowGroup], group_bytes: np.ndarray, limit: int,
              scratch: Path, chunk: int = PLAN_CHUNK) -> list[Unit]:
    """Cut the row groups into units of about ``limit`` planned bytes (a row group's bytes per document plus
    ``PAIR_BYTES``, times its draws) and spill each unit's ``(document, position)`` pairs, positions increasing, to
    ``scratch/pairs-NNNNNN.bin``: two passes over ``order``, ``chunk`` positions at a time. Units that no
    plan position draws from are left out."""
    starts = np.array([g.start for g in groups] + [groups[-1].stop], np.int64)
    draws = np.zeros(len(groups), np.int64)
    for a in range(0, order.shape[0], chunk):
        draws += np.bincount(_group_of(starts, order[a:a + chunk]), minlength=len(groups))
    planned = (group_bytes / np.maximum(np.diff(starts), 1) + PAIR_BYTES) * draws
    _, unit_of = np.unique((np.cumsum(planned) - planned) // limit, return_inverse=True)
    bounds = np.searchsorted(unit_of, np.arange(int(unit_of.max()) + 2)).tolist()  # unit_of never decreases
    units = [Unit(u, tuple(groups[a:b]), str(scratch / f"pairs-{u:06d}.bin"))
             for u, (a, b) in enumerate(itertools.pairwise(bounds))]
    for u in units:
        Path(u.pairs).write_bytes(b"")
    for a in range(0, order.shape[0], chunk):
        docs = np.asarray(order[a:a + chunk], dtype=np.int64)
        unit = unit_of[_group_of(starts, docs)]
        grouped = np.argsort(unit, kind="stable")
        pairs = np.stack([docs[grouped], a + grouped], axis=1)
        cuts = np.flatnonzero(np.diff(unit[grouped], prepend=-1))
        for lo, hi in zip(cuts.tolist(), [*cuts[1:].tolist(), grouped.size], strict=True):
            with open(units[int(unit[grouped[lo]])].pairs, "ab") as f:
                f.write(pairs[lo:hi].tobytes())  # a short write raises with its errno (tofile: none)
    drawn = [u for u in units if os.path.getsize(u.pairs)]
    for u in drawn:
        published(u.pairs)
    return drawn


def _group_of(starts: np.ndarray, docs: np.ndarray) -> np.ndarray:
    return np.searchsorted(starts, docs, side="right") - 1


def scatter_unit(unit: Unit, rows: int, scratch: str, rebuild: str,
                 records: bool = False) -> list[tuple[int, int, int]]:
    """Write the unit's planned copies (with ``records``, their ``record`` too), grouped by bucket, to
    ``scratch/unit-NNNNNN.arrow``; returns ``(bucket, first batch, batches)`` for each bucket it holds."""
    schema = RECORD_SCHEMA if records else SCHEMA
    pairs = np.fromfile(ensure_local(unit.pairs), dtype=np.int64).reshape(-1, 2)
    by_doc = np.argsort(pairs[:, 0], kind="stable")  # positions stay increasing within a document
    docs, positions = pairs[by_doc, 0], pairs[by_doc, 1]
    del pairs, by_doc
    tables = []
    files: dict[str, pq.ParquetFile] = {}
    for g in unit.groups:
        lo, hi = np.searchsorted(docs, [g.start, g.stop])
        if lo == hi:
            continue
        if g.path not in files:
            files = {g.path: open_part(g.path)}  # a unit's row groups run through each part in order
        pf = files[g.path]
        table = in_index_order(with_records(pf.read_row_group(g.group, columns=row_columns(pf, records)), records),
                               np.arange(g.start, g.stop), Path(g.path).parent, rebuild)
        tables.append(table.take(pa.array(docs[lo:hi] - g.start)))
    taken = pa.concat_tables(tables)
    text = taken.column("text")
    if int(pc.sum(pc.binary_length(text)).as_py() or 0) > STRING_LIMIT:
        text = text.cast(pa.large_string())  # a take over 2 GiB of text needs 64-bit offsets
    bucket = positions // rows
    grouped = pa.array(np.argsort(bucket, kind="stable"))
    kept = {RECORD: taken.column(RECORD)} if records else {}
    out = pa.table({"position": positions, "id": taken.column("id"), "text": text, **kept}).take(grouped)
    del taken, tables, text
    bucket = bucket[grouped.to_numpy()]
    cuts = np.flatnonzero(np.diff(bucket, prepend=-1, append=-1))
    held: list[tuple[int, int, int]] = []
    batches = 0
    path = local_path(Path(scratch) / f"unit-{unit.number:06d}.arrow")
    with pa.ipc.new_file(str(path), schema) as writer:
        for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
            part = out.slice(a, b - a).cast(schema).to_batches()
            for batch in part:
                writer.write_batch(batch)
            held.append((int(bucket[a]), batches, len(part)))
            batches += len(part)
    published(path)
    discard(unit.pairs)
    return held


@dataclass(frozen=True)
class TokenizerSpec:
    """What a task needs to load the export's tokenizer itself, and the SHA-256 it must have."""

    name: str
    append_eos: bool
    sha256: str


@functools.lru_cache(maxsize=2)
def _encoder(spec: ChatSpec) -> ChatEncoder:
    """The chat encoder of ``spec`` in a worker (its tokenizer checked as the export's)."""
    return ChatEncoder(_tokenizer(TokenizerSpec(spec.name, spec.append_eos, spec.sha256)), spec.assistant_only,
                       dict(spec.options))


Encoder = Tokenizer | TokenizerSpec | ChatEncoder | ChatSpec | None
"""What tokenizes a bucket: an encoder, or (in a worker) the spec it is loaded from; None: text."""


@functools.lru_cache(maxsize=2)
def _tokenizer(spec: TokenizerSpec) -> Tokenizer:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one task per core: no thread pool inside
    tok = Tokenizer(spec.name, spec.append_eos)
    if tok.identity["sha256"] != spec.sha256:
        raise ClusterClipError(f"--tokenizer {spec.name!r} differs on this node (SHA-256 {tok.identity['sha256']}, "
                               f"the export's is {spec.sha256}): every node must see the same tokenizer")
    return tok


def gather_bucket(k: int, lo: int, hi: int, fragments: list[tuple[str, int, int]], tokenizer: Encoder,
                  records: bool = False) -> pa.Table:
    """Bucket ``k`` (plan positions ``lo..hi-1``) in plan order: ``text`` (or ``tokens``, or the ``record``) and
    ``id``, from the ``(unit file, first batch, batches)`` fragments that hold it; refused unless it holds exactly
    them."""
    batches = []
    for path, first, count in fragments:
        with pa.memory_map(str(ensure_local(path))) as source:
            reader = pa.ipc.open_file(source)
            batches.extend(reader.get_batch(i) for i in range(first, first + count))
    table = pa.Table.from_batches(batches, RECORD_SCHEMA if records else SCHEMA)
    del batches
    positions = table.column("position").to_numpy()
    sort = np.argsort(positions, kind="stable")
    if not np.array_equal(positions[sort], np.arange(lo, hi)):
        raise ClusterClipError(f"export: bucket {k} holds {positions.size} rows, not plan positions "
                               f"{lo}..{hi - 1} (the corpus parts and the plan disagree)")
    table = table.take(pa.array(sort)).combine_chunks()
    if isinstance(tokenizer, TokenizerSpec):
        tokenizer = _tokenizer(tokenizer)
    elif isinstance(tokenizer, ChatSpec):
        tokenizer = _encoder(tokenizer)
    return pa.table({**body_columns(table, tokenizer), "id": table.column("id")})


def gather_to_file(k: int, lo: int, hi: int, fragments: list[tuple[str, int, int]],
                   tokenizer: TokenizerSpec | ChatSpec | None, scratch: str, records: bool = False) -> str:
    """:func:`gather_bucket` in a worker: the bucket written to ``scratch/bucket-NNNNNN.arrow``, its path
    returned (the driver memory-maps it instead of receiving it)."""
    table = gather_bucket(k, lo, hi, fragments, tokenizer, records)
    path = local_path(Path(scratch) / f"bucket-{k:06d}.arrow")
    with pa.ipc.new_file(str(path), table.schema) as writer:
        writer.write_table(table)
    published(path)
    return str(path)


def read_bucket(path: str) -> pa.Table:
    """The bucket a worker wrote (memory-mapped: page cache, not this process's memory), deleted once read."""
    with pa.memory_map(str(ensure_local(path))) as source:
        table = pa.ipc.open_file(source).read_all()
    discard(path)
    return table


def fragments_by_bucket(held: list[list[tuple[int, int, int]]], units: list[Unit], n_buckets: int,
                        scratch: Path) -> list[list[tuple[str, int, int]]]:
    """For each bucket, the ``(unit file, first batch, batches)`` holding its rows, from the scatter's results."""
    out: list[list[tuple[str, int, int]]] = [[] for _ in range(n_buckets)]
    for unit, rows in zip(units, held, strict=True):
        for k, first, count in rows:
            out[k].append((str(scratch / f"unit-{unit.number:06d}.arrow"), first, count))
    return out


def bucket_spans(draws: int, rows: int) -> list[tuple[int, int, int]]:
    """``(bucket, first position, last position + 1)`` of every bucket of ``rows`` positions."""
    return [(k, lo, min(lo + rows, draws)) for k, lo in enumerate(range(0, draws, rows))]

