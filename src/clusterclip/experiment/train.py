"""One training run: a fresh model trained on batches of packed sequences, in order, with a fixed recipe.

Everything except the sequences (the sampling plan) is identical across strategies: model shape,
initialisation seed, AdamW with linear warm-up and cosine decay, gradient clipping, batch size and
number of steps. The batches come as the caller's iterable yields them (the experiment's:
:class:`~clusterclip.experiment.batches.PlanBatches`, the plan read through ``ClusterClipSampler``), never
reshuffled: the plan's order *is* the training order.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from clusterclip.experiment.config import ModelConfig, TrainConfig
from clusterclip.experiment.model import GPT, token_losses

__all__ = ["TrainConfig", "lr_at", "train_model"]


def lr_at(step: int, steps: int, cfg: TrainConfig) -> float:
    """Linear warm-up to ``lr`` then cosine decay to ``lr * min_lr_ratio`` at the last step."""
    warm = min(cfg.warmup_steps, max(1, steps // 10))
    if step < warm:
        return cfg.lr * (step + 1) / warm
    progress = (step - warm) / max(1, steps - warm)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def _optimizer(model: GPT, cfg: TrainConfig) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    fused = True if decay[0].is_cuda else None
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95), fused=fused)


def target_mean(losses: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The mean loss over the targets (``targets >= 0``; all of them: the plain mean, as a language model's)."""
    scored = targets >= 0
    n = int(scored.sum())
    return losses.mean() if n == targets.numel() else losses.sum() / max(n, 1)


def _step(model: GPT, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, lr: float,
          grad_clip: float) -> torch.Tensor:
    """One optimiser step at learning rate ``lr``; the per-token losses, detached."""
    for group in opt.param_groups:
        group["lr"] = lr
    losses = token_losses(model, x, y)
    opt.zero_grad(set_to_none=True)
    target_mean(losses, y).backward()
    if grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
    return losses.detach()


def train_model(
    model_cfg: ModelConfig,
    cfg: TrainConfig,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    steps: int,
    seed: int,
    device: str = "cpu",
    on_curve: Callable[[GPT], dict[str, Any]] | None = None,
    progress: Callable[[int, float], None] | None = None,
) -> tuple[GPT, list[dict[str, Any]]]:
    """Train a model seeded with ``seed`` on the first ``steps`` of ``batches`` (``(inputs, targets)``, int64
    ``[batch, context]``); no batch beyond them is requested.

    Returns the model and its loss curve: at ``curve_points`` evenly spaced steps, the mean training
    loss since the previous point plus whatever ``on_curve(model)`` measures (held-out losses).
    When ``batches`` has an ``on_step(step, losses)`` hook (not None), it sees every step's per-token losses
    (detached, ``[batch, context]``) after the update, before the next batch is requested: an online run
    steers the next documents with them.
    """
    torch.manual_seed(seed)
    model = GPT(model_cfg).to(device)
    model.train()
    opt = _optimizer(model, cfg)
    marks = set(np.unique(np.linspace(0, steps, cfg.curve_points + 1).round().astype(int)[1:]).tolist())
    curve: list[dict[str, Any]] = []
    if on_curve is not None:
        curve.append({"step": 0, "tokens": 0, **on_curve(model)})
    feed = iter(batches)
    on_step: Callable[[int, torch.Tensor], None] | None = getattr(batches, "on_step", None)
    running = torch.zeros((), dtype=torch.float64, device=device)
    since = 0
    t0 = time.perf_counter()
    tokens_per_step = cfg.batch_size * model_cfg.context
    for step in range(steps):
        batch = next(feed, None)
        if batch is None:
            raise ValueError(f"the batches ran out after {step} of {steps} steps")
        y = batch[1].to(device)
        losses = _step(model, opt, batch[0].to(device), y, lr_at(step, steps, cfg), cfg.grad_clip)
        running += target_mean(losses, y).double()
        since += 1
        if on_step is not None:
            on_step(step + 1, losses)
        if step + 1 in marks:
            point: dict[str, Any] = {"step": step + 1, "tokens": (step + 1) * tokens_per_step,
                                     "train_loss": round(float(running) / since, 5),
                                     "seconds": round(time.perf_counter() - t0, 2)}
            if on_curve is not None:
                point.update(on_curve(model))
            curve.append(point)
            running.zero_()
            since = 0
            if progress is not None:
                progress(step + 1, point["train_loss"])
    return model, curve
