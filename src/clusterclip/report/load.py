"""Read what the report shows from a run directory: stage records, cluster arrays, plans, experiment.

Every piece is optional. What a stage record lists is verified first (:func:`check_recorded`): a
corrupt record, an artifact that fails its SHA-256, or a stale clustering stops the report with one line
naming the file and the command that rebuilds it; a stale or broken plan is left out with a note. Arrays
without a record (a run directory written by hand) are read as they are: a missing one is None, an
unreadable or inconsistent one is None too and leaves a line in :attr:`RunView.notes`, so the page can say
what it left out instead of failing.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.contract.cluster import CENTROIDS, CLUSTER_STAGE, LABELS, SCORES, SIZES, ClusterRecord, cluster_totals
from clusterclip.contract.corpus import CORPUS_STAGE, TOKENS, CorpusRecord
from clusterclip.contract.embed import EmbedRecord, cluster_coverage
from clusterclip.contract.experiment import EXPERIMENT_RESULTS, TUNE_RESULTS
from clusterclip.contract.experiment_results import results_view
from clusterclip.contract.plan import (
    PLAN_DRAWS,
    PLAN_EXHAUSTED_AT,
    PLAN_MIXTURE,
    PLAN_ORDER,
    PLAN_RECORD,
    PLAN_REPEAT_HIST,
    PLANS_DIR,
    PlanRecord,
    PlanSettings,
    plan_path,
    plan_stage_name,
)
from clusterclip.contract.stages import SINGLE
from clusterclip.contract.tune_results import TuneResults
from clusterclip.errors import ClusterClipError
from clusterclip.store import RunDir, StaleArtifactError, load_json, load_npy
from clusterclip.store.record import RecordError, StageRecord


@dataclass(frozen=True)
class PlanView:
    """One plan as the report sees it: its record and the statistics the planner wrote beside the order.

    ``window`` is the number of draws per row of ``mixture``; it is None only when ``mixture`` is.
    """

    name: str
    slug: str
    record: PlanRecord
    n_draws: int | None
    window: int | None
    cluster_draws: np.ndarray | None
    mixture: np.ndarray | None
    repeat_hist: np.ndarray | None
    exhausted_at: np.ndarray | None

    @property
    def config(self) -> PlanSettings:
        """The options the plan was built with."""
        return self.record.config

    @property
    def stats(self) -> dict[str, Any]:
        """The statistics the planner recorded in ``plan.json``."""
        return self.record.stats


@dataclass(frozen=True)
class RunView:
    """Everything the report reads from a run directory; missing artifacts are None."""

    root: Path
    records: dict[str, StageRecord | None]
    """The record of every stage with one record per run directory (corpus, embed, cluster, dedup), None when
    it has not run."""
    tokens: np.ndarray | None
    labels: np.ndarray | None
    scores: np.ndarray | None
    sizes: np.ndarray | None
    centroids: np.ndarray | None
    plans: tuple[PlanView, ...]
    experiment: dict[str, Any] | None
    notes: tuple[str, ...]
    tune: TuneResults | None = None
    coverage: np.ndarray | None = None
    plan_notes: tuple[str, ...] = ()
    """The notes about plans left out of the page, or shown in part (also in ``notes``)."""
    """Each cluster's mean embedding coverage (the share of its documents' text the embedder represented)."""

    @property
    def corpus(self) -> CorpusRecord | None:
        rec = self.records.get(CORPUS_STAGE)
        return rec if isinstance(rec, CorpusRecord) else None

    @property
    def embed(self) -> EmbedRecord | None:
        rec = self.records.get(EmbedRecord.NAME)
        return rec if isinstance(rec, EmbedRecord) else None

    @property
    def cluster(self) -> ClusterRecord | None:
        rec = self.records.get(CLUSTER_STAGE)
        return rec if isinstance(rec, ClusterRecord) else None

    @property
    def k(self) -> int:
        """Number of clusters (0 without a clustering)."""
        return 0 if self.sizes is None else len(self.sizes)

    @property
    def n_docs(self) -> int | None:
        """Number of documents, from the corpus record or else the per-document arrays."""
        for v in (self.corpus.count if self.corpus is not None else None, self.tokens, self.labels):
            if isinstance(v, np.ndarray):
                return len(v)
            if v is not None:
                return int(v)
        return None


def load_run(run_dir: str | os.PathLike[str]) -> RunView:
    """Read the records and arrays of a run directory that the report uses."""
    rd = RunDir(run_dir)
    if not rd.root.is_dir():
        raise ClusterClipError(f"{rd.root}: not a run directory (it does not exist)")
    notes: list[str] = []
    records = check_recorded(rd)
    # the per-document arrays are memory-mapped (page cache, not the report's memory: 16 GB at 10^9 documents)
    arr = {name: _array(rd.path(name), notes, mmap=name in PER_DOCUMENT)
           for name in (TOKENS, LABELS, SCORES, SIZES, CENTROIDS)}
    labels, sizes = _labels_and_sizes(arr[LABELS], arr[SIZES], notes)
    scores, tokens = arr[SCORES], arr[TOKENS]
    if scores is not None and labels is not None and len(scores) != len(labels):
        notes.append("scores.npy and labels.npy differ in length; scores ignored")
        scores = None
    if tokens is not None and labels is not None and len(tokens) != len(labels):
        notes.append("tokens.npy and labels.npy differ in length; token shares per cluster omitted")
    k = 0 if sizes is None else len(sizes)
    before = len(notes)
    plans = _load_plans(rd, k, notes)
    plan_notes = tuple(notes[before:])
    experiment = _load_experiment(rd, notes)
    tune = _load_tune(rd, notes)
    return RunView(
        root=rd.root,
        records=records,
        tokens=tokens,
        labels=labels,
        scores=scores,
        sizes=sizes,
        centroids=arr[CENTROIDS],
        plans=plans,
        experiment=experiment,
        notes=tuple(notes),
        tune=tune,
        coverage=_coverage(rd, records, labels, k),
        plan_notes=plan_notes,
    )


def _coverage(rd: RunDir, records: dict[str, StageRecord | None], labels: np.ndarray | None,
              k: int) -> np.ndarray | None:
    """Each cluster's mean coverage, when the embed stage recorded confidence (None otherwise); a confidence
    file that fails its checksum stops the report, as a damaged cluster array does."""
    if records.get(EmbedRecord.NAME) is None or labels is None or not k:
        return None
    return cluster_coverage(rd, labels, k)


def check_recorded(rd: RunDir) -> dict[str, StageRecord | None]:
    """The records of the stages with one record per run (:data:`~clusterclip.contract.stages.SINGLE`), after
    verifying what the report reads.

    The corpus parts, ``tokens.npy`` and the cluster arrays are checked against the SHA-256 in their
    records (embeddings are not read, so not hashed), and the clustering must be current with the corpus
    (not stale). Raises :class:`StaleArtifactError` (one line: the file, the command that rebuilds it).
    """
    records: dict[str, StageRecord | None] = {c.NAME: c.read(rd) for c in SINGLE}
    for stage in (CORPUS_STAGE, CLUSTER_STAGE):
        if (rec := records[stage]) is not None:
            rd.verify(stage, rec.to_json())
    if records[CLUSTER_STAGE] is not None:
        rd.require_current(CLUSTER_STAGE)
    return records


def _array(path: Path, notes: list[str], mmap: bool = False) -> np.ndarray | None:
    if not path.exists():
        return None
    try:
        return load_npy(path, mmap=mmap)
    except StaleArtifactError as exc:
        notes.append(str(exc))
        return None


def _labels_and_sizes(
    labels: np.ndarray | None, sizes: np.ndarray | None, notes: list[str]
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The labels (integers, as stored) and the cluster sizes (counted from the labels when ``sizes.npy`` is
    missing)."""
    if labels is None:
        return None, sizes
    if not np.issubdtype(labels.dtype, np.integer):
        labels = np.asarray(labels, dtype=np.int64)
    k = int(labels.max(initial=-1)) + 1
    if sizes is None:
        return labels, cluster_totals(labels, k)
    if k > len(sizes):
        notes.append(f"labels.npy names cluster {k - 1} but sizes.npy has only {len(sizes)} clusters")
        return None, sizes
    return labels, sizes


