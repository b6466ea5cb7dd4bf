"""The planned stream an export writes: plan order with repeats expanded, read from the corpus in windows.

The plan is cut into windows of whole shards whose documents' text fits ``memory_mb`` (estimated from
the corpus parts' metadata); for each window the distinct documents it draws are read from the corpus
(only the row groups that hold them), optionally tokenized (:class:`Tokenizer`) and packed into samples
of ``seq_len`` tokens (:class:`Packer`), then cut into batches of ``shard_size`` rows (:func:`rebatch`).
Memory stays bounded by the limit plus one corpus part, whatever the corpus size and plan length.
Every input (plan, labels, corpus parts, ``tokens.npy``) is checksum-verified before it is read
(:meth:`PlanStream.open`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from clusterclip.cluster import load_labels
from clusterclip.corpus import corpus_parts, open_parquet
from clusterclip.errors import ClusterClipError
from clusterclip.plan.integrity import open_plan, resolve_plan_path
from clusterclip.store import RunDir, StaleArtifactError, load_npy
from clusterclip.store import layout as A

EOS_TOKENS = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", "[SEP]")


class Tokenizer:
    """A fast Hugging Face tokenizer: ids without special tokens, plus the EOS id when ``append_eos``."""

    def __init__(self, name: str, append_eos: bool) -> None:
        from tokenizers import Tokenizer as HfTokenizer

        path = Path(name)
        file = path / "tokenizer.json" if path.is_dir() else path
        if file.is_file():
            self.tok = HfTokenizer.from_file(str(file))
            eos = next((t for t in EOS_TOKENS if self.tok.token_to_id(t) is not None), None)
        else:
            from transformers import AutoTokenizer

            hf = AutoTokenizer.from_pretrained(name)
            self.tok = hf.backend_tokenizer
            eos = hf.eos_token or hf.sep_token
        # Saved tokenizers often carry a model's truncation and padding (MiniLM's: 128 tokens); an export
        # wants every token of every document.
        self.tok.no_truncation()
        self.tok.no_padding()
        self.eos = self.tok.token_to_id(eos) if eos is not None else None
        if append_eos and self.eos is None:
            raise ClusterClipError(f"tokenizer {name!r} has no EOS token ({', '.join(EOS_TOKENS)}); drop --append-eos")
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
        ids = [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=False)]
        if self.append_eos:
            ids = [[*i, self.eos] for i in ids]
        lengths = np.fromiter((len(i) for i in ids), np.int64, len(ids))
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        flat = np.fromiter((t for i in ids for t in i), self.dtype, int(offsets[-1]))
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat))


class CorpusIndex:
    """Where each document lives: the corpus parts with their row groups' first rows, from metadata."""

    def __init__(self, run: RunDir) -> None:
        self.parts = corpus_parts(run)
        if not self.parts:
            raise StaleArtifactError(f"{run.path(A.CORPUS_DIR)}: no {A.CORPUS_PART_GLOB} files; rebuild the corpus "
                                     f"with `{run.rebuild_command(A.CORPUS_STAGE, force=True)}`")
        run.require(A.CORPUS_STAGE, only=[p.relative_to(run.root).as_posix() for p in self.parts])
        self.rebuild = run.rebuild_command(A.CORPUS_STAGE, force=True)
        self.files = [open_parquet(p) for p in self.parts]
        self.rg_starts: list[np.ndarray] = []
        self.text_bytes = 0
        start = 0
        for pf in self.files:
            md = pf.metadata
            names = pf.schema_arrow.names
            cols = [names.index(c) for c in ("id", "text")]
            rows = [md.row_group(g).num_rows for g in range(md.num_row_groups)]
            self.rg_starts.append(start + np.concatenate([[0], np.cumsum(rows)]).astype(np.int64))
            self.text_bytes += sum(md.row_group(g).column(c).total_uncompressed_size
                                   for g in range(md.num_row_groups) for c in cols)
            start += sum(rows)
        self.n = start

    def gather(self, docs: np.ndarray) -> pa.Table:
        """``id`` and ``text`` of ``docs`` (sorted, distinct indices), reading only the row groups holding them."""
        tables = []
        for pf, starts in zip(self.files, self.rg_starts, strict=True):
            lo, hi = np.searchsorted(docs, [starts[0], starts[-1]])
            if lo == hi:
                continue
            mine = docs[lo:hi]
            rg = np.searchsorted(starts, mine, side="right") - 1
            groups = np.unique(rg)
            sizes = starts[groups + 1] - starts[groups]
            first = np.zeros(len(starts) - 1, np.int64)
            first[groups] = np.concatenate([[0], np.cumsum(sizes)[:-1]])
            table = pf.read_row_groups(groups.tolist(), columns=["index", "id", "text"])
            rows = table.take(pa.array(first[rg] + mine - starts[rg]))
            if not np.array_equal(rows.column("index").to_numpy(), mine):
                raise StaleArtifactError(f"{self.parts[0].parent}: rows are not in index order; rebuild the corpus "
                                         f"with `{self.rebuild}`")
            tables.append(rows.drop_columns(["index"]))
        return pa.concat_tables(tables)


