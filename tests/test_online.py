"""Online mixing: the controller's rules and invariants, the chain of continuations a mixer writes (the cap over
the whole chain, the same bytes for the same losses), the plain-loop recipe of docs/sampling.md end to end, and
a 2-rank gloo run stopped mid-run and resumed at 1 or 3 ranks that trains exactly the chain's plans in order, and
2 ranks whose rank 0 fails to write a continuation both ending with an error instead of hanging."""

from __future__ import annotations

import inspect
import json
import math
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip.contract.cluster import CLUSTER_STAGE, LABELS
from clusterclip.contract.plan import PLAN_ORDER, PlanRecord, list_plans, plan_path, plan_stage_name
from clusterclip.online import Controller, ControllerError
from clusterclip.plan import PlanConfig
from clusterclip.plan.stage import plan_stage
from clusterclip.store import RunDir, load_npy, save_npy
from tests.records import write_record

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader

from clusterclip.torch.mixer import OnlineMixer, online_record
from tests.test_resume_loops import _free_port, run_ranks

DOCS = Path(__file__).resolve().parent.parent / "docs" / "sampling.md"
K = 5
CAP = 2


def online_loop(run_dir, plan_name, dataset, batch_size, every, checkpoint, train_step):
    mixer = OnlineMixer(run_dir, plan_name, every=every)   # rule="bandit" (ODM) or "gradient"
    if checkpoint is not None:
        mixer.load_state_dict(checkpoint["mixer"])          # the plan it reached, the controller, the window
    sampler = mixer.sampler(checkpoint["sampler"] if checkpoint is not None else None)
    while sampler is not None:                              # one DataLoader per plan of the chain
        loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=2)
        sampler = None
        for step, batch in enumerate(loader):
            losses = train_step(batch)                      # one loss per sample
            mixer.report(mixer.labels[batch], losses)      # summed per cluster, all-reduced over the ranks
            state = loader.sampler.state_dict(consumed_batches=step + 1, batch_size=batch_size)
            sampler = mixer.maybe_switch(state)             # every `every` positions: the next plan, from here
            yield {"sampler": state, "mixer": mixer.state_dict()}
            if sampler is not None:
                break


def test_docs_show_this_recipe():
    assert inspect.getsource(online_loop) in DOCS.read_text(encoding="utf-8"), \
        "docs/sampling.md does not show online_loop as tested"


# -- the controller

def _window(weights, losses, n=1000):
    """A window in which every cluster got exactly its share of ``n`` samples, each with its cluster's loss."""
    counts = np.asarray(weights) * n
    return np.asarray(losses) * counts, counts


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["bandit", "gradient"]), st.integers(1, 12), st.floats(0, 1), st.floats(0, 1),
       st.lists(st.tuples(st.lists(st.floats(0, 50), min_size=12, max_size=12),
                          st.lists(st.integers(0, 30), min_size=12, max_size=12)), min_size=1, max_size=6))
def test_weights_sum_to_one_and_the_floor_holds(rule, k, floor, smoothing, windows):
    c = Controller.start(k, rule, floor=floor, smoothing=smoothing)
    for sums, counts in windows:
        c = c.update(np.asarray(sums[:k]) * np.asarray(counts[:k]), counts[:k])
        w = np.asarray(c.weights)
        assert math.isclose(w.sum(), 1.0, rel_tol=1e-9)
        assert (w >= floor / k - 1e-12).all()
        again = Controller.from_json(json.loads(json.dumps(c.to_json())))
        assert json.dumps(again.to_json()) == json.dumps(c.to_json())


