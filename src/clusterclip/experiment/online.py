"""Online proxy runs: the controller of :mod:`clusterclip.online` steers a proxy's plan while it trains.

The run starts on ClusterClip's plan (uniform over clusters, the spec's cap). Every ``every`` steps the
per-token losses of the window, summed per cluster of each target token, update the controller, and the
rest of the run is planned again from the documents read so far: strategy ``weights`` under the same cap,
counting every draw of the chain (``build_plan``'s ``prior``), as ``OnlineMixer`` does in a run directory.
The controller's weights are shares of the *tokens*, as ClusterClip's balance is in the token-budget root, so
uniform weights continue the root's balance: a continuation's budget is documents (plan positions), so each
weight becomes a share of draws over its cluster's mean document length
(:func:`~clusterclip.online.controller.token_to_draw_weights`), and the budget is enough documents for the
remaining tokens (:meth:`Steering._documents_for`). The batches switch to it at the next document, so the run trains
the chain's plans in order, each up to its switch.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from clusterclip.experiment.batches import PlanBatches
from clusterclip.online.controller import Controller, continuation_config, token_to_draw_weights
from clusterclip.plan.build import build_plan
from clusterclip.plan.chain import inherit
from clusterclip.plan.config import PlanConfig

BUDGET_MARGIN = 0.05
"""Share of documents planned beyond the expected need, so a continuation rarely ends before the run does."""
RECORD_DECIMALS = 6
"""Weights and losses in a run's record are rounded to this many decimals (the plans used the controller's own)."""


def update_steps(steps: int, updates: int) -> list[int]:
    """The steps after which the controller updates: ``updates`` evenly spaced steps strictly inside the run
    (``steps // (updates + 1)`` apart; fewer when the run is too short)."""
    every = max(1, steps // (updates + 1))
    return [s for s in range(every, steps, every)][:updates]


class Steering:
    """The controller in a proxy's training loop: it sets ``batches.on_step``, which ``train_model`` calls
    after every step.

    ``batches`` must have been built with the training split's cluster ``labels``; ``root`` is the plan config the
    run started on (its cap, order, window and seed hold for every continuation) and ``budget`` its token
    budget; ``n_clusters``, ``rule`` and ``updates`` (how many times the weights change over ``steps``).
    """

    def __init__(self, batches: PlanBatches, lengths: np.ndarray, root: PlanConfig, budget: int, n_clusters: int,
                 rule: str, steps: int, updates: int) -> None:
        if batches.labels is None:
            raise ValueError("online steering needs batches built with the cluster labels")
        self.batches, self.labels, self.lengths = batches, batches.labels, np.asarray(lengths, np.int64)
        self.root, self.budget, self.k = root, int(budget), int(n_clusters)
        self.controller = Controller.start(self.k, rule, seed=root.seed)
        sizes = np.bincount(self.labels, minlength=self.k)
        self.mean_tokens = np.divide(np.bincount(self.labels, self.lengths, self.k), sizes, out=np.zeros(self.k),
                                     where=sizes > 0)
        self.at = set(update_steps(steps, updates))
        self.every = min(self.at, default=steps)
        self.updates: list[dict[str, Any]] = []
        self._reset()
        batches.on_step = self.on_step

    def _reset(self) -> None:
        self.sums, self.counts, self.steps = np.zeros(self.k), np.zeros(self.k), 0

    def on_step(self, step: int, losses: torch.Tensor) -> None:
        """Add the step's token losses to the window per cluster; at an update step, steer."""
        ids = self.batches.last_clusters
        if ids is None:
            raise ValueError("the batches hold no clusters of the last batch")
        loss = losses.double().cpu().numpy().reshape(-1)
        flat = ids.reshape(-1)
        self.sums += np.bincount(flat, loss, self.k)
        self.counts += np.bincount(flat, minlength=self.k)
        self.steps += 1
        if step in self.at:
            self._update(step)

    def _update(self, step: int) -> None:
        """New weights from the window and, while budget is left, a continuation from the documents read."""
        read = np.asarray(self.batches.consumed, np.int64)
        spent = int(self.lengths[read].sum())
        left = self.budget - spent
        controller = self.controller.update(self.sums, self.counts, self.steps)
        if left <= 0:
            return
        prior = np.bincount(read, minlength=self.labels.shape[0])
        draws = token_to_draw_weights(controller.weights, self.mean_tokens)
        docs = self._documents_for(left, draws, prior)
        if docs < 1:
            return
        cfg = inherit(self.root, continuation_config(controller, self.root, draws, budget=docs))[0]
        plan = build_plan(self.labels, cfg, tokens=self.lengths, n_clusters=self.k, prior=prior)
        position = self.batches.switch(plan)
        if position is None:
            return
        self.updates.append({
            "step": int(step), "position": int(read.size), "tokens": spent, "budget_tokens": left,
            "budget_docs": docs,
            "weights": [round(w, RECORD_DECIMALS) for w in controller.weights],
            "losses": [None if math.isnan(x) else round(x, RECORD_DECIMALS) for x in controller.losses],
        })
        self.controller = controller
        self._reset()

    def _documents_for(self, tokens: int, weights: np.ndarray, prior: np.ndarray) -> int:
        """Documents to plan for ``tokens`` more tokens: a continuation's budget is plan positions, so the
        tokens over the expected document length under the draw ``weights`` (each cluster's mean) plus
        :data:`BUDGET_MARGIN`, at most what the cap leaves (the batches stop at the run's last step)."""
        mean, held = self.mean_tokens, self.mean_tokens > 0
        expected = float((weights * mean).sum() / max(weights[held].sum(), 1e-12))
        cap = self.root.effective_max_repeat
        room = int(np.maximum(cap - prior, 0).sum()) if cap is not None else math.inf
        return int(min(math.ceil((1 + BUDGET_MARGIN) * tokens / max(expected, 1.0)), room))

    def record(self) -> dict[str, Any]:
        """The run's ``online`` record: rule, update cadence and, per update, the step, the documents and tokens
        read before it, the budget planned after it, the new weights and the window's mean losses."""
        return {"rule": self.controller.rule, "every_steps": self.every, "updates": self.updates}
