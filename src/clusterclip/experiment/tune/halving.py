"""Successive halving and the decision: every candidate gets a few (split, seed) pairs, the best ``1/eta``
get more, until the pairs or the budget run out; the winner must beat random with a ``better`` verdict (an
interval below zero over at least ``MIN_PAIRS`` pairs) within the micro tolerance, else random is chosen."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from clusterclip.experiment.config import ExperimentConfig
from clusterclip.experiment.stats import MIN_PAIRS, paired_interval
from clusterclip.experiment.tune.pace import keep_that_fits
from clusterclip.experiment.tune.pool import prefetch
from clusterclip.experiment.tune.proxies import Pair
from clusterclip.experiment.tune.search import Search


def search_pairs(cfg: ExperimentConfig) -> list[Pair]:
    """(split, seed) pairs in the order rungs take them: seed-major, so the first pairs span the splits."""
    return [(split, seed) for seed in cfg.seeds for split in cfg.splits()]


def rung_sizes(n_pairs: int, eta: int) -> list[int]:
    """Pairs per rung: 1, eta, eta**2, ... capped at (and ending with) all pairs."""
    sizes = [1]
    while sizes[-1] < n_pairs:
        sizes.append(min(n_pairs, sizes[-1] * eta))
    return sizes


def _rank_key(a: dict[str, Any]) -> tuple[bool, float]:
    return (not a["feasible"], a["objective"]["mean"])


def run_rung(s: Search, alive: list[str], pairs: Sequence[Pair]) -> dict[str, Any]:
    """Every alive candidate (and random) on ``pairs``; the assessment of those that finished."""
    prefetch(s, [(name, pair) for pair in pairs for name in ("random", *alive)])
    for pair in pairs:
        for name in ("random", *alive):
            if s.get(name, pair) is None:
                break
    scored = {n: s.assess(n, pairs) for n in alive}
    return {n: a for n, a in scored.items() if a is not None}


def halving(s: Search, write: Callable[[], None]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Successive halving: the trajectory (one entry per rung) and the last rung's assessments."""
    pairs = search_pairs(s.cfg)
    alive = [n for n in s.specs if n != "random"]
    trajectory: list[dict[str, Any]] = []
    final: dict[str, Any] = {}
    sizes = rung_sizes(len(pairs), s.tune.eta)
    for r, n in enumerate(sizes):
        scored = run_rung(s, alive, pairs[:n])
        complete = len(scored) == len(alive)
        if complete or not final:
            final = scored
        ranked = sorted(scored, key=lambda c: _rank_key(scored[c]))
        keep = ranked[: keep_that_fits(s, max(1, math.ceil(len(alive) / s.tune.eta)), sizes[r + 1:], n)]
        trajectory.append({"rung": r, "pairs": [list(p) for p in pairs[:n]], "alive": alive, "ranked": ranked,
                           "kept": keep, "complete": complete, "scores": scored})
        s.record(trajectory=trajectory)
        write()
        if s.stopped or n == len(pairs):
            break
        alive = keep
    return trajectory, final