@pytest.mark.parametrize("rule", ["bandit", "gradient"])
def test_the_same_losses_give_the_same_state_and_json_round_trips(rule):
    rng = np.random.default_rng(1)
    a = b = Controller.start(6, rule, seed=3)
    for _ in range(4):
        sums, counts = rng.random(6) * 10, rng.integers(0, 5, 6)
        a, b = a.update(sums, counts), b.update(sums.copy(), counts.copy())
    assert json.dumps(a.to_json()) == json.dumps(b.to_json())
    again = Controller.from_json(json.loads(json.dumps(a.to_json())))
    assert json.dumps(again.to_json()) == json.dumps(a.to_json())
    assert again.update([1.0] * 6, [1] * 6).weights == a.update([1.0] * 6, [1] * 6).weights


def test_the_bandit_favours_the_cluster_with_the_higher_loss():
    c = Controller.start(4, "bandit", floor=0.0)
    losses = [1.0, 2.0, 3.0, 4.0]
    for _ in range(5):
        c = c.update(*_window(c.weights, losses), steps=100)
    assert np.all(np.diff(c.weights) > 0), c.weights
    assert c.losses == tuple(losses)
    assert c.rounds == 500, "a round is a training step, as in ODM"


def test_the_bandit_explores_uniformly_in_its_first_rounds():
    """ODM's exploration is 1/K while ``sqrt(ln K / (K t)) >= 1/K``: the first steps keep uniform weights."""
    c = Controller.start(4, "bandit", floor=0.0).update(*_window([0.25] * 4, [1.0, 2.0, 3.0, 4.0]), steps=2)
    assert np.allclose(c.weights, 0.25)


@pytest.mark.parametrize("k", [32, 1000, 10_000])
def test_the_default_exploration_acts_within_the_first_tenth_of_a_run_at_any_k(k):
    """ODM's schedule keeps the weights exactly uniform for K ln K steps (110 at K = 32, 92,000 at 10^4); the default
    (``explore=0.05`` of the run's horizon) lets an update after a tenth of a 1,000-step run move them, at any K."""
    losses = 1.0 + np.arange(k) / k
    uniform = np.full(k, 1.0 / k)
    start = Controller.start(k, "bandit", floor=0.0, horizon=1000)
    acted = start.update(*_window(uniform, losses, n=100 * k), steps=100)
    assert not acted.unchanged(start) and acted.weights[-1] > acted.weights[0], "more weight where the loss is higher"
    odm = Controller.start(k, "bandit", floor=0.0, horizon=1000, explore="odm")
    assert odm.update(*_window(uniform, losses, n=100 * k), steps=100).unchanged(odm), "ODM's: still uniform"
    assert start.exploration(50) == pytest.approx(1 / k) and start.exploration(51) < 1 / k


def test_the_moving_average_decays_per_step_over_a_window():
    one = Controller.start(2, "bandit", alpha=0.5).update([2.0, 4.0], [1, 1], steps=1)
    ten = Controller.start(2, "bandit", alpha=0.5).update([2.0, 4.0], [1, 1], steps=10)
    assert one.estimate == pytest.approx((0.5 * 2 / 0.5, 0.5 * 4 / 0.5))
    assert ten.estimate == pytest.approx(((1 - 0.5 ** 10) * 4, (1 - 0.5 ** 10) * 8))


def test_exponentiated_gradient_favours_the_cluster_whose_loss_falls_fastest():
    c = Controller.start(3, "gradient", floor=0.0)
    c = c.update(*_window(c.weights, [4.0, 4.0, 4.0]))
    assert np.allclose(c.weights, 1 / 3), "no decrease measured yet: weights stay"
    c = c.update(*_window(c.weights, [4.0, 3.0, 2.0]))
    assert c.weights[2] > c.weights[1] > c.weights[0]


@pytest.mark.parametrize("rule", ["bandit", "gradient"])
def test_a_cluster_without_samples_keeps_its_estimate(rule):
    c = Controller.start(3, rule).update([3.0, 6.0, 9.0], [1, 2, 3])
    d = c.update([0.0, 4.0, 12.0], [0, 2, 3])
    assert d.estimate[0] == c.estimate[0]
    assert math.isnan(d.losses[0])


