"""The report's duplicates section: what ``clusterclip dedup`` found, per cluster, with example groups.

Reads the dedup stage's ``group.npy``, ``kept.npy`` and ``removed.parquet`` (never recomputes) and, for the
examples, the text of a few documents (only the row groups holding them). Each example group shows its kept
document, then the member least like it (lowest word-set Jaccard to the kept one, with its cosine): the pair
that shows a bad merge. A dedup built from other corpus, embed or cluster outputs than the current ones is
named stale instead of shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from clusterclip.contract.cluster import LABELS
from clusterclip.contract.corpus import CorpusIndex
from clusterclip.contract.dedup import DEDUP_STAGE, GROUP, KEPT, REMOVED, DedupRecord, dedup_inputs
from clusterclip.errors import ClusterClipError
from clusterclip.report import html as h
from clusterclip.store import RunDir, load_npy

TOP_CLUSTERS = 20
EXAMPLE_GROUPS = 3
MEMBERS_SHOWN = 3
SNIPPET = 240
REMOVED_COLUMNS = ("removed_index", "detector", "cosine", "word_jaccard")


@dataclass(frozen=True)
class ClusterDuplicates:
    """One cluster: its documents, those removed as duplicates and their share."""

    cluster: int
    documents: int
    removed: int
    share: float


@dataclass(frozen=True)
class Member:
    """A member shown: its index, ``kept`` or ``removed``, and for a removed one the detector of its edges and
    its word-set Jaccard estimate and cosine to the kept document (None where ``removed.parquet`` lacks them)."""

    index: int
    role: str
    detector: str
    jaccard: float | None
    cosine: float | None
    text: str


@dataclass(frozen=True)
class ExampleGroup:
    """A duplicate group: its size and the members shown: the kept one, the least similar one, then others."""

    size: int
    members: tuple[Member, ...]

    @property
    def least_similar(self) -> Member | None:
        """The removed member least like the kept document (shown second)."""
        return self.members[1] if len(self.members) > 1 else None


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
    checks: tuple[tuple[str, int], ...] = ()
    """What the derivation refused (record fields of this version: unconfirmed semantic edges, split members)."""


def dedup_section(root: Path) -> DedupSection | None:
    """The duplicates of the run at ``root``, or None when ``clusterclip dedup`` never ran there."""
    run = RunDir(root)
    try:
        rec = DedupRecord.read(run)
    except ClusterClipError as exc:
        return DedupSection({}, 0, 0, 0, (), (), (), stale=str(exc))
    if rec is None:
        return None
    settings = {k: getattr(rec.config, k) for k in ("eps", "jaccard", "confirm", "verify", "min_shingles")}
    if rec.inputs_hash != dedup_inputs(run) or run.problems(DEDUP_STAGE, rec.to_json(), only=(GROUP, KEPT, REMOVED)):
        why = f"the duplicate groups predate the current corpus or clusters; re-run `clusterclip dedup {root}`"
        return DedupSection(settings, 0, 0, 0, (), (), (), stale=why)
    group, kept, labels = load_npy(run.path(GROUP)), load_npy(run.path(KEPT)), load_npy(run.path(LABELS))
    removed = kept[group] != np.arange(group.size)
    sizes = np.bincount(labels, minlength=int(labels.max(initial=-1)) + 1)
    dropped = np.bincount(labels[removed], minlength=sizes.size)
    share = dropped / np.maximum(sizes, 1)
    top = np.lexsort((np.arange(sizes.size), -share))[:TOP_CLUSTERS]
    names = pq.read_schema(run.path(REMOVED)).names
    table = pq.read_table(run.path(REMOVED), columns=[c for c in REMOVED_COLUMNS if c in names])
    counts = pc.value_counts(table.column("detector")).to_pylist() if table.num_rows else []
    checks = tuple((label, int(value)) for label, value in (
        ("semantic edges within eps", rec.semantic_edges), ("semantic edges refused (unconfirmed)",
         rec.unconfirmed_semantic), ("lexical edges refused (too few words)", rec.refused_lexical),
        ("members split off by the star check", rec.split_off)) if value is not None)
    return DedupSection(
        settings, int(group.size), int(kept.size), int(removed.sum()),
        tuple(sorted((str(c["values"]), int(c["counts"])) for c in counts)),
        tuple(ClusterDuplicates(int(c), int(sizes[c]), int(dropped[c]), float(share[c])) for c in top if dropped[c]),
        _examples(run, group, kept, table), checks=checks,
    )


def _examples(run: RunDir, group: np.ndarray, kept: np.ndarray, removed: pa.Table) -> tuple[ExampleGroup, ...]:
    """The largest groups, each with its kept document, its least similar member and a few others (text from
    the corpus; ``removed``: ``removed.parquet``)."""
    counts = np.bincount(group, minlength=kept.size)
    largest = [g for g in np.argsort(-counts, kind="stable")[:EXAMPLE_GROUPS].tolist() if counts[g] > 1]
    if not largest:
        return ()
    index = removed.column("removed_index").to_numpy()
    jaccard, cosine = _column(removed, "word_jaccard"), _column(removed, "cosine")
    chosen = {}
    for g in largest:
        rows = np.flatnonzero(group[index] == g)
        least = int(rows[np.argmin(np.nan_to_num(jaccard[rows], nan=2.0))]) if rows.size else -1
        others = [int(index[r]) for r in rows if r != least]
        chosen[g] = [int(kept[g]), *([int(index[least])] if least >= 0 else []), *others][:MEMBERS_SHOWN]
    docs = np.unique(np.concatenate([np.asarray(v) for v in chosen.values()]))
    texts = dict(zip(docs.tolist(), CorpusIndex(run).gather(docs).column("text").to_pylist(), strict=True))
    detector = removed.column("detector")
    shown = {}
    for r in np.flatnonzero(np.isin(index, docs)).tolist():
        shown[int(index[r])] = (str(detector[r]), _number(jaccard[r]), _number(cosine[r]))
    return tuple(ExampleGroup(int(counts[g]), tuple(
        Member(i, "kept", "", None, None, _snippet(texts[i])) if i == kept[g]
        else Member(i, "removed", *shown.get(i, ("", None, None)), _snippet(texts[i])) for i in members))
        for g, members in chosen.items())


def _column(table: pa.Table, name: str) -> np.ndarray:
    """A float column as float64 (NaN when the table lacks it: a ``removed.parquet`` of an older version)."""
    if name not in table.column_names:
        return np.full(table.num_rows, np.nan)
    return table.column(name).to_numpy().astype(np.float64)


def _number(x: float) -> float | None:
    return None if np.isnan(x) else float(x)


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
             *((f"removed by {name}", n) for name, n in d.by_detector), *d.checks,
             ("eps (semantic)", d.settings.get("eps")), ("jaccard (lexical)", d.settings.get("jaccard")),
             *((label, d.settings[k]) for k, label in (("confirm", "confirm (word-set Jaccard of a semantic edge)"),
               ("verify", "verify (word-set Jaccard of a member to its kept one)"),
               ("min_shingles", "min shingles (fewer: equal texts only)")) if d.settings.get(k) is not None)]
    cols = ["cluster", h.Column("documents", True), h.Column("removed", True), h.Column("share removed", True)]
    rows = [[c.cluster, c.documents, c.removed, h.Cell(f"{c.share:.1%}", sort=c.share, numeric=True)]
            for c in d.clusters]
    table = h.table(cols, rows, sortable=True) if rows else h.note("No cluster holds duplicates.")
    examples = "".join(f"<h3>A group of {g.size:,} documents{_least(g)}</h3><ol>"
                       + "".join(_member_html(m) for m in g.members) + "</ol>" for g in d.examples)
    intro = (f"Near-duplicate groups from <code>clusterclip dedup</code>: the clusters with the highest share of "
             f"removed documents (top {TOP_CLUSTERS}), and the largest groups with their kept document first, then "
             "the member least like it (lowest word-set Jaccard): if those two differ, the group is a bad merge. "
             "Plan with <code>--duplicates drop</code> or <code>group-cap</code> to use them.")
    return h.section("duplicates", title, h.key_values(facts) + f'<div class="scroll">{table}</div>' + examples,
                     intro)


def _similarity(m: Member) -> str:
    parts = [f"word-set Jaccard {m.jaccard:.2f}" if m.jaccard is not None else "",
             f"cosine {m.cosine:.3f}" if m.cosine is not None else ""]
    return ", ".join(p for p in parts if p)


def _least(g: ExampleGroup) -> str:
    """The group's heading suffix: how near its least similar member is to the kept document."""
    m = g.least_similar
    return f" (least similar member: {_similarity(m)})" if m is not None and _similarity(m) else ""


def _member_html(m: Member) -> str:
    about = "; ".join(p for p in (m.detector, _similarity(m)) if p)
    return f"<li><b>#{m.index} {h.esc(m.role)}</b>{' (' + h.esc(about) + ')' if about else ''}: {h.esc(m.text)}</li>"