PER_DOCUMENT = (TOKENS, LABELS, SCORES)


def _slug(name: str, taken: set[str]) -> str:
    """A file-name-safe, unique form of a plan name (for its chart files)."""
    base = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "plan"
    slug, i = base, 2
    while slug in taken:
        slug, i = f"{base}-{i}", i + 1
    taken.add(slug)
    return slug


def _load_plans(rd: RunDir, k: int, notes: list[str]) -> tuple[PlanView, ...]:
    plans: list[PlanView] = []
    taken: set[str] = set()
    for folder in sorted(p for p in rd.path(PLANS_DIR).glob("*/") if not (p / PLAN_RECORD).exists()):
        if (folder / PLAN_ORDER).exists():
            notes.append(f"{folder}: `{PLAN_ORDER}` without its record `{PLAN_RECORD}` (unfinished, or the "
                         f"record was deleted); plan skipped, rebuild it with "
                         f"`{rd.rebuild_command(plan_stage_name(folder.name), None, force=True)}`")
    for rec_path in sorted(rd.path(PLANS_DIR).glob(f"*/{PLAN_RECORD}")):
        folder = rec_path.parent
        rec = _checked_plan_record(rd, folder.name, notes)
        if rec is not None:
            plans.append(_load_plan(folder, rec, _slug(folder.name, taken), k, notes))
    return tuple(plans)


