"""``clusterclip tune --search weights``: search the mixture itself, under the cap, by proxy runs in rounds.

Round 0 runs the natural (size-proportional) mixture, temperature 0.5, uniform and Dirichlet draws
around the natural one (:func:`~clusterclip.mixture.propose`); every later round draws afresh like round 0
(``--predictor none``, the default: docs/tune.md's ablation found no fitted predictor better), or fits
``--predictor`` on the runs so far and runs :func:`~clusterclip.mixture.next_round`'s picks (exploit the
predicted best, explore far from every run) inside a trust region around the measured mixtures
(:mod:`clusterclip.mixture.trust`: a proposal is pulled back to within the swarm's own spacing of a measured
mixture, and flagged when it still extrapolates). The groups are merged, or the cap raised, until the
natural mixture is feasible on every split (:func:`.groups.feasible_grouping`, which says what it changed).
Every candidate passes the planner's exact check
(:func:`.groups.feasibility`) before it exists, so no infeasible mixture reaches a runner. A candidate is
measured by its mean paired difference to random on the first ``weight_pairs`` search pairs; the best
``1/eta`` then run on every search pair and are judged like the grid's (``assess``, ``choose``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from clusterclip.errors import ClusterClipError
from clusterclip.experiment.stats import paired_interval
from clusterclip.experiment.tune import groups as G
from clusterclip.experiment.tune.config import NO_PREDICTOR
from clusterclip.experiment.tune.halving import run_rung, search_pairs
from clusterclip.experiment.tune.pace import finalists_that_fit, fits, pace
from clusterclip.experiment.tune.proxies import Pair
from clusterclip.experiment.tune.search import Search
from clusterclip.mixture.predictors import make_predictor
from clusterclip.mixture.propose import RoundConfig, next_round, propose
from clusterclip.mixture.swarm import Swarm, from_arrays
from clusterclip.plan.config import DEFAULT_ORDER

ROUND0_TAUS = (1.0, 0.5, 0.0)
"""Round 0's first candidates: natural, temperature 0.5 and uniform over the groups."""


class Space:
    """The groups (from the reference split, merged until the natural mixture fits every split), every split's
    view and cluster-to-group map, the natural mixture, the cap and the feasibility hook."""

    def __init__(self, s: Search) -> None:
        splits = list(dict.fromkeys([p[0] for p in search_pairs(s.cfg)] + list(s.tune.check_split_seeds)))
        self.reference = splits[0]
        # every split's centroids in the reference split's embedding space, so that groups carry over
        self.views = {sp: s.runner.cluster_view(sp, self.reference) for sp in splits}  # type: ignore[attr-defined]
        self.asked = (min(s.tune.max_groups, len(self.views[self.reference].centroids)), s.tune.weight_cap(s.cfg))
        grouping = G.feasible_grouping(self.views, self.reference, s.tune.max_groups, self.asked[1])
        self.groups, self.of, self.natural, self.cap = grouping.groups, grouping.of, grouping.natural, grouping.cap
        self.changes = list(grouping.changes)
        self.m = len(self.groups)
        self.feasible = G.feasibility(self.views, self.of, self.cap)

    def concrete(self, spec: dict[str, Any], split: int) -> dict[str, Any]:
        return G.concrete_spec(spec, self.views[split], self.of[split])

    def describe(self) -> dict[str, Any]:
        return {"reference_split": self.reference, "groups": self.m, "max_repeat": self.cap,
                "groups_asked": self.asked[0], "max_repeat_asked": self.asked[1], "changes": self.changes,
                "group_centroids": self.groups.round(8).tolist(), "natural": self.natural.round(6).tolist(),
                "clusters_per_group": {str(sp): np.bincount(of, minlength=self.m).tolist()
                                       for sp, of in self.of.items()},
                "empty_groups": {str(sp): G.group_coverage(of, self.m) for sp, of in self.of.items()}}


