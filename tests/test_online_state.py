"""The online state is a contract: ``OnlineMixer.state_dict()`` and ``online.json`` read back strictly (every bad
field one line naming it), a state is checked against the run and the mixer on load (its root, its chain, its
settings, K), every constructor argument is checked at once, ``online.json`` is covered by ``status --verify``,
and a run that changes under a mixer (``clusterclip add``, a re-clustering) is refused at the next update and on
resume, naming the command."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clusterclip.cli.main import main
from clusterclip.contract.cluster import CLUSTER_STAGE, LABELS
from clusterclip.contract.online import MIXER_RECORD, ONLINE_RECORD
from clusterclip.contract.plan import plan_path
from clusterclip.errors import ClusterClipError
from clusterclip.online.state import MixerState, OnlineRecord
from clusterclip.plan import PlanConfig
from clusterclip.plan.stage import plan_stage
from clusterclip.store import RunDir, save_npy
from tests.records import write_record

torch = pytest.importorskip("torch")

from clusterclip.torch.mixer import OnlineMixer
from tests.test_cli import make_corpus
from tests.test_online import ROOT, K, _train, run_dir  # noqa: F401 (run_dir: a run of 120 documents, root plan)


@pytest.fixture(scope="module")
def trained_base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A run after an online run (4 continuations), and the mixer state of a checkpoint after 96 positions."""
    run = tmp_path_factory.mktemp("online_state") / "run"
    labels = np.random.default_rng(0).integers(0, K, 120).astype(np.int32)
    save_npy(RunDir(run).path(LABELS), labels)
    write_record(RunDir(run), CLUSTER_STAGE, {"k": K}, "x", [LABELS], 0.0)
    plan_stage(RunDir(run), PlanConfig(budget=200, max_repeat=2))
    _train(run, batch_size=8, every=40)
    _, ckpt = _train(run, batch_size=8, every=40, stop=12)
    return run, ckpt["mixer"]


