"""Plans over near-duplicate groups (``--duplicates drop|group-cap``; groups from ``clusterclip dedup``).

Both plan the groups' kept representatives with the ordinary planner (so a group counts as one document:
cluster sizes, weights, water-filling quotas ``q_c = min(lambda w_c, R g_c)`` over ``g_c`` groups and
cluster exhaustion are exact at the group level), then map each draw to a document:

* ``drop``: the representative itself; the other members are never drawn;
* ``group-cap``: the ``j``-th draw of a group goes to its member ``j mod m`` (members in the kept rule's
  order: the representative first, then longest, then lowest index), so the members' draws together equal
  the group's draws, at most ``max_repeat``, and each member is drawn at most ``ceil(max_repeat / m)`` times.

A group is planned in its representative's cluster. The dedup stage's LSH bands the whole corpus, so a group
may hold an edited copy that the embedder put in another cluster: that member is drawn on the group's (the
representative's) cluster's behalf, and every per-cluster statistic of the plan (draws, mixture, ``unique``,
``max_repeat``, ``tokens``, ``size``) counts each document in its group's cluster. The order, its identity and
block checksums are of the mapped documents.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.contract import plan_identity as identity
from clusterclip.contract.plan_reader import BlockChecksums
from clusterclip.errors import InfeasiblePlanError
from clusterclip.plan.build import DEFAULT_CHUNK, Plan, _output, build_over_strata, build_plan, unit_strata
from clusterclip.plan.config import PlanConfig, PlanConfigError
from clusterclip.plan.quotas import check_inputs
from clusterclip.plan.reference import reference_order
from clusterclip.plan.strata import FieldValues, field_values


def check_groups(labels: np.ndarray, group: np.ndarray, kept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Validate ``group`` (int [N], ids 0..G-1) and ``kept`` (int [G], ascending, ``group[kept[g]] == g``)."""
    lab, grp, rep = np.asarray(labels), np.asarray(group), np.asarray(kept)
    if grp.shape != lab.shape or not np.issubdtype(grp.dtype, np.integer):
        raise PlanConfigError(f"group must hold one integer group id per document ({lab.size}), got {grp.dtype} "
                              f"{grp.shape}")
    in_range = rep.size == 0 or 0 <= rep.min() <= rep.max() < lab.size
    if rep.ndim != 1 or not np.issubdtype(rep.dtype, np.integer) or not in_range:
        raise PlanConfigError("kept must be document indices, one per group")
    if grp.size and (grp.min() < 0 or grp.max() >= rep.size or np.any(np.diff(rep) <= 0)
                     or not np.array_equal(grp[rep], np.arange(rep.size))):
        raise PlanConfigError("group and kept disagree: ids must be 0..G-1 and kept[g] an ascending member of group g")
    return grp.astype(np.int64, copy=False), rep.astype(np.int64, copy=False)


class MemberMap:
    """Maps the groups drawn (in plan order, chunk by chunk) to documents under ``drop``, ``group-cap`` or
    ``rehydrate`` (as ``group-cap``: the members in turn). ``seen``: each group's draws before this plan (a
    continuation goes on with the member after the last one drawn)."""

    def __init__(self, group: np.ndarray, kept: np.ndarray, tokens: np.ndarray | None, mode: str,
                 seen: np.ndarray | None = None) -> None:
        self.kept, self.mode = kept, mode
        n = group.size
        length = np.zeros(n, np.int64) if tokens is None else np.asarray(tokens, np.int64)
        is_rep = np.zeros(n, bool)
        is_rep[kept] = True
        self.members = np.lexsort((np.arange(n), -length, ~is_rep, group))
        self.size = np.bincount(group, minlength=kept.size).astype(np.int64)
        self.start = np.cumsum(self.size) - self.size
        self.seen = np.zeros(kept.size, np.int64) if seen is None else np.asarray(seen, np.int64).copy()

    def map(self, g: np.ndarray) -> np.ndarray:
        """Documents for the next draws of groups ``g``."""
        if self.mode == "drop":
            return self.kept[g]
        order = np.argsort(g, kind="stable")
        gs = g[order]
        head = np.flatnonzero(np.concatenate(([True], gs[1:] != gs[:-1]))) if gs.size else np.zeros(0, np.int64)
        rank = np.empty(g.size, np.int64)
        rank[order] = np.arange(g.size) - np.repeat(head, np.diff(np.append(head, g.size)))
        occurrence = self.seen[g] + rank
        np.add.at(self.seen, gs[head], np.diff(np.append(head, g.size)))
        return self.members[self.start[g] + occurrence % self.size[g]]


