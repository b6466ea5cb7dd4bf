"""The steps of ``clusterclip add`` in order, under its journal (``add-journal.json``)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.add.drift import Coverage, Neighbourhood, drift_report, neighbourhood, reference_rows
from clusterclip.add.lineage import READ_FIELDS, add_command, base_records, check_duplicate_inputs, run_text_hashes
from clusterclip.add.new_docs import read_new_documents
from clusterclip.cluster.grow import grow_clusters
from clusterclip.contract.cluster import CLUSTER_STAGE, LABELS, SCORES, SIZES
from clusterclip.contract.corpus import CORPUS_STAGE, TOKENS, CorpusRecord
from clusterclip.contract.dedup import DEDUP_STAGE, DedupRecord
from clusterclip.contract.drift import DriftReport
from clusterclip.contract.embed import EMBED_STAGE, EmbedRecord, gather_embeddings
from clusterclip.contract.stages import GROWN
from clusterclip.corpus.fields import build_fields
from clusterclip.corpus.inputs import content_hashes, expand_inputs, inputs_fingerprint, work_units
from clusterclip.corpus.records import ReadOptions
from clusterclip.dedup.grow import JOURNAL_KEY as DEDUP_JOURNAL_KEY
from clusterclip.dedup.grow import extendable
from clusterclip.embed.grow import embed_new
from clusterclip.engines import check_engine
from clusterclip.errors import ClusterClipError
from clusterclip.settings import Settings, between, setting
from clusterclip.stage_table import TABLE
from clusterclip.stages.growth import Growth
from clusterclip.store import RunDir, config_hash, load_json, load_npy, save_json
from clusterclip.store import layout as A
from clusterclip.store.npy_rows import append_npy

__all__ = ["READ_FIELDS", "AddConfig", "add_documents", "add_key"]


@dataclass(frozen=True)
class AddConfig(Settings):
    """Options of ``clusterclip add`` beyond the reader options (those default to the corpus record's)."""

    drift_threshold: float = setting(
        0.10, check=between(0.0, 1.0, closed=True),
        help="recommend `cluster --refit` when more than this share of the new documents is new: less similar to "
             "every centroid, or to their nearest existing documents, than all but 5 %% of the existing documents, "
             "or barely seen by the embedder; documents like the old ones give 0.02-0.10 (docs/workflows.md)")
    allow_duplicates: bool = setting(
        False, help="append the documents even when an input's bytes already entered the run (under any name) "
                    "or a document's text is already in it (default: such an input is refused and such "
                    "documents are skipped and counted)")


def add_key(resolved: Sequence[tuple[Path, str]], opts: ReadOptions,
            known: Sequence[dict[str, Any]] = ()) -> tuple[str, list[dict[str, Any]]]:
    """What identifies an add: the new inputs' contents (SHA-256 of each file, in order; not their names or
    times, so a moved or rewritten input is the same add) and the reader options. Returns the key and the
    inputs' fingerprint with their hashes (``known``: recorded entries whose hashes are reused)."""
    hashed = content_hashes(inputs_fingerprint(resolved), known)
    return config_hash({"inputs": [e["sha256"] for e in hashed], "read": asdict(opts)}), hashed


def add_documents(run: RunDir, inputs: Sequence[str | os.PathLike[str]], read: ReadOptions | None = None,
                  config: AddConfig | None = None, progress: bool = True, engine: str = "local") -> dict[str, Any]:
    """Append the documents of ``inputs`` to the finished run ``run`` and return the drift report.

    ``read`` defaults to the reader options the corpus stage recorded. Only ``engine="local"`` is
    supported. A re-run after completion changes nothing and returns ``{"already_added": True, ...}``; a
    re-run after a kill finishes the add. The caller holds the run-directory lock.
    """
    config = config or AddConfig()
    if check_engine(engine) != "local":
        raise ClusterClipError("clusterclip add runs on --engine local only: the Ray reader and encoder number "
                               "documents from 0, not after an existing corpus")
    if not inputs:
        raise ClusterClipError("clusterclip add needs at least one NEW_INPUT")
    corpus = CorpusRecord.require(run, verify=False)
    opts = read or ReadOptions(**corpus.read_options(READ_FIELDS))
    resolved = expand_inputs(inputs)
    key, fingerprint = add_key(resolved, opts, corpus.inputs)
    pending = run.path(A.ADD_JOURNAL).exists()
    if not pending and key in {a["key"] for a in corpus.additions or ()}:
        return {"already_added": True, "inputs": [str(p) for p in inputs]}
    if not pending and not config.allow_duplicates:
        check_duplicate_inputs(corpus, fingerprint)
    journal = _journal(run, key, [str(p) for p in inputs], opts)
    journal.update(fingerprint=fingerprint, input_hashes=[e["sha256"] for e in fingerprint],
                   command=add_command([str(p) for p in inputs], opts, corpus.read_options(READ_FIELDS),
                                       config.allow_duplicates))
    return _add(run, journal, resolved, opts, config, progress)


def _journal(run: RunDir, key: str, inputs: Sequence[str], opts: ReadOptions) -> dict[str, Any]:
    """The journal of this add: resumed when one for the same add exists, else started from the current
    (checked) records."""
    path = run.path(A.ADD_JOURNAL)
    if path.exists():
        abort = f"`clusterclip add {run.root} --abort` undoes it"
        try:
            journal = load_json(path)
            pending, inputs_before = journal["key"], ", ".join(journal["inputs"])
        except (ClusterClipError, OSError, KeyError, TypeError):
            raise ClusterClipError(f"{path}: the journal of an interrupted `clusterclip add` is damaged; {abort}, "
                                   "then add again") from None
        if pending != key:
            raise ClusterClipError(
                f"{run.root}: an interrupted `clusterclip add` of {inputs_before} is pending ({A.ADD_JOURNAL}); "
                f"re-run that add to finish it (its inputs are recognised by content, wherever they are now), or "
                f"{abort}")
        return journal
    for contract in GROWN:
        contract.require(run, verify=False)
        run.verify(contract.NAME, checksums=False)
    run.require_current(EMBED_STAGE, CORPUS_STAGE)
    run.require_current(CLUSTER_STAGE, EMBED_STAGE)
    base = {contract.NAME: run.record(contract.NAME) for contract in GROWN}
    return {"key": key, "inputs": list(inputs), "read": asdict(opts), "base": base,
            "sizes": load_npy(run.path(SIZES)).astype(int).tolist(), DEDUP_JOURNAL_KEY: extendable(run, base)}


def _add(run: RunDir, journal: dict[str, Any], resolved: Sequence[tuple[Path, str]], opts: ReadOptions,
         config: AddConfig, progress: bool) -> dict[str, Any]:
    """Read and check the new documents; then, the journal saved, grow tokens, embeddings and clusters,
    rewrite the corpus, embed and cluster records (in that order, so each stage is current with the one
    before it), write the drift report and remove the journal."""
    t0 = time.perf_counter()
    base = base_records(journal)
    corpus, embed = base[CORPUS_STAGE], base[EMBED_STAGE]
    assert isinstance(corpus, CorpusRecord) and isinstance(embed, EmbedRecord)
    n_old = corpus.count
    known = None if config.allow_duplicates else run_text_hashes(run, corpus)
    new = read_new_documents(run, journal, corpus, work_units(resolved), opts, progress, known)
    save_json(run.path(A.ADD_JOURNAL), journal)
    append_npy(run.path(TOKENS), n_old, new.tokens)
    if corpus.fields:
        stored = (*opts.keep_fields, *(("quality:num",) if corpus.config.quality_scorer else ()))
        new.fields = build_fields(run, new.parts, stored, first=n_old, known=corpus.fields)[1]
    shards = embed_new(run, embed, new.parts, len(new.ids), progress)
    old_sizes = np.asarray(journal["sizes"], dtype=np.int64)
    labels, scores, sizes = grow_clusters(run, [s["file"] for s in shards], n_old, old_sizes)
    # the old documents' cosines are the first n_old rows of scores.npy, which growing kept
    report = drift_report((run.path(SCORES), run.path(LABELS)), n_old, scores, labels, old_sizes,
                          config.drift_threshold, _coverage(run, embed, shards), _neighbours(run, n_old, shards))
    report["embedder"] = embed.embedder_config.get("name")
    growth = Growth(journal, base, n_old, new, shards, scores, sizes, time.perf_counter() - t0)
    grown = {entry.name: entry.grow(run, growth) for entry in TABLE if entry.grow is not None}
    report["dedup"] = _dedup_summary(grown[DEDUP_STAGE], run.record(DEDUP_STAGE) is not None)
    drift = DriftReport.write(run.path(A.DRIFT_REPORT), {"inputs": journal["inputs"], **report,
                                                         "duplicates_skipped": new.duplicates,
                                                         "duplicates_within": new.duplicates_within})
    run.path(A.ADD_JOURNAL).unlink()
    return drift.to_json()


def _coverage(run: RunDir, embed: EmbedRecord, shards: list[dict[str, Any]]) -> Coverage | None:
    """The old documents' coverage (streamed from their confidence shards) and the new ones', for the drift
    report; None when the run was embedded before confidence was recorded."""
    if not embed.has_confidence():
        return None

    def old() -> Iterator[np.ndarray]:
        for shard in embed.shards:
            yield np.asarray(load_npy(run.path(shard["confidence"]), mmap=True)[:, 0], np.float32)

    new = np.concatenate([load_npy(run.path(s["confidence"]))[:, 0] for s in shards]) if shards else np.zeros(0)
    return old, new


def _neighbours(run: RunDir, n_old: int, shards: list[dict[str, Any]]) -> Neighbourhood:
    """The neighbourhood similarities of the drift check: a seeded sample of the existing documents among
    themselves, every new document to that sample (read shard by shard), and the sample's clusters."""
    rows = reference_rows(n_old)
    reference = gather_embeddings(run, rows, verify=False)
    new = [neighbourhood(np.asarray(load_npy(run.path(s["file"]), mmap=True)), reference) for s in shards]
    return (neighbourhood(reference, reference, itself=True), np.concatenate(new) if new else np.zeros(0, np.float32),
            np.asarray(load_npy(run.path(LABELS), mmap=True)[rows]))


def _dedup_summary(record: DedupRecord | None, ran: bool) -> dict[str, Any] | None:
    """What the add did to the duplicate groups: extended (the new counts), stale, or nothing (no dedup yet)."""
    if record is None:
        return {"extended": False} if ran else None
    return {"extended": True, "documents": record.documents, "groups": record.groups, "removed": record.removed,
            "largest_group": record.largest_group}
