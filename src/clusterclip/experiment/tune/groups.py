"""The space a weight search moves in: weights over groups of clusters, and what they mean on one split.

Every split (and the whole corpus) has its own k-means, so cluster ids do not carry over. The search
therefore weighs *groups* defined once, on the reference split (the first search split): its clusters
when K <= ``max_groups``, else its centroids merged by Ward agglomeration to ``max_groups`` groups,
each group's centroid the token-weighted mean of its clusters'. On any split each cluster joins the
group with the nearest centroid, and a group's weight is shared by its clusters in proportion to their
tokens (the natural mixture within a group). A group with no cluster on a split loses its weight there
(the planner renormalises); :func:`group_coverage` says where.

Groups formed on one split need not fit another: :func:`feasible_grouping` merges groups (and, at two
groups, raises the cap) until the natural mixture is feasible on every split, and says what it changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from clusterclip.errors import ClusterClipError
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


# ------------------------------------------------------------------------- groups every split can follow

MIN_GROUPS = 2
"""Merging stops here: one group leaves only the natural mixture, which is random."""


@dataclass(frozen=True)
class Grouping:
    """The groups a weight search moves in: centroids, every split's cluster-to-group map, the natural mixture
    (the mean of the splits' group token shares), the cap, and what was changed to make the natural mixture
    feasible on every split (``changes``, one sentence each)."""

    groups: np.ndarray
    of: dict[int, np.ndarray]
    natural: np.ndarray
    cap: int
    changes: tuple[str, ...]


def split_natural(views: dict[int, ClusterView], of: dict[int, np.ndarray], m: int) -> np.ndarray:
    """The natural mixture over ``m`` groups: the mean over splits of each split's group token shares."""
    return np.mean([natural(v, of[s], m) for s, v in views.items()], axis=0)


def repeats_needed(views: dict[int, ClusterView], of: dict[int, np.ndarray], w: np.ndarray) -> np.ndarray:
    """(groups, splits): the mean repeats the planner must draw from a group's documents on a split to give it
    the weight ``w`` of the budget (every cluster of a group repeats alike: its weight is shared by tokens);
    infinite for a weighted group with no cluster there. ``w`` is feasible under a cap when no entry exceeds it."""
    out = np.zeros((len(w), len(views)))
    for j, (s, v) in enumerate(views.items()):
        tok = np.bincount(of[s], weights=np.asarray(v.tokens, dtype=np.float64), minlength=len(w))
        kept = w[tok > 0].sum()  # the planner renormalises over the groups present
        with np.errstate(divide="ignore", invalid="ignore"):
            out[:, j] = np.where(w > 0, v.budget * w / np.maximum(kept, 1e-300) / tok, 0.0)
    return out


def _merged(groups: np.ndarray, ref: ClusterView, g: int, h: int) -> np.ndarray:
    """Group ``g`` merged into ``h``: their token-weighted centroid (on the reference split) replaces both."""
    of = assign(ref, groups)
    tok = np.maximum(np.bincount(of, weights=np.asarray(ref.tokens, dtype=np.float64), minlength=len(groups)), 1.0)
    keep = [i for i in range(len(groups)) if i != g]
    out = groups[keep].copy()
    out[keep.index(h)] = (tok[g] * groups[g] + tok[h] * groups[h]) / (tok[g] + tok[h])
    return out


def _state(views: dict[int, ClusterView], groups: np.ndarray) -> tuple[dict[int, np.ndarray], np.ndarray, np.ndarray]:
    of = {s: assign(v, groups) for s, v in views.items()}
    w = split_natural(views, of, len(groups))
    return of, w, repeats_needed(views, of, w)


def _merge_once(views: dict[int, ClusterView], reference: int, groups: np.ndarray, cap: int) -> tuple[np.ndarray, str]:
    """Merge the group whose natural weight needs the most repeats on some split into the partner that leaves the
    smallest such need (ties: the nearest centroid); the new centroids and a sentence saying why."""
    of, w, need = _state(views, groups)
    g, j = np.unravel_index(int(np.argmax(need)), need.shape)
    split = list(views)[j]
    dist = ((groups - groups[g]) ** 2).sum(axis=1)
    options = [(float(_state(views, _merged(groups, views[reference], int(g), h))[2].max()), float(dist[h]), h)
               for h in range(len(groups)) if h != g]
    h = min(options)[2]
    share = natural(views[split], of[split], len(groups))[g]
    why = (f"merged group {g} into group {h}: its natural weight {w[g]:.3f} is {share:.3f} of split {split}'s tokens, "
           f"so it needs {need[g, j]:.1f} repeats there (cap {cap})" if np.isfinite(need[g, j]) else
           f"merged group {g} into group {h}: split {split} has no cluster in it")
    return _merged(groups, views[reference], int(g), h), why


def feasible_grouping(views: dict[int, ClusterView], reference: int, max_groups: int, cap: int) -> Grouping:
    """Groups whose natural mixture the planner meets exactly on every split under ``cap``.

    The reference split's groups (:func:`reference_groups`) need not fit another split: a group that is 20 % of
    the reference's tokens but 4 % of another's must repeat that split's documents 5 x passes times to keep its
    weight. While the natural mixture is infeasible on some split, the group that needs the most repeats is merged
    into the partner that leaves the least (two groups that trade clusters between splits become one, whose share
    is stable). At :data:`MIN_GROUPS` groups the cap is raised instead, to the smallest that fits. A group no
    cluster of any split is nearest to is dropped. Every change is a sentence in ``changes``.
    """
    groups = reference_groups(views[reference], max_groups)
    start, changes = len(groups), _reference_note(views, reference, groups, cap)
    while True:
        groups, dropped = _drop_unused(views, groups)
        changes += dropped
        of, w, need = _state(views, groups)
        if _feasible_on_all(views, of, w, cap) or len(groups) <= MIN_GROUPS:
            break
        groups, why = _merge_once(views, reference, groups, cap)
        changes.append(why)
    if len(groups) != start:
        changes.append(f"{start} groups became {len(groups)}")
    asked = cap
    finite = need[np.isfinite(need)]
    while not _feasible_on_all(views, of, w, cap):
        cap = max(cap + 1, int(np.ceil(finite.max() - 1e-9)) if finite.size else cap + 1)
        if cap > 1000 * asked:  # only a split whose every weighted group is empty gets here
            raise ClusterClipError(f"no cap makes the natural mixture over {len(groups)} groups feasible on every "
                                   "split (a split whose every weighted group is empty)")
    if cap != asked:
        changes.append(f"raised max_repeat from {asked} to {cap}: with {len(groups)} groups the natural mixture "
                       f"needs {finite.max():.1f} repeats on some split")
    return Grouping(groups, of, w, cap, tuple(changes))


def _reference_note(views: dict[int, ClusterView], reference: int, groups: np.ndarray, cap: int) -> list[str]:
    """A sentence when the reference split's own group shares would not fit another split (the natural mixture
    is the mean of every split's shares instead), else none."""
    of = {s: assign(v, groups) for s, v in views.items()}
    own = natural(views[reference], of[reference], len(groups))
    if _feasible_on_all(views, of, own, cap):
        return []
    need = repeats_needed(views, of, own)
    need[~np.isfinite(need)] = 0.0
    g, j = np.unravel_index(int(np.argmax(need)), need.shape)
    return [f"the natural mixture is the mean of the {len(views)} splits' group shares: the reference split "
            f"{reference}'s own shares need {need[g, j]:.1f} repeats of group {g} on split {list(views)[j]} "
            f"(cap {cap})"]


def _drop_unused(views: dict[int, ClusterView], groups: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Groups without a cluster on any split removed (their natural weight is 0 everywhere)."""
    used = np.zeros(len(groups), dtype=bool)
    for v in views.values():
        used[assign(v, groups)] = True
    if used.all() or used.sum() < 1:
        return groups, []
    gone = [int(g) for g in np.flatnonzero(~used)]
    return groups[used], [f"dropped group(s) {gone}: no cluster of any split is nearest to them"]


def _feasible_on_all(views: dict[int, ClusterView], of: dict[int, np.ndarray], w: np.ndarray, cap: int) -> bool:
    """The planner's exact check of the group mixture ``w`` on every split."""
    return all(bool(feasible_weights(cluster_weights(w[None, :], v, of[s]), v.tokens, cap, v.budget)[0])
               for s, v in views.items())