def weight_spec(w: np.ndarray, cap: int, m: int) -> dict[str, Any]:
    """A weight candidate: ``weights-<hash>`` of its rounded group weights."""
    gw = [round(float(x), 6) for x in w]
    digest = hashlib.sha256(json.dumps([gw, cap, m]).encode()).hexdigest()[:8]
    return {"name": f"weights-{digest}", "strategy": "weights", "group_weights": gw, "groups": m,
            "max_repeat": cap, "order": DEFAULT_ORDER}


def _measure(s: Search, names: list[str], pairs: list[Pair]) -> dict[str, float]:
    """Mean paired objective difference to random on ``pairs`` of every candidate that finished them."""
    return {n: float(a["objective"]["mean"]) for n, a in run_rung(s, names, pairs).items()}


def _round_mixtures(s: Search, sp: Space, r: int, swarm: Swarm | None) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """The round's mixtures and, per mixture, what the predictor said of it: ``predicted`` (None in round 0),
    and in predicted rounds whether it explores, its distance to the nearest measured mixture before the trust
    region pulled it back (``distance``, ``pulled``) and why it still extrapolates (``flags``)."""
    n, seed = s.tune.weight_runs, s.tune.plan_seed * 1000 + r
    if swarm is None or len(swarm) < 2 or s.tune.predictor == NO_PREDICTOR:
        # no predictor, or not two measured mixtures to fit: fresh draws, not round 0's fixed mixtures again
        w = propose(sp.natural, n, seed=seed, taus=ROUND0_TAUS if r == 0 else (), feasible=sp.feasible)
        return w, [{"predicted": None} for _ in w]
    prop = next_round(swarm, make_predictor(s.tune.predictor), n,
                      RoundConfig(seed=seed, n_candidates=s.tune.weight_candidates), prior=sp.natural,
                      feasible=sp.feasible)
    pulled = prop.pulled()
    return prop.weights, [{"predicted": round(float(prop.predicted[i]), 6), "explore": bool(prop.explore[i]),
                           "distance": round(float(prop.distance[i]), 4), "pulled": bool(pulled[i]),
                           "trust_radius": round(float(prop.radius or 0.0), 4), "flags": list(prop.flags[i])}
                          for i in range(len(prop.weights))]


def _add(s: Search, sp: Space, w: np.ndarray) -> str:
    if not sp.feasible(w[None, :])[0]:  # the hook filtered every proposal: this never happens
        raise ClusterClipError(f"weight candidate {w.round(4).tolist()} is infeasible under max_repeat {sp.cap}")
    return s.add_spec(weight_spec(w, sp.cap, sp.m))


def weight_search(s: Search, write: Callable[[], None]) -> dict[str, Any]:
    """The rounds, then the best ``1/eta`` on every search pair: ``{"space", "rounds", "final"}`` (final:
    the finalists' assessments against random)."""
    sp = Space(s)
    s.weigh_with(sp.concrete)
    res: dict[str, Any] = {"space": sp.describe(), "rounds": [], "final": {}}
    s.record(weight_search=res)
    pairs = search_pairs(s.cfg)[: s.tune.weight_pairs]
    swarm: Swarm | None = None
    for r in range(s.tune.weight_rounds):
        if r and not _round_fits(s, sum(len(x["candidates"]) for x in res["rounds"]), len(pairs)):
            res["cut"] = (f"no round {r}: at {pace(s):.0f} s a run, its {s.tune.weight_runs} mixtures and the finals "
                          "would not fit the budget left")
            break
        mixtures, said = _round_mixtures(s, sp, r, swarm)
        if not len(mixtures):
            res["stopped"] = (f"round {r}: no mixture over the {sp.m} groups is feasible under max_repeat {sp.cap} "
                              "on every split (raise --weights-cap or lower --max-groups)")
            break
        names = [_add(s, sp, w) for w in mixtures]
        measured = _measure(s, names, pairs)
        rows = [{"name": n, "group_weights": s.specs[n]["group_weights"], "measured": measured.get(n), **said[i]}
                for i, n in enumerate(names)]
        res["rounds"].append({"round": r, "pairs": [list(p) for p in pairs], "candidates": rows})
        done = [i for i, n in enumerate(names) if n in measured]
        if done:
            more = from_arrays(mixtures[done], np.array([measured[names[i]] for i in done]),
                               [f"g{g}" for g in range(sp.m)], [f"r{r}-{i}" for i in done], "objective_minus_random")
            swarm = more if swarm is None else swarm.extend(more.weights, more.objective, more.ids)
        write()
        if s.stopped:
            break
    res["final"] = _finals(s, res["rounds"])
    write()
    return res