def test_smoothing_keeps_the_previous_weights_and_the_floor_stops_starving():
    c = Controller.start(2, "gradient", eta=50.0, floor=0.0, smoothing=1.0).update([1.0, 1.0], [1, 1])
    assert c.update([1.0, 0.1], [1, 1]).weights == pytest.approx((0.5, 0.5))
    starved = Controller.start(2, "gradient", eta=50.0, floor=0.2).update([1.0, 1.0], [1, 1])
    assert min(starved.update([1.0, 0.1], [1, 1]).weights) >= 0.1 - 1e-12


def test_bad_settings_and_reports_are_refused():
    with pytest.raises(ControllerError, match="rule"):
        Controller.start(3, "greedy")
    with pytest.raises(ControllerError, match="floor"):
        Controller.start(3, floor=1.5)
    with pytest.raises(ControllerError, match="3 values"):
        Controller.start(3).update([1.0], [1])
    with pytest.raises(ControllerError, match="finite"):
        Controller.start(3).update([math.nan, 0, 0], [1, 0, 0])


# -- the mixer on a run directory

def _loss(documents, labels):
    """A loss per sample that depends on its cluster only, in quarters (sums are exact at any world size)."""
    return (1.0 + np.asarray(labels)[np.asarray(documents)]) / 4


@pytest.fixture()
def run_dir(tmp_path):
    run = RunDir(tmp_path / "run")
    labels = np.random.default_rng(0).integers(0, K, 120).astype(np.int32)
    save_npy(run.path(LABELS), labels)
    write_record(run, CLUSTER_STAGE, {"k": K}, "x", [LABELS], 0.0)
    plan_stage(run, PlanConfig(budget=200, max_repeat=CAP))
    return run.root


ROOT = PlanConfig(budget=200, max_repeat=CAP).name()


def chain_of(run_dir: Path, last: str) -> list[tuple[str, int | None]]:
    """``(plan, positions trained)`` root first, as the last plan's record lists its ancestors."""
    rec = PlanRecord.require(RunDir(run_dir), plan_stage_name(last), verify=False)
    return [(a["name"], int(a["consumed"])) for a in rec.chain()] + [(last, None)]


def trained_stream(run_dir: Path, last: str) -> list[int]:
    run = RunDir(run_dir)
    return [int(d) for name, n in chain_of(run_dir, last)
            for d in load_npy(run.path(plan_path(name, PLAN_ORDER)))[:n]]


def _train(run_dir, batch_size, every, checkpoint=None, stop=None):
    labels = np.load(Path(run_dir) / LABELS)
    trained, last = [], None
    for i, ckpt in enumerate(online_loop(run_dir, ROOT, range(labels.size), batch_size, every, checkpoint,
                                         lambda b: (trained.extend(b.tolist()), _loss(b, labels))[1])):
        last = ckpt
        if i + 1 == stop:
            break
    return trained, last


def test_a_plain_loop_trains_the_chain_in_order_and_the_cap_holds_over_it(run_dir):
    trained, last = _train(run_dir, batch_size=8, every=40)
    plan = last["mixer"]["plan"]
    chain = chain_of(run_dir, plan)
    assert len(chain) == 5, chain  # updates at 40, 80, 120, 160
    assert trained == trained_stream(run_dir, plan), "exactly the chain's plans, each up to its switch"
    assert len(trained) == 200, "the chain keeps the root's length"
    assert int(np.bincount(trained).max()) <= CAP, "no document drawn more often than the root's cap"
    record = online_record(run_dir, plan)
    assert record.parent == chain[-2][0] and record.position == 160 and record.plan == plan
    assert list(record.controller.weights) == last["mixer"]["controller"]["weights"]
    weights = np.asarray(record.controller.weights)
    assert weights.argmax() == K - 1, "the bandit moved weight towards the cluster with the highest loss"
    assert PlanRecord.require(RunDir(run_dir), plan_stage_name(plan), verify=False).config.strategy == "weights"


