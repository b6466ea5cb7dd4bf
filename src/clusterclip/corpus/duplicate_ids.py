"""Duplicate document ids: counted from the spilled id hashes (:mod:`clusterclip.corpus.id_spill`), and the first
repeat named with where both copies are."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from clusterclip.corpus.config import CorpusConfig
from clusterclip.corpus.default_corpus import DEFAULT_CORPUS
from clusterclip.corpus.inputs import Inputs, work_units
from clusterclip.corpus.parts import WrittenParts
from clusterclip.corpus.reading import located_documents
from clusterclip.corpus.records import ReadOptions
from clusterclip.errors import BadRecordError, ClusterClipError
from clusterclip.settings import option
from clusterclip.store import RunDir

log = logging.getLogger(__name__)


def check_duplicate_ids(run: RunDir, read: WrittenParts, inputs: Inputs | None, config: CorpusConfig) -> int:
    """The number of duplicate ids; with ``id_field`` set, the first repeat raises (``on_bad_record="error"``,
    naming where both copies are in ``inputs``, None: the default corpus) or is logged (kept)."""
    if read.ids is None:
        raise ValueError("check_duplicate_ids needs the id hashes spilled by the reader (WrittenParts.ids)")
    duplicates, pair = read.ids.duplicates()
    if not duplicates or config.id_field is None or pair is None:
        return duplicates
    first, second = pair
    doc_id = _ids_at(run, read, (first,))[0]
    msg = f"{duplicates} duplicate ids in field {config.id_field!r}"
    if config.on_bad_record == "error":
        where = _document_locations(inputs.files, config, (first, second)) if inputs is not None else {}
        at = [where.get(i, f"document {i}") for i in (first, second)]
        named = ", ".join(map(str, inputs.given)) if inputs is not None else DEFAULT_CORPUS
        raise ClusterClipError(f"{named}: {msg}, the first {doc_id!r} at "
                               f"{at[0]} and again at {at[1]}; ids must be unique (or set "
                               f"{option(type(config), 'on_bad_record')} to skip to keep them, counted)")
    log.warning("corpus: %s, the first %r (kept)", msg, doc_id)
    return duplicates


def _ids_at(run: RunDir, read: WrittenParts, indices: Sequence[int]) -> list[str]:
    """The ids of documents ``indices`` as written in the corpus parts of ``read``."""
    ends = np.cumsum(read.part_sizes)
    out = []
    for i in indices:
        part = int(np.searchsorted(ends, i, side="right"))
        row = i - (int(ends[part - 1]) if part else 0)
        out.append(pq.read_table(run.path(read.parts[part]), columns=["id"]).column(0)[row].as_py())
    return out


def _document_locations(inputs: Sequence[tuple[Path, str]], opts: ReadOptions,
                        indices: Sequence[int]) -> dict[int, str]:
    """``FILE:LINE`` (or ``FILE:ROW``, or the file) of the documents at ``indices``, found by reading the inputs
    again up to the last of them, under the same bad-record policy: only for error messages, so that the
    reading that writes the corpus keeps no per-document locations."""
    wanted, found, n = set(indices), {}, 0
    last = max(indices)
    for unit in work_units(inputs):
        for (source, loc, record), to_document in located_documents(unit, opts):
            try:
                to_document(record, opts, source, loc)
            except BadRecordError:
                continue
            if n in wanted:
                found[n] = source if loc is None else f"{source}:{loc}"
            if n == last:
                return found
            n += 1
    return found
