"""Statistics of a plan over strata: per stratum, per cluster and per tier, and the repetition histogram.

Inside a stratum the documents are drawn in passes of permutations, so each is drawn ``full`` or ``full + 1``
times (``full, rem = divmod(d_s, n_s)``): for a plan with clusters, no token counts and no parent, every count follows
in closed form from the strata's draws, as the plain planner's do (``plan.stats``), without reading the plan back.
Otherwise (a continuation, token counts, or a plan without clusters, whose clusters cut across its strata) the
draws of each document are counted over the plan and summed per stratum.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from clusterclip.plan.config import PlanConfig
from clusterclip.plan.stats import repeat_hist
from clusterclip.plan.stratified import StrataDraws, StrataStream

EXHAUSTED_LISTED = 50


def counted(p: StrataDraws, pseudo: bool) -> bool:
    """Whether the statistics need each document's draws counted over the plan (else: closed form)."""
    return p.prior is not None or pseudo or p.corpus.tokens is not None


def strata_statistics(p: StrataDraws, stream: StrataStream, pseudo: bool
                      ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray, int]:
    """Per-cluster and per-stratum statistics, the repetition histogram and the documents at their tier's cap.

    Per stratum first, then summed per cluster over the strata (a stratum lies in one cluster); a plan without
    clusters (``pseudo``: its strata are tiers) sums its clusters over the documents."""
    st, sizes = p.strata, p.groups.sizes
    stratum = {"cluster": st.cluster.astype(np.int64), "tier": st.tier.astype(np.int64), "size": sizes.copy(),
               "quota": p.quotas.quota.astype(np.int64)}
    total = full = None  # per unit, when counted: draws including the parent's, and at the stratum's cap
    if counted(p, pseudo):
        c = stream.counts
        total = c if p.prior is None else c + p.prior
        cap = st.cap[st.unit]
        full = np.isfinite(cap) & (total >= cap)  # a unit at its stratum's cap
        stratum["draws"] = np.bincount(st.unit, weights=c, minlength=st.k).astype(np.int64)
        stratum["unique"] = np.bincount(st.unit, weights=c > 0, minlength=st.k).astype(np.int64)
        if p.corpus.tokens is not None:
            stratum["tokens"] = np.bincount(st.unit, weights=c * p.corpus.tokens, minlength=st.k).astype(np.int64)
        reached = np.bincount(st.unit, weights=full, minlength=st.k).astype(np.int64)
        top = _max_by(st.unit, c, st.k)
        hist = np.bincount(c).astype(np.int64)
    else:
        d = p.draws.astype(np.int64)
        whole, rem = np.divmod(d, np.maximum(sizes, 1))
        stratum["draws"] = d.copy()
        stratum["unique"] = np.where(whole > 0, sizes, rem)
        finite = np.isfinite(st.cap)
        cap = np.where(finite, st.cap, 0).astype(np.int64)
        reached = np.where(finite & (whole >= cap), sizes, np.where(finite & (whole + 1 >= cap), rem, 0))
        top = whole + (rem > 0)
        hist = repeat_hist(whole, rem, sizes)
    per = _per_cluster(p, stream, pseudo, stratum, reached, top, total, full)
    drawn_cap = np.isfinite(st.cap) & (st.cap > 0)
    return per, stratum, hist, int(reached[drawn_cap].sum())


