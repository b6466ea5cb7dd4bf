"""``clusterclip tune --from-csv``: fit a predictor on a swarm made elsewhere and propose a mixture.

No training: the swarm file (single-file format, or a RegMix mixture file with ``loss_csv``) is read,
the predictor fitted, and :func:`~clusterclip.mixture.propose.next_round` picks the predicted best
mixture (exploit only, around the swarm's mean) inside the trust region around the swarm's runs
(:mod:`clusterclip.mixture.trust`). The result says how far the proposal was pulled back, which run is
nearest, and why it still extrapolates (outside the runs' hull, a prediction below every measured loss).
A swarm whose weights never vary is refused. The weights file is JSON ``{domain: weight}``; when the
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
from clusterclip.mixture.trust import TrustRegion


def load_any(path: str | Path, loss_csv: str | Path | None = None, target: str = "pile-cc",
             objective: str | None = None) -> Swarm:
    """A RegMix pair (``loss_csv`` given) or a single-file swarm."""
    if loss_csv is not None:
        return read_regmix(path, loss_csv, target)
    return read_swarm(path, objective)


def propose_from_swarm(swarm: Swarm, predictor: str = "loglinear", seed: int = 0,
                       n_candidates: int = 10_000, trust_radius: float | None = None) -> dict[str, Any]:
    """The predicted best mixture inside the trust region: ``{domains, weights, predicted, best_run,
    best_run_objective, runs, trust}``; ``trust`` holds the radius, the distance to the nearest run before the
    pull, that run (id, objective, rank among the runs) and the flags (empty: no extrapolation)."""
    if len(swarm) < 2:
        raise MixtureError(f"the swarm has {len(swarm)} run(s); a predictor needs at least 2")
    prop = next_round(swarm, make_predictor(predictor), 1,
                      RoundConfig(seed=seed, n_candidates=n_candidates, explore=0.0, trust_radius=trust_radius))
    if len(prop.weights) == 0:
        raise MixtureError("no candidate mixture far enough from the swarm's runs to propose")
    best = int(np.argmin(swarm.objective))
    dist, near = TrustRegion.around(swarm, prop.radius).nearest(prop.weights)
    j = int(near[0])
    trust = {"radius": prop.radius, "distance_before": round(float(prop.distance[0]), 6),
             "pulled": bool(prop.pulled()[0]), "distance": round(float(dist[0]), 6), "nearest_run": swarm.ids[j],
             "nearest_run_objective": float(swarm.objective[j]),
             "nearest_run_rank": int((swarm.objective < swarm.objective[j]).sum()) + 1, "flags": list(prop.flags[0])}
    return {"domains": list(swarm.domains), "weights": [float(x) for x in prop.weights[0]],
            "predicted": float(prop.predicted[0]), "predictor": predictor, "objective": swarm.objective_name,
            "best_run": swarm.ids[best], "best_run_objective": float(swarm.objective[best]), "runs": len(swarm),
            "trust": trust}


def write_weights(path: str | Path, domains: list[str], weights: list[float]) -> Path:
    """JSON ``{domain: weight}`` (every domain, zeros included)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(dict(zip(domains, weights, strict=True)), indent=1) + "\n", encoding="utf-8")
    return p


def format_proposal(res: dict[str, Any], top: int = 20) -> str:
    """The proposal as text: predicted objective, best run seen, the trust region and any extrapolation
    warning, the largest weights."""
    order = np.argsort(res["weights"])[::-1][:top]
    lines = [f"Predicted {res['objective']}: {res['predicted']:.4f} ({res['predictor']} fitted on {res['runs']} "
             f"runs; best run {res['best_run']}: {res['best_run_objective']:.4f})"]
    t = res.get("trust")
    if t:
        moved = (f"pulled back from {t['distance_before']:.3f} to {t['distance']:.3f}" if t["pulled"] else
                 f"{t['distance']:.3f}")
        lines.append(f"Trust region: within {t['radius']:.3f} (total variation) of a measured run; this mixture is "
                     f"{moved} from run {t['nearest_run']} (measured {t['nearest_run_objective']:.4f}, rank "
                     f"{t['nearest_run_rank']} of {res['runs']}).")
        lines += [f"WARNING: extrapolation: {f}." for f in t["flags"]]
    lines += ["", "| domain | weight |", "|---|---|"]
    lines += [f"| {res['domains'][i]} | {res['weights'][i]:.4f} |" for i in order]
    return "\n".join(lines) + "\n"
