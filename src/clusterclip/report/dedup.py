"""The report's duplicates section: what ``clusterclip dedup`` found, per cluster, with example groups.

Reads the dedup stage's ``group.npy``, ``kept.npy`` and ``removed.parquet`` (never recomputes) and, for the
examples, the text of a few documents (only the row groups holding them). A dedup built from other corpus,
embed or cluster outputs than the current ones is named stale instead of shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from clusterclip.cluster.contract import LABELS
from clusterclip.corpus.contract import CorpusIndex
from clusterclip.dedup.contract import DEDUP_STAGE, GROUP, KEPT, REMOVED, DedupRecord, dedup_inputs
from clusterclip.errors import ClusterClipError
from clusterclip.report import html as h
from clusterclip.store import RunDir, load_npy

TOP_CLUSTERS = 20
EXAMPLE_GROUPS = 3
MEMBERS_SHOWN = 3
SNIPPET = 240


@dataclass(frozen=True)
class ClusterDuplicates:
    """One cluster: its documents, those removed as duplicates and their share."""

    cluster: int
    documents: int
    removed: int
    share: float


@dataclass(frozen=True)
class ExampleGroup:
    """A duplicate group: its size, and ``(index, role, detector, text)`` of the members shown, kept first."""

    size: int
    members: tuple[tuple[int, str, str, str], ...]


@dataclass(frozen=True)
class DedupSection:
    """The duplicates found (None fields when stale: ``stale`` says why)."""

    settings: dict[str, object]
    documents: int
    groups: int
    removed: int
    by_detector: tuple[tuple[str, int], ...]
    clusters: tuple[ClusterDuplicates, ...]
    examples: tuple[ExampleGroup, ...]
    stale: str | None = None


def dedup_section(root: Path) -> DedupSection | None:
    """The duplicates of the run at ``root``, or None when ``clusterclip dedup`` never ran there."""
    run = RunDir(root)
    try:
        rec = DedupRecord.read(run)
    except ClusterClipError as exc:
        return DedupSection({}, 0, 0, 0, (), (), (), stale=str(exc))
    if rec is None:
        return None
    settings = {k: rec.config.get(k) for k in ("eps", "jaccard")}
    if rec.inputs_hash != dedup_inputs(run) or run.problems(DEDUP_STAGE, rec.to_json(), only=(GROUP, KEPT, REMOVED)):
        why = f"the duplicate groups predate the current corpus or clusters; re-run `clusterclip dedup {root}`"
        return DedupSection(settings, 0, 0, 0, (), (), (), stale=why)
    group, kept, labels = load_npy(run.path(GROUP)), load_npy(run.path(KEPT)), load_npy(run.path(LABELS))
    removed = kept[group] != np.arange(group.size)
    sizes = np.bincount(labels, minlength=int(labels.max(initial=-1)) + 1)
    dropped = np.bincount(labels[removed], minlength=sizes.size)
    share = dropped / np.maximum(sizes, 1)
    top = np.lexsort((np.arange(sizes.size), -share))[:TOP_CLUSTERS]
    table = pq.read_table(run.path(REMOVED), columns=["removed_index", "detector"])
    counts = pc.value_counts(table.column("detector")).to_pylist() if table.num_rows else []
    return DedupSection(
        settings, int(group.size), int(kept.size), int(removed.sum()),
        tuple(sorted((str(c["values"]), int(c["counts"])) for c in counts)),
        tuple(ClusterDuplicates(int(c), int(sizes[c]), int(dropped[c]), float(share[c])) for c in top if dropped[c]),
        _examples(run, group, kept, table),
    )


def _examples(run: RunDir, group: np.ndarray, kept: np.ndarray, removed: pa.Table) -> tuple[ExampleGroup, ...]:
    """The largest groups, each with its kept document and a few removed members (text from the corpus;
    ``removed``: ``removed_index`` and ``detector`` of ``removed.parquet``)."""
    counts = np.bincount(group, minlength=kept.size)
    largest = [g for g in np.argsort(-counts, kind="stable")[:EXAMPLE_GROUPS].tolist() if counts[g] > 1]
    if not largest:
        return ()
    chosen = {g: [int(kept[g]), *[int(i) for i in np.flatnonzero(group == g) if i != kept[g]][:MEMBERS_SHOWN - 1]]
              for g in largest}
    docs = np.unique(np.concatenate([np.asarray(v) for v in chosen.values()]))
    shown = pc.is_in(removed.column("removed_index"), value_set=pa.array(docs)).to_numpy(zero_copy_only=False)
    rows = removed.filter(pa.array(shown))
    detector = dict(zip(rows.column("removed_index").to_pylist(), rows.column("detector").to_pylist(), strict=True))
    texts = dict(zip(docs.tolist(), CorpusIndex(run).gather(docs).column("text").to_pylist(), strict=True))
    return tuple(
        ExampleGroup(int(counts[g]), tuple((i, "kept" if i == kept[g] else "removed", detector.get(i, ""),
                                            _snippet(texts[i])) for i in members))
        for g, members in chosen.items())


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= SNIPPET else flat[:SNIPPET].rstrip() + "…"


def render_dedup(d: DedupSection) -> str:
    """The section's HTML."""
    title = "Duplicates"
    if d.stale is not None:
        return h.section("duplicates", title, h.note(d.stale))
    facts = [("documents", d.documents), ("groups", d.groups), ("removed (not the kept member of their group)",
             d.removed), ("share removed", f"{d.removed / max(d.documents, 1):.2%}"),
             *((f"removed by {name}", n) for name, n in d.by_detector),
             ("eps (semantic)", d.settings.get("eps")), ("jaccard (lexical)", d.settings.get("jaccard"))]
    cols = ["cluster", h.Column("documents", True), h.Column("removed", True), h.Column("share removed", True)]
    rows = [[c.cluster, c.documents, c.removed, h.Cell(f"{c.share:.1%}", sort=c.share, numeric=True)]
            for c in d.clusters]
    table = h.table(cols, rows, sortable=True) if rows else h.note("No cluster holds duplicates.")
    examples = "".join(
        f"<h3>A group of {g.size:,} documents</h3><ol>" + "".join(
            f"<li><b>#{i} {h.esc(role)}</b>{' (' + h.esc(det) + ')' if det else ''}: {h.esc(text)}</li>"
            for i, role, det, text in g.members) + "</ol>"
        for g in d.examples)
    intro = (f"Near-duplicate groups from <code>clusterclip dedup</code>: the clusters with the highest share of "
             f"removed documents (top {TOP_CLUSTERS}), and the largest groups with their kept document first. "
             "Plan with <code>--duplicates drop</code> or <code>group-cap</code> to use them.")
    return h.section("duplicates", title, h.key_values(facts) + f'<div class="scroll">{table}</div>' + examples,
                     intro)