def windows(order: np.ndarray, corpus: CorpusIndex, labels: np.ndarray, window: int,
            tokenizer: Tokenizer | None) -> Iterator[pa.Table]:
    """The planned stream, one window at a time: ``text`` (or ``tokens``), ``id``, ``index``, ``cluster``."""
    for w in range(0, order.shape[0], window):
        block = np.asarray(order[w:w + window], dtype=np.int64)
        docs, where = np.unique(block, return_inverse=True)
        rows = corpus.gather(docs)
        take = pa.array(where)
        if tokenizer is None:
            body = {"text": rows.column("text").take(take)}
        else:
            body = {"tokens": tokenizer.encode(rows.column("text")).take(take)}
        cluster = pa.array(np.asarray(labels[block], dtype=np.int64))
        yield pa.table({**body, "id": rows.column("id").take(take), "index": pa.array(block), "cluster": cluster})


class Packer:
    """Cuts the concatenated token stream into samples of ``seq_len`` tokens, in stream order.

    A document that does not end at a sample boundary continues at the start of the next sample; the
    tokens left after the last full sample are dropped (``dropped``).
    """

    def __init__(self, seq_len: int) -> None:
        self.seq_len = seq_len
        self.carry = np.zeros(0, np.int64)
        self.dropped = 0

    def pack(self, batch: pa.Table) -> pa.Table:
        flat = pc.list_flatten(batch.column("tokens")).to_numpy()
        stream = np.concatenate([self.carry.astype(flat.dtype), flat])
        n = stream.size // self.seq_len
        self.carry = stream[n * self.seq_len:]
        self.dropped = int(self.carry.size)
        offsets = pa.array(np.arange(n + 1, dtype=np.int32) * self.seq_len)
        return pa.table({"tokens": pa.ListArray.from_arrays(offsets, pa.array(stream[:n * self.seq_len]))})


def rebatch(tables: Iterator[pa.Table], size: int) -> Iterator[pa.Table]:
    """Batches of exactly ``size`` rows (the last may be shorter), whatever the windows' sizes."""
    pending: list[pa.Table] = []
    held = 0
    for table in tables:
        pending.append(table)
        held += table.num_rows
        while held >= size:
            joined = pa.concat_tables(pending).combine_chunks()
            yield joined.slice(0, size)
            pending, held = [joined.slice(size)], held - size
    if held:
        yield pa.concat_tables(pending).combine_chunks()