@pytest.fixture()
def trained(trained_base: tuple[Path, dict[str, Any]], tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """A copy of ``trained_base`` for one test."""
    shutil.copytree(trained_base[0], tmp_path / "run")
    return tmp_path / "run", copy.deepcopy(trained_base[1])


def _refused(run: Path, state: Any, **options: Any) -> str:
    """The one line ``load_state_dict`` refuses ``state`` with (a ClusterClipError, never a KeyError)."""
    mixer = OnlineMixer(run, ROOT, **{"every": 40, **options})
    with pytest.raises(ClusterClipError) as err:
        mixer.load_state_dict(state)
    assert len(str(err.value).splitlines()) == 1, str(err.value)
    return str(err.value)


def test_a_state_round_trips_through_its_typed_record(trained):
    run, state = trained
    assert state["format"] == 2 and state["run"]["k"] == 5 and state["run"]["documents"] == 120
    assert MixerState.from_json(json.loads(json.dumps(state))).to_json() == state
    mixer = OnlineMixer(run, ROOT, every=40)
    mixer.load_state_dict(state)
    assert mixer.state_dict() == state


EDITS = {
    "missing plan": (lambda s: s.pop("plan"), "missing field(s) plan"),
    "unknown field": (lambda s: s.update(surprise=1), "unknown field(s) surprise"),
    "every 0": (lambda s: s.update(every=0), "field 'every' must be an integer >= 1"),
    "start negative": (lambda s: s.update(start=-8), "field 'start' must be an integer >= 0"),
    "start not integer": (lambda s: s.update(start="80"), "field 'start' must be an integer >= 0"),
    "sums too short": (lambda s: s.update(sums=s["sums"][:2]), "2 loss sums"),
    "counts negative": (lambda s: s["counts"].__setitem__(0, -1.0), "field 'counts' must be a list of finite"),
    "weights negative": (lambda s: s["controller"]["weights"].__setitem__(0, -0.5), "weights must be finite, >= 0"),
    "weights text": (lambda s: s["controller"]["weights"].__setitem__(0, "x"), "field 'weights' must be a list"),
    "controller without weights": (lambda s: s["controller"].pop("weights"), "missing field(s) weights"),
    "controller seed -1": (lambda s: s["controller"].update(seed=-1), "seed must be an integer >= 0"),
    "controller step text": (lambda s: s["controller"].update(step="3"), "step must be an integer >= 0"),
    "format 3": (lambda s: s.update(format=3), "format 3 is not one this clusterclip reads"),
    "not a mapping": (lambda s: s.clear() or s.update(format=[1]), "format [1] is not one"),
    "another root": (lambda s: s.update(root="uniform-R2-docs-B200-s0"), "is of root plan 'uniform"),
    "start off its chain": (lambda s: s.update(start=s["start"] - 8), "field 'start' is 72, but plan"),
    "plan deleted": (lambda s: s.update(plan="gone"), "continues plan 'gone', which is not in the run"),
    "other K": (lambda s: s["run"].update(k=6), "re-clustered it (K 6 -> 5)"),
    "other labels": (lambda s: s["run"].update(labels="0" * 64), "`clusterclip cluster` re-clustered it"),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_every_bad_field_of_a_state_is_one_line_naming_it(trained, edit):
    run, state = trained
    change, expected = EDITS[edit]
    bad = copy.deepcopy(state)
    change(bad)
    assert expected in _refused(run, bad)


def test_a_plan_outside_the_roots_chain_is_refused(trained):
    run, state = trained
    other = plan_stage(RunDir(run), PlanConfig(strategy="uniform", budget=200, max_repeat=2)).name
    assert "is not in the chain of root plan" in _refused(run, {**state, "plan": other})


def test_explicit_settings_that_differ_from_the_checkpoint_are_refused(trained):
    run, state = trained
    assert "OnlineMixer(..., every=48) but the checkpoint's mixer state has every=40" in _refused(run, state, every=48)
    assert "rule='gradient'" in _refused(run, state, rule="gradient")
    assert "floor=0.2" in _refused(run, state, floor=0.2)
    mixer = OnlineMixer(run, ROOT, every=40, rule="bandit", floor=0.1)  # the checkpoint's own: accepted
    mixer.load_state_dict(state)
    assert mixer.plan == state["plan"]


def test_a_state_of_format_1_still_resumes(trained):
    run, state = trained
    old = {k: v for k, v in copy.deepcopy(state).items() if k != "run"}
    old["format"] = 1
    old["controller"] = {k: v for k, v in old["controller"].items() if k not in ("explore", "horizon")}
    old["controller"]["format"] = 1
    mixer = OnlineMixer(run, ROOT, every=40)
    mixer.load_state_dict(old)
    assert mixer.plan == state["plan"] and mixer.controller.explore == "odm"


@pytest.mark.parametrize(("options", "expected"), [
    ({"seed": -1}, "seed must be an integer >= 0"), ({"seed": "x"}, "seed must be an integer >= 0, got 'x'"),
    ({"seed": 2**64}, "seed must fit 64 bits"), ({"every": 0}, "every must be an integer >= 1"),
    ({"every": True}, "every must be an integer >= 1"), ({"every": 4.5}, "every must be an integer >= 1"),
    ({"floor": "x"}, "floor must be in [0, 1], got 'x'"), ({"alpha": float("nan")}, "alpha must be in [0, 1]"),
    ({"eta": -1.0}, "eta must be a number >= 0"), ({"florr": 0.1}, "florr is not a controller setting"),
    ({"explore": 0}, "explore must be 'odm'"), ({"explore": "fast"}, "explore must be 'odm'"),
    ({"rule": "greedy"}, "rule must be one of bandit, gradient"), ({"horizon": 0}, "horizon must be a number >= 1"),
])
def test_every_constructor_argument_is_checked_at_construction(run_dir, options, expected):  # noqa: F811
    with pytest.raises(ClusterClipError) as err:
        OnlineMixer(run_dir, ROOT, **{"every": 40, **options})
    assert expected in str(err.value) and len(str(err.value).splitlines()) == 1


def test_report_refuses_cluster_ids_it_would_have_to_truncate(run_dir):  # noqa: F811
    mixer = OnlineMixer(run_dir, ROOT, every=40)
    with pytest.raises(ClusterClipError, match=r"integer cluster ids .* such as 1\.5"):
        mixer.report([1.5, 2.0], [1.0, 1.0])
    with pytest.raises(ClusterClipError, match="integer cluster ids"):
        mixer.report(np.array(["1"]), [1.0])
    mixer.report(torch.tensor([1, 2]), torch.tensor([1.0, 2.0]))
    mixer.report([3.0], [1.0])  # whole numbers as floats are the same ids
    assert mixer.counts.tolist() == [0, 1, 1, 1, 0]


def test_a_sampler_state_without_consumed_is_one_line(run_dir):  # noqa: F811
    mixer = OnlineMixer(run_dir, ROOT, every=40)
    with pytest.raises(ClusterClipError, match="sampler state has no 'consumed'"):
        mixer.maybe_switch({"plan": ROOT})


def _online_json(run: Path, plan: str) -> Path:
    return run / plan_path(plan, ONLINE_RECORD)


def test_status_verify_covers_online_json(trained, capsys):
    run, state = trained
    leaf = state["plan"]
    assert (run / plan_path(leaf, MIXER_RECORD)).is_file()
    assert main(["status", str(run), "--verify"]) == 0
    assert f"plans/{leaf}/mixer: ok" in capsys.readouterr().out
    record = json.loads(_online_json(run, leaf).read_text())
    record["controller"]["weights"] = [0.6, 0.1, 0.1, 0.1, 0.1]  # a record edited by hand, still well formed
    _online_json(run, leaf).write_text(json.dumps(record))
    assert main(["status", str(run), "--verify"]) == 1
    out = capsys.readouterr().out
    assert f"{ONLINE_RECORD}: does not match the size and SHA-256 its mixer recorded" in out
    (run / plan_path(leaf, MIXER_RECORD)).unlink()
    assert main(["status", str(run), "--verify"]) == 1
    assert "not recorded with a checksum" in capsys.readouterr().out


def test_online_json_reads_strictly(trained):
    run, state = trained
    path = _online_json(run, state["plan"])
    record = json.loads(path.read_text())
    assert OnlineRecord.from_json(record, str(path)).to_json() == record
    assert record["changed"] is True and record["plan"] == state["plan"]
    with pytest.raises(ClusterClipError, match="field 'position' must be an integer >= 0"):
        OnlineRecord.from_json({**record, "position": -1}, str(path))
    with pytest.raises(ClusterClipError, match=r"missing field.*window"):
        OnlineRecord.from_json({k: v for k, v in record.items() if k != "window"}, str(path))
    with pytest.raises(ClusterClipError, match=r"unknown field\(s\) surprise"):
        OnlineRecord.from_json({**record, "surprise": 1}, str(path))
    with pytest.raises(ClusterClipError, match="format 99 is not one this clusterclip reads"):
        OnlineRecord.from_json({**record, "format": 99}, str(path))


# -- the run changes under a live mixer

@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A run built by the CLI (150 documents, K = 4) with a root plan of 200 draws, and 40 new documents."""
    tmp = tmp_path_factory.mktemp("online_changes")
    corpus = make_corpus(tmp / "c.jsonl", {"cooking": 60, "astronomy": 40, "finance": 30, "sailing": 20})
    new = make_corpus(tmp / "new.jsonl", {"sailing": 25, "cooking": 15}, seed=7)
    new.write_text(new.read_text().replace('"id": "', '"id": "new-'))
    assert main(["run", str(corpus), "--out", str(tmp / "run"), "--embedder", "hashing", "--k", "4",
                 "--strategies", "clusterclip", "--budget", "200", "--budget-unit", "docs", "--max-repeat", "2",
                 "-q"]) == 0
    return {"run": tmp / "run", "new": new}


def _copy(real_run: dict[str, Path], tmp: Path) -> Path:
    shutil.copytree(real_run["run"], tmp / "run")
    return tmp / "run"


def _steer(run: Path, positions: int) -> OnlineMixer:
    """A mixer on the root plan that trained ``positions`` positions of it (one report per 8)."""
    root = next(p.name for p in (run / "plans").iterdir())
    mixer = OnlineMixer(run, root, every=40)
    labels = np.load(run / "labels.npy")
    for i in range(positions // 8):
        mixer.report(labels[np.arange(8 * i, 8 * i + 8)], np.ones(8))
    return mixer


@pytest.mark.parametrize(("command", "expected"), [
    (["add", "{run}", "{new}", "-q"], "`clusterclip add` grew it from 150 to 190 documents"),
    (["cluster", "{run}", "--refit", "--force", "-q"], "`clusterclip cluster --refit` re-clustered it"),
    (["cluster", "{run}", "--k", "5", "--force", "-q"], "`clusterclip cluster` re-clustered it (K 4 -> 5)"),
])
def test_a_run_changed_under_a_live_mixer_is_refused_at_the_next_update(real_run, tmp_path, command, expected):
    run = _copy(real_run, tmp_path)
    mixer = _steer(run, 48)
    plans = sorted(p.name for p in (run / "plans").iterdir())
    assert main([a.format(run=run, new=real_run["new"]) for a in command]) == 0
    with pytest.raises(ClusterClipError) as err:
        mixer.maybe_update(48)
    message = str(err.value)
    assert expected in message and "the run changed under this online run" in message
    assert "start a new online run" in message and len(message.splitlines()) == 1
    assert sorted(p.name for p in (run / "plans").iterdir()) == plans, "no continuation written"


def test_a_run_changed_since_a_checkpoint_is_refused_on_resume(real_run, tmp_path):
    run = _copy(real_run, tmp_path)
    mixer = _steer(run, 48)
    assert mixer.maybe_update(48) is not None
    state = mixer.state_dict()
    assert main(["add", str(run), str(real_run["new"]), "-q"]) == 0
    with pytest.raises(ClusterClipError, match=r"planned over 150 documents but the run now holds 190 "
                                               r"\(`clusterclip add` since\)"):
        OnlineMixer(run, mixer.root, every=40)
    assert main(["plan", str(run), "--strategy", "clusterclip", "--budget", "200", "--max-repeat", "2",
                 "--force", "-q"]) == 0  # the root re-planned on the grown run, under its old name
    with pytest.raises(ClusterClipError, match="was saved before `clusterclip add` grew it from 150 to 190"):
        OnlineMixer(run, mixer.root, every=40).load_state_dict(state)
