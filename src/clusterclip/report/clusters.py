"""The clusters section and the ground-truth section of the report page: one row per cluster (size, shares,
cohesion, each plan's share of draws, majority group, keywords, examples) and how the corpus's ground-truth
groups spread over the clusters."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clusterclip.contract.cluster import cluster_totals
from clusterclip.report.keywords import CorpusScan
from clusterclip.report.load import RunView
from clusterclip.report.metrics import nmi_from_table, purity_from_table


@dataclass(frozen=True)
class ClusterRow:
    """One cluster: size, shares, cohesion, the share of each plan's draws, description and examples."""

    cluster: int
    docs: int
    share: float
    token_share: float | None
    mean_cos: float | None
    coverage: float | None
    draw_shares: tuple[float, ...]
    majority: tuple[str, float] | None
    keywords: tuple[str, ...]
    examples: tuple[str, ...]
    badge: str


@dataclass(frozen=True)
class ClusterTable:
    """All clusters, largest first; ``draw_plans`` names the plans of ``ClusterRow.draw_shares``."""

    rows: tuple[ClusterRow, ...]
    draw_plans: tuple[str, ...]
    with_tokens: bool
    with_cohesion: bool
    with_coverage: bool
    with_groups: bool
    with_text: bool


@dataclass(frozen=True)
class GroupRow:
    """How one ground-truth group spreads over the clusters."""

    name: str
    docs: int
    share: float
    clusters_holding: int
    clusters_leading: int
    share_in_led: float
    top_cluster: int
    top_share: float


@dataclass(frozen=True)
class GroundTruth:
    """Agreement of the clusters with the corpus's ground-truth groups."""

    nmi: float
    purity: float
    labelled: int
    labelled_share: float
    groups: tuple[GroupRow, ...]


# --------------------------------------------------------------------------------------------- clusters


def cluster_table(run: RunView, scan: CorpusScan | None) -> ClusterTable | None:
    if not run.k:
        return None
    sizes = np.asarray(run.sizes, dtype=np.int64)
    n = max(int(sizes.sum()), 1)
    mean_cos, token_share = cluster_cohesion(run), cluster_token_shares(run)
    drawn = [p for p in run.plans if p.cluster_draws is not None]
    draw_shares = [p.cluster_draws / max(p.cluster_draws.sum(), 1) for p in drawn]
    contingency = scan.contingency if scan is not None else None
    order = np.argsort(-sizes, kind="stable")
    badges = _badges(order)
    rows = tuple(
        ClusterRow(
            cluster=c,
            docs=int(sizes[c]),
            share=float(sizes[c] / n),
            token_share=None if token_share is None else float(token_share[c]),
            mean_cos=None if mean_cos is None else float(mean_cos[c]),
            coverage=None if run.coverage is None else float(run.coverage[c]),
            draw_shares=tuple(float(s[c]) for s in draw_shares),
            majority=_majority(contingency[c], scan.groups) if contingency is not None else None,
            keywords=tuple(w for w, _ in scan.keywords[c]) if scan is not None else (),
            examples=tuple(scan.examples.get(c, [])) if scan is not None else (),
            badge=badges.get(c, ""),
        )
        for c in map(int, order)
    )
    return ClusterTable(
        rows=rows,
        draw_plans=tuple(p.name for p in drawn),
        with_tokens=token_share is not None,
        with_cohesion=mean_cos is not None,
        with_coverage=run.coverage is not None,
        with_groups=contingency is not None,
        with_text=scan is not None,
    )


def cluster_cohesion(run: RunView) -> np.ndarray | None:
    """Mean cosine similarity of each cluster's documents to its centroid (NaN for an empty cluster)."""
    if run.labels is None or run.scores is None:
        return None
    count = cluster_totals(run.labels, run.k)
    mean_cos = cluster_totals(run.labels, run.k, run.scores) / np.maximum(count, 1)
    mean_cos[count == 0] = np.nan
    return mean_cos


def cluster_token_shares(run: RunView) -> np.ndarray | None:
    """Each cluster's share of the corpus's tokens."""
    if run.labels is None or run.tokens is None or len(run.tokens) != len(run.labels):
        return None
    tokens = cluster_totals(run.labels, run.k, run.tokens)
    return tokens / max(tokens.sum(), 1.0)


def _badges(order: np.ndarray) -> dict[int, str]:
    """Badges of the top and bottom 10 % of clusters by size (at most 5 each): "largest", "smallest"."""
    n_badge = min(5, max(1, len(order) // 10))
    badges = {int(c): "smallest" for c in order[::-1][:n_badge]}
    badges.update({int(c): "largest" for c in order[:n_badge]})
    return badges


def _majority(counts: np.ndarray, groups: list[str]) -> tuple[str, float] | None:
    """The most frequent group among a cluster's labelled documents and its share of them."""
    if not counts.sum():
        return None
    g = int(counts.argmax())
    return groups[g], float(counts[g] / counts.sum())


def majority_groups(scan: CorpusScan | None) -> list[str | None] | None:
    """Each cluster's majority ground-truth group (None for clusters without labelled documents)."""
    if scan is None or scan.contingency is None:
        return None
    return [m[0] if m else None for m in (_majority(row, scan.groups) for row in scan.contingency)]


# ----------------------------------------------------------------------------------------- ground truth


def ground_truth(run: RunView, scan: CorpusScan | None) -> GroundTruth | None:
    if scan is None or scan.contingency is None:
        return None
    t = scan.contingency
    labelled = int(t.sum())
    lead = np.where(t.sum(axis=1) > 0, t.argmax(axis=1), -1)
    rows = []
    for g, name in enumerate(scan.groups):
        col = t[:, g]
        docs = int(col.sum())
        led = np.flatnonzero(lead == g)
        top = int(col.argmax())
        rows.append(
            GroupRow(
                name=name,
                docs=docs,
                share=docs / max(labelled, 1),
                clusters_holding=int((col > 0).sum()),
                clusters_leading=len(led),
                share_in_led=float(col[led].sum() / max(docs, 1)),
                top_cluster=top,
                top_share=float(col[top] / max(docs, 1)),
            )
        )
    return GroundTruth(
        nmi=nmi_from_table(t),
        purity=purity_from_table(t),
        labelled=labelled,
        labelled_share=labelled / max(run.n_docs or labelled, 1),
        groups=tuple(rows),
    )