def choose(final: dict[str, Any], tol: float, seen: dict[str, Any] | None = None) -> tuple[str, str]:
    """The winner and why: the feasible candidate of the last rung with the lowest objective whose verdict is
    ``better`` (interval below zero over at least ``MIN_PAIRS`` pairs), else random; ``seen`` (every
    candidate's latest assessment) names those refused for micro."""
    better = [n for n, a in final.items() if a["feasible"] and a["objective"]["verdict"] == "better"]
    if better:
        win = min(better, key=lambda n: final[n]["objective"]["mean"])
        o, m = final[win]["objective"], final[win]["micro"]
        return win, (f"{win} lowers the objective by {-o['mean']:.4f} nats/token vs random, 95 % interval "
                     f"[{o['low']:+.4f}, {o['high']:+.4f}] over {o['n']} pairs, with micro {m['mean']:+.4f} "
                     f"(tolerance {tol:g}); the lowest objective among {len(better)} candidate(s) better than random")
    infeasible = [n for n, a in (seen or final).items() if not a["feasible"] and a["objective"]["mean"] < 0]
    why = (f"no candidate beat random: none within the micro tolerance has an objective interval below zero over at "
           f"least {MIN_PAIRS} pairs")
    if infeasible:
        why += f" ({', '.join(sorted(infeasible))} lowered the objective, but raised micro by more than {tol:g})"
    unconfirmed = sorted(n for n, a in final.items() if a["objective"]["n"] < MIN_PAIRS and a["objective"]["mean"] < 0)
    if unconfirmed:
        n = min(final[c]["objective"]["n"] for c in unconfirmed)
        why += (f" ({', '.join(unconfirmed)} lowered the objective on only {n} pair{'s' * (n != 1)}, fewer than the "
                f"{MIN_PAIRS} a "
                "verdict needs: the search ended before they ran on more pairs, or it has fewer pairs than that; raise "
                "--max-runs or --max-minutes, or train more --seeds / --split-seeds, to confirm them)")
    return "random", why + "; random (the natural mixture) is the chosen plan"


def candidates(s: Search, trajectory: list[dict[str, Any]], winner: str) -> dict[str, Any]:
    """Every candidate: its options, how far it got, and its latest assessment (intervals vs random)."""
    out: dict[str, Any] = {"random": {"spec": s.specs["random"], "status": "baseline" if winner != "random"
                                      else "chosen (baseline)", "rung": len(trajectory) - 1, "assessment": None}}
    last_alive = trajectory[-1]["alive"] if trajectory else []
    for name in s.specs:
        if name == "random":
            continue
        rungs = [t for t in trajectory if name in t["scores"]]
        if not rungs:
            status = "not run (budget)"
        elif name == winner:
            status = "chosen"
        elif name in last_alive:
            status = "finalist"
        else:
            status = f"eliminated after rung {rungs[-1]['rung']}"
        out[name] = {"spec": s.specs[name], "status": status, "rung": rungs[-1]["rung"] if rungs else None,
                     "assessment": rungs[-1]["scores"][name] if rungs else None}
    return out


def unseen_check(s: Search, winner: str, names: Sequence[str] | None = None) -> dict[str, Any]:
    """Every candidate (of ``names``, default all) on split seeds the search never saw; the choice against
    the best fixed candidate there."""
    pairs = [(split, seed) for seed in s.cfg.seeds for split in s.tune.check_split_seeds]
    names = list(dict.fromkeys(["random", *(names if names is not None else s.specs), winner]))
    wanted = [(name, pair) for pair in pairs for name in names]
    prefetch(s, wanted, counted=False)
    for name, pair in wanted:
        s.get(name, pair, counted=False)
    scored = {n: s.assess(n, pairs) for n in names if n != "random"}
    fixed = {n: a for n, a in scored.items() if a is not None and a["feasible"]}
    best = min(fixed, key=lambda n: fixed[n]["objective"]["mean"], default="random")
    if fixed and fixed[best]["objective"]["mean"] > 0:
        best = "random"
    obj = s.objective()
    diffs = [s.cache[(winner, p)][obj] - s.cache[(best, p)][obj] for p in pairs]
    versus = paired_interval(diffs)
    return {"split_seeds": list(s.tune.check_split_seeds), "pairs": [list(p) for p in pairs], "candidates": scored,
            "chosen": winner, "best_fixed": best, "chosen_minus_best": versus, "holds": versus["low"] <= 0,
            "check": unseen_verdict(versus), "chosen_minus_random": scored.get(winner)}


def unseen_verdict(versus: dict[str, Any]) -> str:
    """What the unseen check concludes: ``holds`` (chosen minus best fixed has an interval reaching zero or
    below), ``does NOT hold``, or, with fewer than ``MIN_PAIRS`` pairs, that it cannot tell either way."""
    if versus.get("note"):
        return (f"cannot tell ({versus['note']}; add --check-split-seeds or --seeds for at least {MIN_PAIRS} "
                "unseen pairs)")
    return "holds" if versus["low"] <= 0 else "does NOT hold"