def build_grouped_plan(labels: np.ndarray, config: PlanConfig, group: np.ndarray, kept: np.ndarray,
                       tokens: np.ndarray | None = None, out: str | os.PathLike[str] | None = None,
                       chunk_size: int = DEFAULT_CHUNK, n_clusters: int | None = None) -> Plan:
    """``build_plan`` under ``config.duplicates`` for the groups ``group``/``kept`` (:func:`grouped_plan` with
    prior draws and fields)."""
    return grouped_plan(labels, config, (group, kept), tokens, out, chunk_size, n_clusters)


def grouped_plan(labels: np.ndarray, config: PlanConfig, dedup: tuple[np.ndarray, np.ndarray],
                 tokens: np.ndarray | None = None, out: str | os.PathLike[str] | None = None,
                 chunk_size: int = DEFAULT_CHUNK, n_clusters: int | None = None,
                 side: GroupSide | None = None) -> Plan:
    """The plan over the duplicate groups ``dedup = (group, kept)`` under ``config.duplicates``, mapped to documents.

    An epoch (``epochs``, or no budget) is the corpus' documents (or tokens), as in every plan; a group counts as
    one document against the cap. ``side`` carries a continuation's per-document prior draws (summed per group:
    the cap holds over the whole chain, and group-cap's members go on in turn) and the fields of strata (each
    group has its kept document's).
    """
    side = side or GroupSide()
    if config.duplicates == "none":
        return build_plan(labels, config, tokens, out, chunk_size, n_clusters, side.prior, side.fields)
    group, kept = check_groups(np.asarray(labels), *dedup)
    labels = np.asarray(labels)[kept[group]]  # each document in its group's cluster
    k = int(labels.max()) + 1 if n_clusters is None else int(n_clusters)
    if config.budget is None:
        total = labels.size if config.budget_unit == "docs" else int(np.asarray(tokens, np.int64).sum())
        config = dataclasses.replace(config, budget=config.budget_for(total), epochs=None)
    sub_tokens = None if tokens is None else np.asarray(tokens)[kept]
    prior_g = None if side.prior is None else np.bincount(group, weights=side.prior, minlength=kept.size).astype(
        np.int64)
    members = MemberMap(group, kept, tokens, config.duplicates, prior_g)
    counts = np.zeros(labels.size, np.int64)
    with _scratch(out) as tmp:
        try:
            sub = _group_level(labels[kept], config, sub_tokens, tmp, chunk_size, k,
                               GroupSide(prior_g, _at(side.fields, kept)), members.size)
        except InfeasiblePlanError as exc:
            raise InfeasiblePlanError(f"{exc} (under --duplicates {config.duplicates} the 'documents' are the "
                                      f"{kept.size:,} duplicate groups: {_GROUP_RULE[config.duplicates]})") from None
        digest, blocks = identity.OrderHash(), BlockChecksums()
        with _output(out, int(sub.order.size)) as dest:
            for a in range(0, sub.order.size, chunk_size):
                docs = members.map(np.asarray(sub.order[a:a + chunk_size], np.int64))
                dest[a:a + docs.size] = docs
                counts += np.bincount(docs, minlength=labels.size)
                digest.add(docs)
                blocks.add(docs)
    order = dest if out is None else np.load(out, mmap_mode="r", allow_pickle=False)
    per, hist, stats = _document_stats(labels, tokens, counts, sub, k)
    stats = {**stats, "name": config.name(), "duplicates": config.duplicates}
    return dataclasses.replace(sub, order=order, stats=stats, per_cluster=per, repeat_hist=hist, config=config,
                               identity=digest.hexdigest(), checksums=blocks.finish(),
                               tiers=None if sub.tiers is None else sub.tiers[group])


