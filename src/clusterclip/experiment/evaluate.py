"""Losses per document and their aggregation into the experiment's metrics.

Every loss is in nats per token, token-weighted inside a group (cluster or domain): a group's loss is
its total held-out loss over its total held-out tokens. Aggregates over groups are plain means, so a
small cluster counts as much as a large one in the *macro* views, and the *micro* view is the loss
of the natural held-out distribution.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from clusterclip.experiment.data import EvalWindows, TokenizedDocs, eval_windows
from clusterclip.experiment.model import GPT, token_losses


@torch.no_grad()
def doc_losses(model: GPT, windows: EvalWindows, n_docs: int, batch: int = 64,
               device: str = "cpu") -> tuple[np.ndarray, np.ndarray]:
    """Summed loss and token count of every document covered by ``windows`` (length ``n_docs``)."""
    was_training = model.training
    model.eval()
    sums = np.zeros(n_docs, dtype=np.float64)
    counts = np.zeros(n_docs, dtype=np.float64)
    for s in range(0, len(windows.doc), batch):
        x = torch.from_numpy(windows.inputs[s:s + batch]).to(device)
        y = torch.from_numpy(windows.targets[s:s + batch]).to(device)
        per_window = token_losses(model, x, y).sum(dim=1).double().cpu().numpy()
        doc = windows.doc[s:s + batch]
        sums += np.bincount(doc, weights=per_window, minlength=n_docs)
        counts += np.bincount(doc, weights=(windows.targets[s:s + batch] >= 0).sum(axis=1), minlength=n_docs)
    model.train(was_training)
    return sums, counts


def unigram_doc_losses(train: TokenizedDocs, docs: TokenizedDocs, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-document loss of the add-one unigram model of the training tokens: the floor to beat (with a ``mask``,
    of the masked tokens only: the responses' unigram model, scored on the responses)."""
    seen = train.flat if train.mask is None else train.flat[train.mask]
    counts = np.bincount(seen, minlength=vocab_size).astype(np.float64) + 1.0
    nll = -np.log(counts / counts.sum())
    doc_of_token = np.repeat(np.arange(len(docs)), docs.lengths)
    if docs.mask is None:
        return np.bincount(doc_of_token, weights=nll[docs.flat], minlength=len(docs)), docs.lengths.astype(np.float64)
    scored = docs.mask.astype(np.float64)
    return (np.bincount(doc_of_token, weights=nll[docs.flat] * scored, minlength=len(docs)),
            np.bincount(doc_of_token, weights=scored, minlength=len(docs)))


def group_losses(sums: np.ndarray, counts: np.ndarray, groups: np.ndarray) -> dict[Any, float]:
    """Token-weighted loss of every group that has tokens."""
    keys, inv = np.unique(groups, return_inverse=True)
    s = np.bincount(inv, weights=sums, minlength=keys.size)
    c = np.bincount(inv, weights=counts, minlength=keys.size)
    return {_key(k): float(s[i] / c[i]) for i, k in enumerate(keys) if c[i] > 0}


def _key(k: Any) -> Any:
    return int(k) if isinstance(k, np.integer) else str(k)


def worst_fraction(values: Sequence[float], fraction: float = 0.1) -> float:
    """Mean of the worst (highest) ``fraction`` of ``values``, at least one."""
    v = np.sort(np.asarray(values, dtype=np.float64))[::-1]
    return float(v[: max(1, math.ceil(fraction * v.size))].mean())


def summarize_losses(sums: np.ndarray, counts: np.ndarray, clusters: np.ndarray,
                     domains: np.ndarray | None) -> dict[str, Any]:
    """Macro over clusters (primary), macro over domains, micro, worst 10% of clusters, per group."""
    per_cluster = group_losses(sums, counts, clusters)
    out: dict[str, Any] = {
        "macro_cluster": float(np.mean(list(per_cluster.values()))),
        "micro": float(sums.sum() / counts.sum()),
        "worst10_cluster": worst_fraction(list(per_cluster.values())),
        "per_cluster": {str(k): round(v, 5) for k, v in per_cluster.items()},
    }
    if domains is not None:
        per_domain = group_losses(sums, counts, domains)
        out["macro_domain"] = float(np.mean(list(per_domain.values())))
        out["per_domain"] = {k: round(v, 5) for k, v in per_domain.items()}
    return out


class Evaluator:
    """Held-out (and optional training-sample) scoring of a model, windows built once."""

    def __init__(self, docs: TokenizedDocs, clusters: np.ndarray, domains: np.ndarray | None, context: int,
                 batch: int = 64, device: str = "cpu") -> None:
        self.docs = docs
        self.clusters = clusters
        self.domains = domains
        self.batch = batch
        self.device = device
        self.windows = eval_windows(docs, np.arange(len(docs)), context)

    def losses(self, model: GPT) -> tuple[np.ndarray, np.ndarray]:
        """Summed loss and token count per document."""
        return doc_losses(model, self.windows, len(self.docs), self.batch, self.device)

    def evaluate(self, model: GPT) -> dict[str, Any]:
        """:func:`summarize_losses` of the model on these documents."""
        sums, counts = self.losses(model)
        return summarize_losses(sums, counts, self.clusters, self.domains)


def mixture(order: np.ndarray, lengths: np.ndarray, groups: np.ndarray) -> dict[str, Any]:
    """Token shares of the groups in a plan, and the effective number of groups seen (exp entropy)."""
    keys, inv = np.unique(groups, return_inverse=True)
    w = np.bincount(inv[order], weights=lengths[order], minlength=keys.size)
    share = w / w.sum()
    nz = share[share > 0]
    return {"shares": {str(_key(k)): round(float(p), 6) for k, p in zip(keys, share, strict=True)},
            "effective": float(np.exp(-(nz * np.log(nz)).sum())),
            "groups_seen": int((share > 0).sum())}


def repeats(order: np.ndarray, n_docs: int) -> dict[str, Any]:
    """How often documents recur in a plan: unique share, max and the distribution's upper tail."""
    c = np.bincount(order, minlength=n_docs)
    seen = c[c > 0]
    return {"unique_docs": int(seen.size), "unique_share": round(seen.size / n_docs, 4),
            "max": int(c.max()), "mean_seen": round(float(seen.mean()), 3),
            "p99": float(np.percentile(seen, 99))}


def smallest_clusters(labels: np.ndarray, heldout_labels: np.ndarray, k: int, fraction: float) -> np.ndarray:
    """The smallest ``fraction`` of clusters (by training documents) that have held-out documents."""
    sizes = np.bincount(labels, minlength=k)
    has_heldout = np.bincount(heldout_labels, minlength=k) > 0
    cand = np.flatnonzero(has_heldout)
    cand = cand[np.argsort(sizes[cand], kind="stable")]
    return np.sort(cand[: max(1, math.ceil(fraction * k))])


def small_shares(order: np.ndarray, lengths: np.ndarray, is_small: np.ndarray) -> dict[str, float]:
    """Token share of the smallest clusters over the whole plan and in its last quarter (what the
    model saw most recently: a plan that exhausts them early leaves them out of the end of training)."""
    tok = lengths[order].astype(np.float64)
    pos = np.cumsum(tok)
    late = pos > 0.75 * pos[-1]
    small = is_small[order]
    return {"small_share": float(tok[small].sum() / tok.sum()),
            "small_share_last_quarter": float(tok[small & late].sum() / tok[late].sum())}