def _per_cluster(p: StrataDraws, stream: StrataStream, pseudo: bool, stratum: dict[str, np.ndarray],
                 reached: np.ndarray, top: np.ndarray, total: np.ndarray | None,
                 full: np.ndarray | None) -> dict[str, np.ndarray]:
    """The per-cluster statistics: summed over each cluster's strata, or (``pseudo``) over its documents (``total``
    and ``full``: each unit's draws with the parent's and whether it is at its cap, given whenever counted)."""
    st, k, sizes = p.strata, p.corpus.k, p.groups.sizes
    live = st.rate > 0
    if pseudo:
        assert full is not None
        lab, c = p.corpus.labels, stream.counts
        open_units = np.bincount(lab, weights=live[st.unit] & ~full, minlength=k)
        drawable = np.bincount(lab, weights=live[st.unit], minlength=k)
        d = np.bincount(lab, weights=c, minlength=k).astype(np.int64)
        unique = np.bincount(lab, weights=c > 0, minlength=k).astype(np.int64)
        most = _max_by(lab, c, k)
        tokens = None if p.corpus.tokens is None else \
            np.bincount(lab, weights=c * p.corpus.tokens, minlength=k).astype(np.int64)
    else:
        open_units = np.bincount(st.cluster, weights=np.where(live, sizes - reached, 0), minlength=k)
        drawable = np.bincount(st.cluster, weights=np.where(live, sizes, 0), minlength=k)
        d = np.bincount(st.cluster, weights=stratum["draws"], minlength=k).astype(np.int64)
        unique = np.bincount(st.cluster, weights=stratum["unique"], minlength=k).astype(np.int64)
        most = _max_by(st.cluster, top, k)
        tokens = None if "tokens" not in stratum else \
            np.bincount(st.cluster, weights=stratum["tokens"], minlength=k).astype(np.int64)
    done = (open_units == 0) & (drawable > 0) & (stream.last >= 0)
    per = {"draws": d, "unique": unique, "max_repeat": most,
           "mean_repeat": np.where(unique > 0, d / np.maximum(unique, 1), 0.0),
           "exhausted_at": np.where(done, stream.last, -1),
           "quota": d.copy() if pseudo else p.quotas.cluster_quota.astype(np.int64), "size": p.corpus.sizes.copy()}
    if p.prior is not None:
        assert total is not None
        per["max_total"] = _max_by(p.corpus.labels, total, k)
    if tokens is not None:
        per["tokens"] = tokens
    return per


def _max_by(group: np.ndarray, values: np.ndarray, k: int) -> np.ndarray:
    """The largest of ``values`` in each of ``k`` groups (0 for an empty group; the values are counts)."""
    top = np.zeros(k, np.int64)
    np.maximum.at(top, group, values)
    return top


def strata_summary(p: StrataDraws, per: dict[str, np.ndarray], stratum: dict[str, np.ndarray], at_cap: int,
                   config: PlanConfig) -> dict[str, Any]:
    """What ``plan.json`` records of the strata: the settings, every tier's rate, cap, documents, draws and
    tokens, the quantile edges, and what the caps did (``at_cap`` documents at their tier's cap, exhausted
    clusters)."""
    st = p.strata
    t = len(st.tier_labels)
    tier_docs = np.bincount(st.tier, weights=stratum["size"], minlength=t).astype(np.int64)
    tier_draws = np.bincount(st.tier, weights=stratum["draws"], minlength=t).astype(np.int64)
    tier_unique = np.bincount(st.tier, weights=stratum["unique"], minlength=t).astype(np.int64)
    tier_tokens = np.bincount(st.tier, weights=stratum["tokens"], minlength=t).astype(np.int64) \
        if "tokens" in stratum else None
    tiers = [{"label": st.tier_labels[i], "rate": float(st.tier_rate[i]),
              "cap": None if not np.isfinite(st.tier_cap[i]) else int(st.tier_cap[i]), "docs": int(tier_docs[i]),
              "draws": int(tier_draws[i]), "unique": int(tier_unique[i]),
              "tokens": None if tier_tokens is None else int(tier_tokens[i])} for i in range(t)]
    ex = per["exhausted_at"]
    hit = np.flatnonzero(ex >= 0)
    hit = hit[np.argsort(ex[hit], kind="stable")]
    return {"settings": config.strata_json(), "n_strata": st.k, "tiers": tiers, "edges": st.edges,
            "docs_at_tier_cap": at_cap, "exhausted_clusters": hit[:EXHAUSTED_LISTED].tolist(),
            "cap_binds": bool(hit.size)}