def window_rows(corpus: CorpusIndex, n_rows: int, memory_mb: int, shard_size: int) -> int:
    """Plan rows per window: all when the corpus text fits ``memory_mb``, else whole shards that fit it."""
    limit = memory_mb * 2**20
    if corpus.text_bytes <= limit:
        return max(n_rows, 1)
    return max(1, int(limit / (corpus.text_bytes / corpus.n)) // shard_size) * shard_size


class PlanStream:
    """The verified inputs of one export (plan, corpus, labels, tokenizer) and the batches they make."""

    def __init__(self, run: RunDir, plan_name: str | None, tokenizer: str | None, append_eos: bool) -> None:
        """Open plan ``plan_name`` (the only plan when None) of ``run``, refusing a stale plan and checking
        the checksums of the plan, the corpus parts and the labels."""
        self.run = run
        plan_path = resolve_plan_path(run.root, plan_name) if plan_name else resolve_plan_path(run.root)
        self.name = plan_path.parent.name
        self.record = run.require_current(A.plan_stage_name(self.name), verify=True)
        self.corpus = CorpusIndex(run)
        self.order = open_plan(plan_path, n_docs=self.corpus.n).verified()
        self.labels = load_labels(run, mmap=True)
        if self.labels.shape != (self.corpus.n,) or not np.issubdtype(self.labels.dtype, np.integer):
            raise StaleArtifactError(f"{run.path(A.LABELS)}: {self.labels.dtype} {self.labels.shape} labels for a "
                                     f"corpus of {self.corpus.n} documents; rebuild them with "
                                     f"`{run.rebuild_command(A.CLUSTER_STAGE, force=True)}`")
        self.tokenizer = Tokenizer(tokenizer, append_eos) if tokenizer is not None else None
        self.plan_sha256: str = self.record["artifacts"][A.plan_path(self.name, A.PLAN_ORDER)]["sha256"]
        self.window = 1
        self.packer: Packer | None = None

    @property
    def draws(self) -> int:
        """Planned documents (repeats expanded)."""
        return int(self.order.shape[0])

    @property
    def token_dtype(self) -> np.dtype:
        """The dtype of token ids (``int32`` without a tokenizer, for writers that ask)."""
        return self.tokenizer.dtype if self.tokenizer is not None else np.dtype(np.int32)

    def estimate_bytes(self, doubled: bool) -> int:
        """A generous estimate of the bytes the export writes: the planned documents' text (the larger of
        the corpus's mean document per draw and the plan's token count at the corpus's bytes per token) plus
        a row's fields; with a tokenizer, one token per two bytes of text; ``doubled`` (``hf``: its stream,
        then the saved copy) twice that."""
        corpus, run = self.corpus, self.run
        planned = self.record.get("stats", {}).get("tokens")
        text = self.draws * corpus.text_bytes / max(corpus.n, 1)
        if planned and A.TOKENS in run.require(A.CORPUS_STAGE, verify=False).get("artifacts", {}):
            run.require(A.CORPUS_STAGE, only=[A.TOKENS])
            total = int(np.asarray(load_npy(run.path(A.TOKENS), mmap=True), dtype=np.int64).sum())
            if total > 0:
                text = max(text, planned * corpus.text_bytes / total)
        if self.tokenizer is None:
            size = text + 64 * self.draws
        else:
            size = text / 2 * self.tokenizer.dtype.itemsize + 8 * self.draws
        return int(size * (2 if doubled else 1))

    def batches(self, memory_mb: int, shard_size: int, seq_len: int | None) -> Iterator[pa.Table]:
        """The stream in batches of ``shard_size`` rows, packed into ``seq_len`` samples when given; sets
        ``window`` (plan rows per corpus read) and ``packer``."""
        self.window = window_rows(self.corpus, self.draws, memory_mb, shard_size)
        stream: Iterator[pa.Table] = windows(self.order, self.corpus, self.labels, self.window, self.tokenizer)
        self.packer = Packer(seq_len) if seq_len is not None else None
        if self.packer is not None:
            stream = map(self.packer.pack, stream)
        return rebatch(stream, shard_size)

    def stats(self) -> dict[str, Any]:
        """What the record says about the stream once it was written."""
        return {"documents": self.draws, "dropped_tokens": self.packer.dropped if self.packer is not None else 0,
                "corpus_reads": -(-self.draws // self.window) if self.order.size else 0}