_GROUP_RULE = {
    "group-cap": "each duplicate group counts as one document: a document and its near-copies share one cap",
    "drop": "only each duplicate group's kept document is drawn",
    "rehydrate": "each duplicate group counts as one document, capped by the rehydration curve of its size",
}


@dataclasses.dataclass(frozen=True)
class GroupSide:
    """What a grouped plan may take besides the groups: per-document ``prior`` draws and per-document ``fields``."""

    prior: np.ndarray | None = None
    fields: Mapping[str, Any] | None = None


def _at(fields: Mapping[str, Any] | None, rows: np.ndarray) -> dict[str, Any] | None:
    """Each field's values at ``rows`` (the groups' kept documents)."""
    if fields is None:
        return None
    out: dict[str, Any] = {}
    for name, value in fields.items():
        fv = field_values(value)
        out[name] = FieldValues(fv.values[rows], fv.categories)
    return out


def _group_level(labels: np.ndarray, config: PlanConfig, tokens: np.ndarray | None, out: Path | None,
                 chunk_size: int, k: int, side: GroupSide, group_sizes: np.ndarray) -> Plan:
    """The plan of the groups' kept documents, each group one unit (rehydrate: strata of the curve's classes)."""
    if config.duplicates == "rehydrate":
        corpus = check_inputs(labels, tokens, k)
        strata = unit_strata(corpus, config, side.fields, group_sizes)
        return build_over_strata(corpus, config, strata, out, chunk_size, side.prior)
    return build_plan(labels, dataclasses.replace(config, duplicates="none"), tokens, out, chunk_size, k, side.prior,
                      side.fields)


def _document_stats(labels: np.ndarray, tokens: np.ndarray | None, counts: np.ndarray, sub: Plan,
                    k: int) -> tuple[dict[str, np.ndarray], np.ndarray, dict[str, object]]:
    """Per-document statistics of the mapped plan (the group-level plan's kept under ``*_groups`` keys)."""
    drawn = counts > 0
    unique = np.bincount(labels[drawn], minlength=k).astype(np.int64)
    top = np.zeros(k, np.int64)
    np.maximum.at(top, labels, counts)
    per = {**sub.per_cluster, "unique": unique, "max_repeat": top, "size": np.bincount(labels, minlength=k),
           "mean_repeat": np.where(unique > 0, sub.per_cluster["draws"] / np.maximum(unique, 1), 0.0)}
    if tokens is not None:
        per["tokens"] = np.bincount(labels, weights=counts * np.asarray(tokens, np.int64), minlength=k).astype(np.int64)
    hist = np.bincount(counts).astype(np.int64)
    length, n_unique = int(counts.sum()), int(drawn.sum())
    stats = {**sub.stats, "n_docs": int(labels.size), "unique_docs": n_unique, "coverage": n_unique / labels.size,
             "max_repeat_observed": int(hist.size - 1), "mean_repeat": length / n_unique if n_unique else 0.0,
             "tokens": int(per["tokens"].sum()) if tokens is not None else None,
             "groups": int(sub.stats["n_docs"]), "unique_groups": int(sub.stats["unique_docs"]),
             "max_group_repeat": int(sub.stats["max_repeat_observed"])}
    return per, hist, stats


@contextlib.contextmanager
def _scratch(out: str | os.PathLike[str] | None) -> Iterator[Path | None]:
    """Where the group-level order goes: memory (no ``out``), else a temp file beside ``out``, removed after."""
    if out is None:
        yield None
        return
    tmp = Path(out).with_name(Path(out).name + ".groups.npy")
    try:
        yield tmp
    finally:
        tmp.unlink(missing_ok=True)


def reference_grouped_order(labels: np.ndarray, config: PlanConfig, group: np.ndarray, kept: np.ndarray,
                            tokens: np.ndarray | None = None, n_clusters: int | None = None) -> np.ndarray:
    """The grouped plan's order from the in-memory reference order (small inputs): the oracle of the tests."""
    labels = np.asarray(labels)
    group, kept = check_groups(labels, group, kept)
    k = int(labels.max()) + 1 if n_clusters is None else int(n_clusters)
    sub = reference_order(labels[kept], dataclasses.replace(config, duplicates="none"),
                          None if tokens is None else np.asarray(tokens)[kept], k)
    return MemberMap(group, kept, tokens, config.duplicates).map(sub)