def _checked_plan_record(rd: RunDir, name: str, notes: list[str]) -> PlanRecord | None:
    """A plan's record, its statistics verified (``plan.npy`` by size: only its length is read); None, with a
    note naming the rebuild command, for a corrupt record or a stale plan (built on an older clustering).
    A statistics file that fails its checksum raises :class:`StaleArtifactError`."""
    stage = plan_stage_name(name)
    try:
        rec = PlanRecord.read(rd, stage)
    except StaleArtifactError as exc:
        notes.append(f"{exc}; plan skipped")
        return None
    if rec is None:
        return None
    stale = rd.stale_reason(stage)
    if stale:
        notes.append(f"{stale}; plan skipped")
        return None
    order = plan_path(name, PLAN_ORDER)
    rd.verify(stage, rec.to_json(), checksums=False, only=[order])
    rd.verify(stage, rec.to_json(), only=[rel for rel in rec.artifacts if rel != order])
    return rec


def _load_plan(folder: Path, record: PlanRecord, slug: str, k: int, notes: list[str]) -> PlanView:
    """A plan's record and statistics arrays, checked against K."""
    name = folder.name
    order = _array(folder / PLAN_ORDER, notes, mmap=True)
    stats = {
        "cluster_draws": _array(folder / PLAN_DRAWS, notes),
        "mixture": _array(folder / PLAN_MIXTURE, notes),
        "repeat_hist": _array(folder / PLAN_REPEAT_HIST, notes),
    }
    exhausted_at = _array(folder / PLAN_EXHAUSTED_AT, notes)
    n_draws = len(order) if order is not None else record.stats.get("length")
    window = plan_window(record, stats["mixture"], n_draws)
    if window is None:
        notes.append(f"plan {name}: plan.json records no mixture window; mixture over training omitted")
        stats["mixture"] = None
    if stats["mixture"] is not None and (stats["mixture"].ndim != 2 or (k and stats["mixture"].shape[1] != k)):
        notes.append(f"plan {name}: mixture.npy has shape {stats['mixture'].shape}, expected [W, {k}]")
        stats["mixture"] = None
    if stats["cluster_draws"] is not None and k and len(stats["cluster_draws"]) != k:
        notes.append(f"plan {name}: cluster_draws.npy has {len(stats['cluster_draws'])} entries, expected {k}")
        stats["cluster_draws"] = None
    return PlanView(
        name=name,
        slug=slug,
        record=record,
        n_draws=n_draws,
        window=window,
        exhausted_at=exhausted_at,
        **stats,
    )


def plan_window(record: PlanRecord, mixture: np.ndarray | None, n_draws: int | None) -> int | None:
    """Draws per mixture window: the one the planner recorded (``stats.window``, or the configured one).

    The planner always records it; a record without one (hand-made or edited) takes it from the
    mixture's number of rows, and without a mixture there is none.
    """
    window = record.stats.get("window") or record.config.window
    if window:
        return int(window)
    if mixture is not None and n_draws and len(mixture):
        return math.ceil(n_draws / len(mixture))
    return None


def _load_json_file(rd: RunDir, name: str, section: str, notes: list[str]) -> Any:
    """A JSON file of the run directory, or None (with a note when it exists but cannot be read)."""
    path = rd.path(name)
    if not path.exists():
        return None
    try:
        return load_json(path)
    except (OSError, ValueError) as exc:
        notes.append(f"{path}: unreadable ({exc}); {section} section omitted")
        return None


def _load_experiment(rd: RunDir, notes: list[str]) -> dict[str, Any] | None:
    """The experiment's results (:func:`~clusterclip.contract.experiment_results.results_view`), or None with a
    note when they do not read."""
    try:
        return results_view(_load_json_file(rd, EXPERIMENT_RESULTS, "experiment", notes))
    except RecordError as exc:
        notes.append(f"{exc}; experiment section omitted")
        return None


def _load_tune(rd: RunDir, notes: list[str]) -> TuneResults | None:
    """The tune search's results, or None (with a note when the file is there but does not read as them)."""
    path = rd.path(TUNE_RESULTS)
    if not path.exists():
        return None
    try:
        return TuneResults.read(path)
    except RecordError as exc:
        notes.append(f"{exc}; tune section omitted")
        return None