def test_the_same_losses_write_the_same_chain_bytes(tmp_path, run_dir):
    _, first = _train(run_dir, batch_size=8, every=40)
    plans = {name: (Path(run_dir) / "plans" / name / "plan.npy").read_bytes() for name in list_plans(RunDir(run_dir))}
    _, again = _train(run_dir, batch_size=8, every=40)
    assert again["mixer"] == first["mixer"]
    assert {n: (Path(run_dir) / "plans" / n / "plan.npy").read_bytes() for n in list_plans(RunDir(run_dir))} == plans


def test_a_resumed_plain_loop_reuses_the_plans_already_written(run_dir):
    whole, last = _train(run_dir, batch_size=8, every=40)
    before = set(list_plans(RunDir(run_dir)))
    head, ckpt = _train(run_dir, batch_size=8, every=40, stop=12)  # killed after 96 positions (2 updates)
    tail, end = _train(run_dir, batch_size=8, every=40, checkpoint=ckpt)
    assert head + tail == whole and end["mixer"] == last["mixer"]
    assert set(list_plans(RunDir(run_dir))) == before


def test_the_mixer_refuses_a_state_of_another_plan(run_dir):
    mixer = OnlineMixer(run_dir, ROOT, every=40)
    with pytest.raises(Exception, match="mixer is in plan"):
        mixer.position({"plan": "other", "consumed": 3})
    with pytest.raises(Exception, match="every"):
        OnlineMixer(run_dir, ROOT, every=0)


# -- two ranks, stopped, resumed at one

def _record_online(job: dict[str, Any], rank: int) -> None:
    checkpoint = torch.load(job["resume"], weights_only=False) if job["resume"] else None
    labels = np.load(Path(job["run"]) / LABELS)
    trained: list[list[int]] = []
    log = []

    def step(batch):
        trained.append(batch.tolist())
        return torch.as_tensor(_loss(batch, labels))

    for i, ckpt in enumerate(online_loop(job["run"], ROOT, range(labels.size), job["batch"], job["every"],
                                         checkpoint, step)):
        log.append({"batch": trained[-1], "plan": ckpt["mixer"]["plan"]})
        if i + 1 == job.get("stop"):
            if rank == 0:
                torch.save(ckpt, job["out"] + ".ckpt")
            break
    Path(f"{job['out']}.rank{rank}.json").write_text(json.dumps(log))


@pytest.mark.slow
@pytest.mark.parametrize(("ranks", "batch"), [(1, 8), (3, 2)])
def test_two_ranks_stopped_and_resumed_at_one_or_three_train_the_chain_in_order(run_dir, tmp_path, ranks, batch):
    common = {"run": str(run_dir), "every": 48, "record": _record_online}
    first = run_ranks(2, **common, batch=4, stop=9, out=str(tmp_path / "a"))  # 72 positions, one update at 48
    assert len({len(log) for log in first}) == 1
    steps = zip(*[[x["batch"] for x in log] for log in first], strict=True)
    head = [b[i] for step in steps for i in range(4) for b in step]  # position p on rank p % 2
    assert first[0][-1]["plan"] == first[1][-1]["plan"] != ROOT, "both ranks switched to the same plan"
    resumed = run_ranks(ranks, **common, batch=batch, resume=str(tmp_path / "a.ckpt"), out=str(tmp_path / "b"))
    last = resumed[0][-1]["plan"]
    assert {log[-1]["plan"] for log in resumed} == {last}, "every rank ends on the same plan"
    steps = zip(*[[x["batch"] for x in log] for log in resumed], strict=True)
    tail = [b[i] for step in steps for i in range(max(map(len, step))) for b in step if i < len(b)]
    stream = trained_stream(run_dir, last)
    trained = head + tail
    assert trained[:len(stream)] == stream, "the union of the chain's plans, in order"
    assert len(trained) - len(stream) < ranks, "at most the last plan's pad to a whole step of the ranks"
    assert len(chain_of(run_dir, last)) == 1 + (200 - 1) // 48
    assert int(np.bincount(stream).max()) <= CAP
    if ranks * batch == 8:  # a round of the bandit is a step: the same chain needs the same global batch
        alone, end = _train(run_dir, batch_size=8, every=48)
        assert alone == stream and end["mixer"]["plan"] == last, "the same chain as one rank from the start"


