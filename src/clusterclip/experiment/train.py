"""One training run: a fresh model trained on packed sequences, in order, with a fixed recipe.

Everything except the sequences (the sampling plan) is identical across strategies: model shape,
initialisation seed, AdamW with linear warm-up and cosine decay, gradient clipping, batch size and
number of steps. Batches are consecutive sequences of the packed plan, never reshuffled: the plan's
order *is* the training order.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from clusterclip.experiment.config import ModelConfig, TrainConfig
from clusterclip.experiment.data import Packed
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


def train_model(
    model_cfg: ModelConfig,
    cfg: TrainConfig,
    packed: Packed,
    steps: int,
    seed: int,
    device: str = "cpu",
    on_curve: Callable[[GPT], dict[str, Any]] | None = None,
    progress: Callable[[int, float], None] | None = None,
) -> tuple[GPT, list[dict[str, Any]]]:
    """Train a model seeded with ``seed`` for ``steps`` batches of consecutive packed sequences.

    Returns the model and its loss curve: at ``curve_points`` evenly spaced steps, the mean training
    loss since the previous point plus whatever ``on_curve(model)`` measures (held-out losses).
    """
    need = steps * cfg.batch_size
    if packed.inputs.shape[0] < need:
        raise ValueError(f"{packed.inputs.shape[0]} packed sequences, {need} needed for {steps} steps")
    torch.manual_seed(seed)
    model = GPT(model_cfg).to(device)
    model.train()
    opt = _optimizer(model, cfg)
    marks = set(np.unique(np.linspace(0, steps, cfg.curve_points + 1).round().astype(int)[1:]).tolist())
    curve: list[dict[str, Any]] = []
    if on_curve is not None:
        curve.append({"step": 0, "tokens": 0, **on_curve(model)})
    inputs = torch.from_numpy(packed.inputs[:need].astype(np.int64)).to(device)
    targets = torch.from_numpy(packed.targets[:need].astype(np.int64)).to(device)
    running = torch.zeros((), dtype=torch.float64, device=device)
    since = 0
    t0 = time.perf_counter()
    tokens_per_step = cfg.batch_size * model_cfg.context
    for step in range(steps):
        lo = step * cfg.batch_size
        x, y = inputs[lo:lo + cfg.batch_size], targets[lo:lo + cfg.batch_size]
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, cfg)
        loss = token_losses(model, x, y).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        running += loss.detach().double()
        since += 1
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