def _round_fits(s: Search, measured: int, p: int) -> bool:
    """Whether one more round and the finals after it fit the budget left (at the pace of the runs so far)."""
    n_pairs = len(search_pairs(s.cfg))
    top = max(1, math.ceil((measured + s.tune.weight_runs) / s.tune.eta))
    missing = sum(("random", q) not in s.cache for q in search_pairs(s.cfg)[p:])
    return fits(s, [s.tune.weight_runs * p, top * (n_pairs - p) + missing])


def _finals(s: Search, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The best ``1/eta`` measured candidates on every search pair; their assessments. When the budget stopped
    the finals, every finalist is judged on the longest prefix of the search pairs that all of them (and
    random) finished, so that they are compared on the same pairs."""
    seen = {c["name"]: c["measured"] for r in rounds for c in r["candidates"] if c["measured"] is not None}
    ranked = sorted(seen, key=lambda n: (seen[n], n))
    pairs = search_pairs(s.cfg)
    p = min(s.tune.weight_pairs, len(pairs))
    missing = sum(("random", q) not in s.cache for q in pairs[p:])
    asked = max(1, math.ceil(len(ranked) / s.tune.eta))
    top = ranked[: finalists_that_fit(s, asked, len(pairs) - p, missing)]
    if not top:
        return {}
    ws = s.results["weight_search"]
    if len(top) < asked:
        ws["cut_finals"] = f"{len(top)} finalist(s) instead of {asked}: at {pace(s):.0f} s a run, more would not fit"
    if not fits(s, [len(top) * (len(pairs) - p) + missing]):
        ws["late"] = (f"at {pace(s):.0f} s a run, the finals on every pair no longer fit the budget left: the search "
                      "will stop before a verdict (raise --max-minutes; the runs are reused)")
        if s.on_event is not None:
            s.on_event(f"tune: budget: {ws['late']}")
    scored: dict[str, Any] = run_rung(s, top, pairs)
    if len(scored) < len(top):  # the budget stopped the finals: judge every finalist on the pairs all finished
        done = max(k for k in range(len(pairs) + 1)
                   if all((n, p) in s.cache for n in ("random", *top) for p in pairs[:k]))
        scored = {n: s.assess(n, pairs[: max(done, s.tune.weight_pairs)]) for n in top}
    return {n: a for n, a in scored.items() if a is not None}


def weight_candidates(s: Search, ws: dict[str, Any], winner: str) -> dict[str, Any]:
    """The weight candidates as :func:`~.halving.candidates` lists the grid's."""
    out: dict[str, Any] = {}
    for r in ws["rounds"]:
        for c in r["candidates"]:
            final = ws["final"].get(c["name"])
            status = "chosen" if c["name"] == winner else "finalist" if final else \
                f"round {r['round']}" + ("" if c["measured"] is not None else " (not run: budget)")
            out[c["name"]] = {"spec": s.specs[c["name"]], "status": status, "rung": None,
                              "assessment": final or (s.assess(c["name"], [tuple(p) for p in r["pairs"]])
                                                      if c["measured"] is not None else None)}
    return out


def versus(s: Search, a: str, b: str) -> dict[str, Any] | None:
    """``a`` minus ``b`` on the objective over the search pairs both ran (paired bootstrap), or None."""
    obj = s.objective()
    pairs = [p for p in search_pairs(s.cfg) if (a, p) in s.cache and (b, p) in s.cache]
    if not pairs:
        return None
    return {"a": a, "b": b, "pairs": len(pairs),
            "minus": paired_interval([s.cache[(a, p)][obj] - s.cache[(b, p)][obj] for p in pairs])}