# -- rank 0 fails to write a continuation

WAIT = 30
"""Seconds the test gives the ranks to end (each takes about one)."""


def _disk_full(*args: Any, **kwargs: Any) -> None:
    raise OSError(28, "No space left on device")


def _update_with_a_failing_rank(rank: int, job: dict[str, Any]) -> None:
    import torch.distributed as dist

    import clusterclip.torch.mixer as mixer_module

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(job["port"]))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    if rank == job["failing"]:  # this forked process only: rank 0 cannot write, another cannot plan its switch
        setattr(mixer_module, "plan_stage" if rank == 0 else "continuation", _disk_full)
    try:
        mixer = OnlineMixer(job["run"], ROOT, every=40)
        mixer.report([rank], [1.0])
        mixer.maybe_update(40)
        outcome = "no error"
    except Exception as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    Path(f"{job['out']}.rank{rank}").write_text(outcome)
    deadline = time.monotonic() + 2 * WAIT
    other = Path(f"{job['out']}.rank{1 - rank}")
    while rank == job["failing"] and not other.exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # the failed rank lives on (as after a caught error): a peer's wait ends only by the protocol
    dist.destroy_process_group()


def _fail_on(failing: int, run_dir: Path, tmp_path: Path) -> list[str]:
    """Both ranks' outcomes when rank ``failing`` fails at an update (none may hang)."""
    job = {"run": str(run_dir), "port": _free_port(), "out": str(tmp_path / "out"), "failing": failing}
    ranks = [multiprocessing.get_context("fork").Process(target=_update_with_a_failing_rank, args=(r, job))
             for r in range(2)]
    for p in ranks:
        p.start()
    deadline = time.monotonic() + WAIT
    for p in ranks:
        p.join(timeout=max(deadline - time.monotonic(), 0))
    hung = [r for r, p in enumerate(ranks) if p.is_alive()]
    for p in ranks:
        if p.is_alive():
            p.kill()
            p.join()
    assert not hung, f"rank {hung} still running {WAIT} s after rank {failing} failed"
    return [Path(f"{job['out']}.rank{r}").read_text() for r in range(2)]


@pytest.mark.timeout(120)
def test_a_rank_0_that_fails_to_write_ends_every_rank_with_an_error(run_dir, tmp_path):
    outcome = _fail_on(0, run_dir, tmp_path)
    assert outcome[0] == "OSError: [Errno 28] No space left on device", "rank 0 raises its own error"
    assert outcome[1].startswith("ClusterClipError: "), outcome[1]
    assert f"rank 0 failed to write the continuation of plan {ROOT!r} at position 40" in outcome[1]
    assert "the log of rank 0" in outcome[1]
    assert list_plans(RunDir(run_dir)) == [ROOT]


@pytest.mark.timeout(120)
def test_a_rank_that_fails_after_rank_0_wrote_is_named_rightly(run_dir, tmp_path):
    """Only rank 0 writes: when another rank fails, rank 0 (which wrote the continuation) says that rank failed to
    switch to it, not to write it."""
    outcome = _fail_on(1, run_dir, tmp_path)
    assert outcome[1] == "OSError: [Errno 28] No space left on device"
    written = [name for name in list_plans(RunDir(run_dir)) if name != ROOT]
    assert len(written) == 1
    assert outcome[0] == (f"ClusterClipError: {run_dir}: rank 1 failed to switch to the continuation of plan {ROOT!r} "
                          f"at position 40 ({written[0]!r}, which rank 0 wrote); the error is in the log of rank 1")
