"""The documents of an add: read into corpus parts after the existing ones, and their ids checked against
the run's and each other's."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from clusterclip.add.drift import duplicates_note
from clusterclip.add.lineage import text_hashes
from clusterclip.contract.corpus import CORPUS_DIR, CORPUS_PART_GLOB, CorpusRecord, corpus_part
from clusterclip.contract.corpus_texts import open_part
from clusterclip.corpus.grow import NewDocs
from clusterclip.corpus.inputs import WorkUnit
from clusterclip.corpus.limits import PART_ROWS
from clusterclip.corpus.parts import PartWriter
from clusterclip.corpus.quality import SCORERS
from clusterclip.corpus.reading import located_documents, read_unit
from clusterclip.corpus.records import DocBatch, ReadOptions, ReadStats
from clusterclip.corpus.tokens import make_token_counter
from clusterclip.errors import BadRecordError, ClusterClipError
from clusterclip.progress import progress_bar
from clusterclip.settings import option
from clusterclip.store import RunDir
from clusterclip.store import layout as A


def read_new_documents(run: RunDir, journal: Mapping[str, Any], base: CorpusRecord, units: Sequence[WorkUnit],
                       opts: ReadOptions, progress: bool, known: np.ndarray | None = None) -> NewDocs:
    """Read the new inputs into corpus parts after the run's and check their ids; documents whose text hash
    is in ``known`` (sorted; the run's) or repeats an earlier new one are skipped and counted (``None``:
    keep all). On a refusal before the add started (no journal yet) the new parts are removed again."""
    first_part = len(base.parts())
    try:
        new = _read_new(run, base, units, opts, progress, known)
        if not new.ids:
            raise ClusterClipError(
                f"{', '.join(journal['inputs'])}: no usable documents to add" + (
                    f": all {new.duplicates} are duplicates ({duplicates_note(new.duplicates, new.duplicates_within)}"
                    "); add --allow-duplicates to append them" if new.duplicates else ""))
        check_new_ids(run, base, units, new, opts)
    except ClusterClipError:
        if not run.path(A.ADD_JOURNAL).exists():
            for path in run.path(CORPUS_DIR).glob(CORPUS_PART_GLOB):
                if int(path.stem.split("-")[1]) >= first_part:
                    path.unlink()
        raise
    return new


def _read_new(run: RunDir, base: CorpusRecord, units: Sequence[WorkUnit], opts: ReadOptions,
              progress: bool, known: np.ndarray | None) -> NewDocs:
    """Read the new inputs into parts after the corpus', indexed from its count, skipping known texts."""
    first_part = len(base.parts())
    writer = PartWriter(run.root, lambda i: corpus_part(first_part + i),
                        make_token_counter(base.config.tokenizer), PART_ROWS, first_index=base.count,
                        field_names=opts.field_names, scorer=SCORERS.get(base.config.quality_scorer or ""))
    stats, ids, ends, pos, seen, n_read, within, kinds = ReadStats(), [], [], [], set(), 0, 0, Counter()
    with progress_bar("add: read", "docs", enabled=progress) as bar:
        for unit in units:
            for batch in read_unit(unit, opts, stats):
                keep, repeated = _unseen(batch, known, seen)
                within += repeated
                kept = _kept(batch, keep)
                kinds.update(kept.kinds or {"text": len(kept)})
                writer.add(kept)
                ids.extend(kept.ids)
                pos.extend(n_read + i for i in kept.read)
                n_read += len(batch)
                bar.update(len(batch))
            ends.append(n_read)
    stats.kinds = kinds  # the documents kept, not those skipped as already in the run
    read = writer.finish(stats)
    return NewDocs(read.parts, read.tokens, ids, ends, stats, read.groups, np.asarray(pos, np.int64),
                   n_read - len(ids), within)


@dataclass
class _Kept(DocBatch):
    read: list[int] = field(default_factory=list)
    """The positions in the batch read of the documents kept."""


def _kept(batch: DocBatch, keep: list[int]) -> _Kept:
    """The documents ``keep`` of ``batch``, with their fields and, for conversations, their records and kinds."""
    whole = len(batch.records) == len(batch)
    return _Kept([batch.ids[i] for i in keep], [batch.texts[i] for i in keep], [batch.groups[i] for i in keep],
                 [batch.fields[i] for i in keep], [batch.records[i] for i in keep] if whole else [],
                 [batch.kinds[i] for i in keep] if whole else [], keep)


def _unseen(batch: DocBatch, known: np.ndarray | None, seen: set[int]) -> tuple[list[int], int]:
    """Positions in ``batch`` of the documents to keep: all without ``known``, else those whose text hash is
    neither in ``known`` nor in ``seen`` (the new texts so far, updated); and how many were skipped as repeats of
    a new text (not in ``known``)."""
    if known is None:
        return list(range(len(batch))), 0
    hashes = text_hashes(batch.texts)
    old = np.zeros(len(hashes), bool) if not known.size else \
        known[np.minimum(np.searchsorted(known, hashes), known.size - 1)] == hashes
    keep, repeated = [], 0
    for i, h in enumerate(hashes.tolist()):
        if old[i]:
            continue
        if h in seen:
            repeated += 1
            continue
        seen.add(h)
        keep.append(i)
    return keep, repeated


def _where_new(units: Sequence[WorkUnit], new: NewDocs, pos: int, opts: ReadOptions) -> str:
    """File and line (or row) of the ``pos``-th new document (its unit is read again, for the message)."""
    pos = int(new.read_pos[pos])
    unit_no = int(np.searchsorted(new.unit_ends, pos, side="right"))
    skip = pos - (new.unit_ends[unit_no - 1] if unit_no else 0)
    good = 0
    for (source, loc, record), to_document in located_documents(units[unit_no], opts):
        try:
            to_document(record, opts, source, loc)
        except BadRecordError:
            continue
        if good == skip:
            return f"{source}:{loc}" if loc is not None else source
        good += 1
    return f"{units[unit_no].path} (document {skip + 1})"


def check_new_ids(run: RunDir, base: CorpusRecord, units: Sequence[WorkUnit], new: NewDocs,
                  opts: ReadOptions) -> None:
    """Refuse new ids that an existing document has (streaming the old parts' id column) or that two new
    documents share; the error names both places."""
    hint = (f"ids come from field {opts.id_field!r}" if opts.id_field else
            "ids default to FILE:LINE, so a new file named like an old one collides: set "
            f"{option(type(opts), 'id_field')} (a copy of an input under another name is refused as a duplicate)")
    first: dict[str, int] = {}
    for pos, doc_id in enumerate(new.ids):
        if doc_id in first:
            raise ClusterClipError(
                f"{_where_new(units, new, pos, opts)}: id {doc_id!r} is also the id of "
                f"{_where_new(units, new, first[doc_id], opts)} (new documents); ids must be unique ({hint})")
        first[doc_id] = pos
    values = pa.array(new.ids, pa.string())
    row0 = 0
    for rel in base.parts():
        pf = open_part(run.path(rel))
        for rb in pf.iter_batches(batch_size=8192, columns=["id"]):
            hits = np.flatnonzero(pc.is_in(rb.column(0), value_set=values).to_numpy(zero_copy_only=False))
            if hits.size:
                doc_id = rb.column(0)[int(hits[0])].as_py()
                raise ClusterClipError(
                    f"{_where_new(units, new, first[doc_id], opts)}: id {doc_id!r} is already in the run, "
                    f"document {row0 + int(hits[0])} ({rel}); ids must be unique across old and new documents "
                    f"({hint})")
            row0 += rb.num_rows
