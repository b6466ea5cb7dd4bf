"""What an add may append, and undoing a killed one: the run's lineage of inputs (content hashes), duplicate
inputs and documents, the command that replays an add, ``add --abort`` and the note on a pending journal.

Duplicate policy (unless ``--allow-duplicates``): a new input file whose bytes are those of an input that
already entered the run (the corpus stage's or an add's, under any name) or of one of its corpus parts is
refused; a new document whose text is that of a document already in the run (or of an earlier new one) is
skipped and counted, whatever its id. A new id that an existing document has with another text stays an
error (:func:`clusterclip.add.new_docs.check_new_ids`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
import pyarrow as pa

from clusterclip.contract.cluster import LABELS, SCORES, SIZES
from clusterclip.contract.corpus import CORPUS_DIR, CORPUS_PART_GLOB, CORPUS_STAGE, TOKENS, CorpusRecord
from clusterclip.contract.corpus_texts import open_part
from clusterclip.contract.drift import DriftReport
from clusterclip.contract.embed import CONFIDENCE_GLOB, EMBED_DIR, EMBED_SHARD_GLOB
from clusterclip.contract.stages import GROWN
from clusterclip.corpus.fields import restore_fields
from clusterclip.corpus.records import ReadOptions
from clusterclip.dedup.grow import JOURNAL_KEY as DEDUP_JOURNAL_KEY
from clusterclip.dedup.grow import restore_groups
from clusterclip.errors import ClusterClipError
from clusterclip.settings import command_flags
from clusterclip.store import RUN, RunDir, load_json, save_json, save_npy
from clusterclip.store import layout as A
from clusterclip.store.npy_rows import append_npy
from clusterclip.store.record import StageRecord

READ_FIELDS = tuple(f.name for f in dataclasses.fields(ReadOptions))
"""The reader options an add reads new inputs with (default: the corpus record's), every one of ReadOptions."""


def text_hashes(texts: Sequence[str]) -> np.ndarray:
    """A 64-bit hash of each document's text (BLAKE2b of its UTF-8 bytes): what makes two documents the same."""
    return np.fromiter((int.from_bytes(hashlib.blake2b(t.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                                       "little") for t in texts), np.uint64, len(texts))


def run_text_hashes(run: RunDir, corpus: CorpusRecord) -> np.ndarray:
    """The sorted text hashes of every document of the run (its corpus parts, streamed)."""
    chunks = [text_hashes(rb.column(0).to_pylist())
              for rel in corpus.parts()
              for rb in open_part(run.path(rel)).iter_batches(batch_size=8192, columns=["text"], use_threads=False)]
    # Arrow's allocator keeps what the pass over every old text freed; hand it back, so the rest of the add
    # does not carry memory that grows with the run.
    pa.default_memory_pool().release_unused()
    return np.sort(np.concatenate(chunks)) if chunks else np.zeros(0, np.uint64)


def check_duplicate_inputs(corpus: CorpusRecord, hashed: Sequence[Mapping[str, Any]]) -> None:
    """Refuse a new input whose bytes already entered the run (an input of the corpus stage or of an add, or
    one of its corpus parts), or that another new input repeats; one line naming both."""
    where = {h: "an input of the run" for h in corpus.lineage_hashes()}
    where.update({sha: f"its corpus part {rel}" for rel in corpus.parts() if (sha := corpus.artifact_sha256(rel))})
    for entry in corpus.inputs:
        if entry.get("sha256"):
            where[entry["sha256"]] = f"{entry['path']}, an input of the run"
    for entry in hashed:
        if entry["sha256"] in where:
            raise ClusterClipError(
                f"{entry['path']}: holds the same bytes as {where[entry['sha256']]}: its documents are already in "
                "the run; nothing was added (add --allow-duplicates to append them again)")
        where[entry["sha256"]] = f"{entry['path']} (given twice)"


def add_command(inputs: Sequence[str], opts: ReadOptions, recorded: Mapping[str, Any], allow: bool) -> list[str]:
    """The ``clusterclip add`` command line that replays an add (reader options that differ from the corpus
    stage's ``recorded`` ones, as ``CorpusRecord.read_options`` gives them, with :data:`clusterclip.store.RUN` for
    the run directory)."""
    known = {f: v for f, v in recorded.items() if f in READ_FIELDS}
    flags = command_flags(ReadOptions, asdict(opts), READ_FIELDS, {**asdict(ReadOptions()), **known})
    return ["clusterclip", "add", RUN, *inputs, *flags, *(["--allow-duplicates"] if allow else [])]


def pending_note(run: RunDir) -> str | None:
    """One line when a killed ``clusterclip add`` left its journal: how to finish or undo it."""
    path = run.path(A.ADD_JOURNAL)
    if not path.is_file():
        return None
    try:
        inputs = " ".join(map(str, load_json(path)["inputs"]))
        finish = f"re-run `clusterclip add {run.root} {inputs}` to finish it, or "
    except (ClusterClipError, OSError, KeyError, TypeError):
        finish = "it is damaged: "
    return (f"{path}: an interrupted `clusterclip add` is pending; {finish}run `clusterclip add {run.root} --abort` "
            "to undo it")


def base_records(journal: Mapping[str, Any]) -> dict[str, StageRecord]:
    """The records an add started from (saved in its journal), each read as its stage's contract."""
    return {c.NAME: c.from_json(journal["base"][c.NAME], f"{A.ADD_JOURNAL}: base record {c.NAME!r}",
                                "undo the add with `clusterclip add RUN --abort`") for c in GROWN}


def abort_add(run: RunDir) -> str:
    """Undo an interrupted add: remove its new corpus parts, embedding shards and their confidence, cut ``tokens.npy``,
    ``labels.npy`` and ``scores.npy`` back to the documents before it, restore ``sizes.npy`` and the three
    records it started from, then remove the journal. A damaged journal: only the files no record lists go.
    The caller holds the lock. Returns what was done, one line."""
    path = run.path(A.ADD_JOURNAL)
    if not path.is_file():
        current = [run.record(c.NAME) for c in GROWN]  # only a finished run's unlisted files are an add's
        if None in current or not _remove_unlisted(run, [rec for rec in current if rec is not None]):
            raise ClusterClipError(f"{run.root}: no interrupted `clusterclip add` to abort ({A.ADD_JOURNAL} is "
                                   "absent, and no file of one is left)")
        return (f"{run.root}: removed the new corpus parts of an add killed before its journal; no record had "
                "changed")
    try:
        journal = load_json(path)
        base = {contract.NAME: dict(journal["base"][contract.NAME]) for contract in GROWN}
    except (ClusterClipError, OSError, KeyError, TypeError):
        base = {contract.NAME: run.record(contract.NAME) or {"artifacts": {}} for contract in GROWN}
        journal = None
    _remove_unlisted(run, base.values())
    groups = ""
    if journal is not None:
        _restore(run, journal, base)
        if journal.get(DEDUP_JOURNAL_KEY):
            groups = f"; duplicate groups {restore_groups(run, journal[DEDUP_JOURNAL_KEY])}"
    path.unlink()
    return (f"{run.root}: undid the interrupted add of {' '.join(map(str, journal['inputs']))}{groups}" if journal else
            f"{run.root}: removed a damaged add journal and the files no record lists; check `clusterclip status "
            f"{run.root} --verify`")


def _remove_unlisted(run: RunDir, records: Iterable[Mapping[str, Any]]) -> int:
    """Remove the corpus parts, embedding shards and confidence shards none of ``records`` lists (an add's new
    files); how many went."""
    listed = {rel for rec in records for rel in rec.get("artifacts", {})}
    removed = 0
    for folder, glob in ((CORPUS_DIR, CORPUS_PART_GLOB), (EMBED_DIR, EMBED_SHARD_GLOB), (EMBED_DIR, CONFIDENCE_GLOB)):
        for part in run.path(folder).glob(glob):
            if f"{folder}/{part.name}" not in listed:
                part.unlink()
                removed += 1
    return removed


def _restore(run: RunDir, journal: Mapping[str, Any], base: Mapping[str, dict[str, Any]]) -> None:
    """Cut the grown arrays back, restore ``sizes.npy`` and rewrite the base records (times refreshed for the
    files whose bytes are the recorded ones)."""
    n_old = int(base[CORPUS_STAGE]["count"])
    restore_fields(run, base[CORPUS_STAGE].get("fields") or {}, n_old)
    for rel in (TOKENS, LABELS, SCORES):
        with contextlib.suppress(OSError, ValueError, ClusterClipError):
            dtype = np.load(run.path(rel), mmap_mode="r", allow_pickle=False).dtype
            append_npy(run.path(rel), n_old, np.zeros(0, dtype))
    with contextlib.suppress(OSError, ValueError):
        sizes = np.asarray(journal["sizes"], dtype=np.load(run.path(SIZES), mmap_mode="r").dtype)
        save_npy(run.path(SIZES), sizes)
    for stage, rec in base.items():
        run.adopt_times(rec)
        save_json(run.record_path(stage), rec)
    drift = run.path(A.DRIFT_REPORT)
    with contextlib.suppress(OSError, ClusterClipError, KeyError, TypeError):
        if DriftReport.read(drift).inputs == journal["inputs"]:
            drift.unlink()
