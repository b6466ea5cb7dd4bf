"""Online mixing as data: the cluster weights an ``OnlineMixer`` chose over a run, per chain of continuations.

A mixer writes, at every update, a continuation plan with ``online.json`` beside its ``plan.json`` (the controller
state that chose its weights and the window of losses behind it). A *chain* is a root plan followed by its online
continuations in order, each trained from its parent's switch position; this module rebuilds the chains from those
records and reduces the weights to what a chart and a table can show at any K (:class:`WeightTrack`,
:class:`OnlineUpdate`). ``online.json`` is read as :class:`clusterclip.online.state.OnlineRecord`, not through
:mod:`clusterclip.torch.mixer`, which imports torch: the report runs where torch is not installed.

The same weights of ``clusterclip experiment``'s proxy runs are drawn by :mod:`clusterclip.charts.online`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial

import numpy as np

from clusterclip.charts.online import Draw, WeightTrack, plot_online_weights, weight_track
from clusterclip.contract.online import MIXER_RECORD, ONLINE_RECORD
from clusterclip.contract.plan import plan_path
from clusterclip.errors import ClusterClipError
from clusterclip.online.controller import uniform_steps
from clusterclip.online.state import OnlineRecord, read_online_record
from clusterclip.report.load import PlanView, RunView
from clusterclip.report.metrics import effective_number
from clusterclip.store import RunDir

TOP_MOVES = 3
"""Clusters named per update as gaining and as losing most weight."""
MAX_CHAINS = 8


@dataclass(frozen=True)
class OnlineUpdate:
    """One row of a chain's table: the weights that held from ``position`` (``step`` 0: the controller's uniform
    start, trained on the root plan's own strategy). ``gained``/``lost``: (cluster, weight before, after) of the
    clusters that moved most; ``window_loss``: mean loss of the window behind the update over its ``samples``;
    ``effective``: exp(entropy) of the weights; ``realised_tv``: total variation between the weights and the
    mixture the plan realised until the next switch (None when not recorded)."""

    plan: str
    position: int
    rule: str
    step: int
    gained: tuple[tuple[int, float, float], ...]
    lost: tuple[tuple[int, float, float], ...]
    window_loss: float | None
    samples: float | None
    effective: float
    realised_tv: float | None
    changed: bool = True


@dataclass(frozen=True)
class OnlineChain:
    """A root plan and its online continuations up to ``leaf``: the table rows, the chart's data and file."""

    root: str
    leaf: str
    every: int | None
    end: int
    updates: tuple[OnlineUpdate, ...]
    track: WeightTrack
    chart: str
    unchanged: str | None = None
    """How many updates left the weights as they were, and why when the bandit's exploration explains it."""


@dataclass(frozen=True)
class OnlineSection:
    """The online mixing section: one chain per leaf continuation, notes on what was left out, charts to draw."""

    chains: tuple[OnlineChain, ...]
    notes: tuple[str, ...]
    charts: tuple[tuple[str, Draw], ...]


def _online_records(run: RunView, notes: list[str]) -> dict[str, OnlineRecord]:
    """The ``online.json`` of every plan that has one, by plan name, once it matches the checksum its
    ``mixer.json`` records and reads as a mixer's record with K weights (the clustering's, or without one the
    first record's); any other is left out with a note, so no weights are drawn that no plan was built with."""
    found: dict[str, OnlineRecord] = {}
    k = run.k or None
    rd = RunDir(run.root)
    for plan in run.plans:
        folder = plan_path(plan.name)
        if not (run.root / folder / ONLINE_RECORD).exists() and not (run.root / folder / MIXER_RECORD).exists():
            continue
        try:
            rec = read_online_record(rd, plan.name, folder)
        except (OSError, ClusterClipError) as exc:
            notes.append(f"{exc}; plan {plan.name} left out of online mixing")
            continue
        if rec is None:
            continue
        if k is not None and len(rec.controller.weights) != k:
            notes.append(f"plan {plan.name}: {ONLINE_RECORD} holds {len(rec.controller.weights)} weights, not the "
                         f"run's K = {k}; left out of online mixing")
            continue
        found[plan.name] = rec
        k = len(rec.controller.weights)
    return found


def _chain(leaf: str, records: Mapping[str, OnlineRecord]) -> tuple[str, list[str]]:
    """The plan a leaf's chain starts from and its online plans in order (following ``parent``)."""
    names = [leaf]
    parent = records[leaf].parent
    while parent in records and parent not in names:
        names.append(parent)
        parent = records[parent].parent
    return parent, names[::-1]


def _realised(plan: PlanView | None, consumed: int) -> np.ndarray | None:
    """The cluster counts a plan's first ``consumed`` draws realised, from its recorded mixture windows (the window
    that straddles ``consumed`` left out; the whole plan when it is all trained); None when not recorded."""
    if plan is None or plan.mixture is None or not plan.window:
        return None
    m = np.asarray(plan.mixture, np.float64)
    rows = len(m) if plan.n_draws is not None and consumed >= plan.n_draws else consumed // plan.window
    return m[:rows].sum(axis=0) if rows else None


