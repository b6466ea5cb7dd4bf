"""How the corpus stage grows when ``clusterclip add`` appends documents: new parts after the existing ones
(written by the add's reader), token counts appended, and the record rewritten, listing the add."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from clusterclip.contract.corpus import CORPUS_STAGE, TOKENS, CorpusRecord, field_files
from clusterclip.corpus.records import ReadStats
from clusterclip.stages import grow_stage
from clusterclip.stages.growth import Growth
from clusterclip.store import RunDir, config_hash
from clusterclip.store.lineage import REGROW


@dataclass
class NewDocs:
    """What reading an add's inputs wrote and counted: the new parts (run-relative), token counts and ids;
    ``unit_ends[u]``: documents read up to work unit ``u`` (kept or not), ``read_pos[i]``: the position among
    those of the ``i``-th kept document, ``duplicates``: documents skipped because their text is already in the
    run or earlier in the new inputs (``duplicates_within``: the latter)."""

    parts: list[str]
    tokens: np.ndarray
    ids: list[str]
    unit_ends: list[int]
    stats: ReadStats
    groups: Counter[str]
    read_pos: np.ndarray
    duplicates: int = 0
    duplicates_within: int = 0
    fields: dict[str, dict[str, Any]] | None = None


def grow_corpus_record(run: RunDir, growth: Growth) -> CorpusRecord:
    """Rewrite the corpus record for the new parts and tokens (``tokens.npy`` already grown); the add is listed
    in ``additions`` (what it read, from its journal, and where its documents start) and its inputs and reader
    options in the config's ``added``."""
    base, journal, new = growth.base[CORPUS_STAGE], growth.journal, growth.new
    assert isinstance(base, CorpusRecord)
    entry = {"key": journal["key"], "inputs": journal["inputs"], "input_hashes": journal["input_hashes"],
             "command": journal["command"], "cluster_command": journal["base"]["cluster"].get("command"),
             "first_index": base.count, "count": len(new.ids), "parts": new.parts,
             "skipped": new.stats.skipped, "duplicates_skipped": new.duplicates,
             "duplicates_within": new.duplicates_within}
    groups = Counter(base.groups) + new.groups
    config = base.config.with_added({"inputs": journal["inputs"], "read": journal["read"]})
    kept = [rel for name in (base.fields or {}) for rel in field_files(name)]
    known = {rel: meta for rel, meta in base.artifacts.items() if rel != TOKENS and rel not in kept}
    return grow_stage(
        run, base, config_hash({"base": base.inputs_hash, "added": journal["key"]}),
        [*base.parts(), *new.parts, TOKENS, *kept], growth.seconds, known, (), config=config,
        count=base.count + len(new.ids), tokens=base.tokens + int(new.tokens.sum()),
        skipped=base.skipped + new.stats.skipped,
        skipped_examples=(base.skipped_examples + new.stats.examples)[:ReadStats.max_examples],
        groups=dict(sorted(groups.items(), key=lambda kv: -kv[1])),
        inputs=[*base.inputs, *journal["fingerprint"]],
        additions=[*(base.additions or []), entry], regrow=[*(base.regrow or []), journal["command"]],
        **({"fields": new.fields} if base.fields else {}), **_kinds(base, new))


def _kinds(base: CorpusRecord, new: NewDocs) -> dict[str, Any]:
    """The record's ``kinds`` after the add: the documents of each record kind, when some are conversations."""
    kinds = Counter(base.kinds or {"text": base.count}) + new.stats.kinds
    return {"kinds": dict(kinds)} if set(kinds) - {"text"} else {}


__all__ = ["REGROW", "NewDocs", "grow_corpus_record"]
