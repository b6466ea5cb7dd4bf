"""The space a weight search moves in: weights over groups of clusters, and what they mean on one split.

Every split (and the whole corpus) has its own k-means, so cluster ids do not carry over. The search
therefore weighs *groups* defined once, on the reference split (the first search split): its clusters
when K <= ``max_groups``, else its centroids merged by Ward agglomeration to ``max_groups`` groups,
each group's centroid the token-weighted mean of its clusters'. On any split each cluster joins the
group with the nearest centroid, and a group's weight is shared by its clusters in proportion to their
tokens (the natural mixture within a group). A group with no cluster on a split loses its weight there
(the planner renormalises); :func:`group_coverage` says where.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from clusterclip.mixture.propose import Feasible
from clusterclip.plan.quotas import feasible_weights


@dataclass(frozen=True)
class ClusterView:
    """What a weight search needs of one split: centroids (k, d), tokens per cluster and the token budget."""

    centroids: np.ndarray
    tokens: np.ndarray
    budget: int


def reference_groups(view: ClusterView, max_groups: int) -> np.ndarray:
    """Group centroids (M, d): the clusters themselves, or a Ward merge of them to ``max_groups``."""
    c = np.asarray(view.centroids, dtype=np.float64)
    if len(c) <= max_groups:
        return c.copy()
    from sklearn.cluster import AgglomerativeClustering  # only for K > max_groups

    labels = AgglomerativeClustering(n_clusters=max_groups, linkage="ward").fit_predict(c)
    tok = np.maximum(np.asarray(view.tokens, dtype=np.float64), 1.0)
    return np.stack([np.average(c[labels == g], axis=0, weights=tok[labels == g]) for g in range(max_groups)])


def assign(view: ClusterView, groups: np.ndarray) -> np.ndarray:
    """The group of each cluster of ``view``: the nearest group centroid (Euclidean)."""
    c = np.asarray(view.centroids, dtype=np.float64)
    d = ((c[:, None, :] - groups[None, :, :]) ** 2).sum(axis=2)
    return np.argmin(d, axis=1)


def cluster_weights(group_w: np.ndarray, view: ClusterView, of: np.ndarray) -> np.ndarray:
    """Per-cluster weights (rows of ``group_w`` (m, M) -> (m, k)): a group's weight shared by token share."""
    gw = np.atleast_2d(np.asarray(group_w, dtype=np.float64))
    tok = np.asarray(view.tokens, dtype=np.float64)
    per_group = np.bincount(of, weights=tok, minlength=gw.shape[1])
    share = np.where(per_group[of] > 0, tok / np.where(per_group[of] > 0, per_group[of], 1.0), 0.0)
    return gw[:, of] * share[None, :]


def natural(view: ClusterView, of: np.ndarray, m: int) -> np.ndarray:
    """The groups' token shares on ``view`` (the size-proportional mixture)."""
    per_group = np.bincount(of, weights=np.asarray(view.tokens, dtype=np.float64), minlength=m)
    return per_group / per_group.sum()


def group_coverage(of: np.ndarray, m: int) -> list[int]:
    """The groups with no cluster on a split (their weight is lost there)."""
    return [int(g) for g in np.flatnonzero(np.bincount(of, minlength=m) == 0)]


def feasibility(views: dict[int, ClusterView], of: dict[int, np.ndarray], cap: int) -> Feasible:
    """The ``feasible`` hook: a group mixture is feasible when the planner meets its cluster weights exactly
    under ``cap`` at every split's budget (:func:`~clusterclip.plan.quotas.feasible_weights`)."""

    def check(mixtures: np.ndarray) -> np.ndarray:
        ok = np.ones(len(mixtures), dtype=bool)
        for split, view in views.items():
            ok &= feasible_weights(cluster_weights(mixtures, view, of[split]), view.tokens, cap, view.budget)
        return ok

    return check


def concrete_spec(spec: dict[str, Any], view: ClusterView, of: np.ndarray) -> dict[str, Any]:
    """A weight candidate's plan spec on one split: its group weights as that split's cluster weights (every
    cluster listed: the planner gives an unlisted cluster weight 1)."""
    w = cluster_weights(np.asarray(spec["group_weights"]), view, of)[0]
    return {"name": spec["name"], "strategy": "weights", "max_repeat": spec["max_repeat"], "order": spec["order"],
            "weights": [[int(c), round(float(x), 12)] for c, x in enumerate(w)]}