def _moves(before: np.ndarray, after: np.ndarray) -> tuple[tuple[tuple[int, float, float], ...], ...]:
    """The :data:`TOP_MOVES` clusters gaining most weight and those losing most."""
    d = after - before
    up, down = np.argsort(-d, kind="stable")[:TOP_MOVES], np.argsort(d, kind="stable")[:TOP_MOVES]
    return tuple(tuple((int(c), float(before[c]), float(after[c])) for c in idx if sign * d[c] > 0)
                 for idx, sign in ((up, 1), (down, -1)))


def _window_loss(rec: OnlineRecord) -> tuple[float | None, float]:
    """The mean loss of the window behind an update and its number of samples."""
    n = float(np.nansum(np.asarray(rec.window.counts, np.float64)))
    return (float(np.nansum(np.asarray(rec.window.sums, np.float64))) / n if n > 0 else None), n


def _table(names: list[str], records: Mapping[str, OnlineRecord], base: str, starts: list[int],
           weights: np.ndarray, realised: np.ndarray) -> tuple[OnlineUpdate, ...]:
    """The chain's rows: the uniform start on ``base`` (when the chain starts at position 0), then each update."""
    rule = records[names[0]].controller.rule
    rows = [(base, None)] * (len(starts) - len(names)) + [(n, records[n]) for n in names]
    effective = effective_number(weights, axis=1)
    tv = 0.5 * np.abs(realised - weights).sum(axis=1)
    out = []
    for i, (plan, rec) in enumerate(rows):
        gained, lost = _moves(weights[i - 1], weights[i]) if i else ((), ())
        loss, samples = _window_loss(rec) if rec is not None else (None, None)
        step = rec.controller.step if rec is not None else 0
        changed = rec is None or (rec.changed if rec.changed is not None else
                                  not np.array_equal(weights[i - 1], weights[i]) or not i)
        out.append(OnlineUpdate(plan, starts[i], rule if rec is not None else "start", step, gained, lost, loss,
                                samples, float(effective[i]), None if math.isnan(tv[i]) else float(tv[i]), changed))
    return tuple(out)


def _unchanged(updates: tuple[OnlineUpdate, ...], last: OnlineRecord) -> str | None:
    """``"n of m"`` updates that left the weights as they were, with the bandit's uniform steps when it explores."""
    done = [u for u in updates if u.step]
    still = sum(not u.changed for u in done)
    if not still:
        return None
    ctrl = last.controller
    why = ""
    if ctrl.rule == "bandit":
        steps = uniform_steps(len(ctrl.weights), ctrl.explore, ctrl.horizon)
        why = f": the bandit keeps them uniform for its first {steps:,.0f} training steps (explore={ctrl.explore!r})"
    return f"{still} of {len(done)}{why}"


def online_chain(leaf: str, records: Mapping[str, OnlineRecord], plans: Mapping[str, PlanView], chart: str,
                 notes: list[str]) -> OnlineChain:
    """The chain that ends in ``leaf``, from its records and the plans' recorded mixtures."""
    base, names = _chain(leaf, records)
    root = records[names[0]].root
    from_root = base == root
    if not from_root:
        notes.append(f"online chain ending in {leaf}: plan {base} has no {ONLINE_RECORD} (missing or unreadable), "
                     f"so its weights before position {records[names[0]].position:,} are not shown")
    rows = [np.asarray(records[n].controller.weights, np.float64) for n in names]
    k = len(rows[0])
    weights = np.vstack(([np.full(k, 1.0 / k)] if from_root else []) + rows)
    starts = ([0] if from_root else []) + [records[n].position for n in names]
    leaf_plan = plans.get(leaf)
    end = starts[-1] + (leaf_plan.n_draws if leaf_plan is not None and leaf_plan.n_draws else 1)
    segment_plans = ([base] if from_root else []) + names
    bounds = [*starts[1:], end]
    realised = np.full_like(weights, np.nan)
    for i, name in enumerate(segment_plans):
        counts = _realised(plans.get(name), bounds[i] - starts[i])
        if counts is not None and counts.size == k and counts.sum() > 0:
            realised[i] = counts / counts.sum()
    table = _table(names, records, base, starts, weights, realised)
    return OnlineChain(root, leaf, records[names[0]].every, end, table,
                       weight_track(weights, starts, end, realised), chart, _unchanged(table, records[names[-1]]))


def online_section(run: RunView) -> OnlineSection | None:
    """The online mixing section of a run (None when no plan has an ``online.json``)."""
    notes: list[str] = []
    records = _online_records(run, notes)
    if not records and not notes:
        return None
    parents = {rec.parent for rec in records.values()}
    leaves = sorted((records[n].root, n) for n in records if n not in parents)
    if len(leaves) > MAX_CHAINS:
        notes.append(f"{len(leaves)} online chains; the section shows the first {MAX_CHAINS} (by root and name)")
    plans = {p.name: p for p in run.plans}
    chains = [online_chain(leaf, records, plans, f"online-{plans[leaf].slug}.png", notes)
              for _, leaf in leaves[:MAX_CHAINS]]
    draws = [(c.chart, partial(plot_online_weights, c.track, title=f"Online weights: {c.root} -> {c.leaf}",
                               xlabel="training position (draws)")) for c in chains]
    return OnlineSection(tuple(chains), tuple(notes), tuple(draws))
