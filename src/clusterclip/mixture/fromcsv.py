"""``clusterclip tune --from-csv``: fit a predictor on a swarm made elsewhere and propose a mixture.

No training: the swarm file (single-file format, or a RegMix mixture file with ``loss_csv``) is read,
the predictor fitted, and :func:`~clusterclip.mixture.propose.next_round` picks the predicted best
mixture (exploit only, around the swarm's mean). The weights file is JSON ``{domain: weight}``; when the
domains are cluster ids (``0``, ``1``, ...) it is a ``clusterclip plan --strategy weights --weights`` file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.mixture.predictors import make_predictor
from clusterclip.mixture.propose import RoundConfig, next_round
from clusterclip.mixture.swarm import MixtureError, Swarm, read_regmix, read_swarm


def load_any(path: str | Path, loss_csv: str | Path | None = None, target: str = "pile-cc",
             objective: str | None = None) -> Swarm:
    """A RegMix pair (``loss_csv`` given) or a single-file swarm."""
    if loss_csv is not None:
        return read_regmix(path, loss_csv, target)
    return read_swarm(path, objective)


def propose_from_swarm(swarm: Swarm, predictor: str = "loglinear", seed: int = 0,
                       n_candidates: int = 10_000) -> dict[str, Any]:
    """The predicted best mixture: ``{domains, weights, predicted, best_run, best_run_objective, runs}``."""
    if len(swarm) < 2:
        raise MixtureError(f"the swarm has {len(swarm)} run(s); a predictor needs at least 2")
    prop = next_round(swarm, make_predictor(predictor), 1,
                      RoundConfig(seed=seed, n_candidates=n_candidates, explore=0.0))
    if len(prop.weights) == 0:
        raise MixtureError("no candidate mixture far enough from the swarm's runs to propose")
    best = int(np.argmin(swarm.objective))
    return {"domains": list(swarm.domains), "weights": [float(x) for x in prop.weights[0]],
            "predicted": float(prop.predicted[0]), "predictor": predictor, "objective": swarm.objective_name,
            "best_run": swarm.ids[best], "best_run_objective": float(swarm.objective[best]), "runs": len(swarm)}


def write_weights(path: str | Path, domains: list[str], weights: list[float]) -> Path:
    """JSON ``{domain: weight}`` (every domain, zeros included)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(dict(zip(domains, weights, strict=True)), indent=1) + "\n", encoding="utf-8")
    return p


def format_proposal(res: dict[str, Any], top: int = 20) -> str:
    """The proposal as text: predicted objective, best run seen, the largest weights."""
    order = np.argsort(res["weights"])[::-1][:top]
    lines = [f"Predicted {res['objective']}: {res['predicted']:.4f} ({res['predictor']} fitted on {res['runs']} "
             f"runs; best run {res['best_run']}: {res['best_run_objective']:.4f})", "", "| domain | weight |",
             "|---|---|"]
    lines += [f"| {res['domains'][i]} | {res['weights'][i]:.4f} |" for i in order]
    return "\n".join(lines) + "\n"
