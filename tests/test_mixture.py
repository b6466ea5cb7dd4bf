"""Mixture search: swarm CSV readers (both formats, every error), predictors on a known synthetic law,
seeded proposals on the simplex that pass the feasibility hook, the next-round rule, the trust region
(pull-back, flags, the refusal of a swarm whose weights never vary). Two integration tests read RegMix's
published swarm from ../shared/data/regmix (skipped when absent)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

from clusterclip.errors import ClusterClipError
from clusterclip.mixture.fromcsv import format_proposal, propose_from_swarm
from clusterclip.mixture.predictors import PREDICTORS, make_predictor
from clusterclip.mixture.propose import (
    RoundConfig,
    accept_all,
    dirichlet_candidates,
    next_round,
    propose,
    rank_candidates,
    rowwise,
    temperature_candidates,
)
from clusterclip.mixture.swarm import MixtureError, from_arrays, read_regmix, read_swarm, write_swarm
from clusterclip.mixture.trust import RADIUS_BOUNDS, TrustRegion, adaptive_radius, check_varies, hull_distance

REGMIX = Path(__file__).resolve().parents[2] / "shared" / "data" / "regmix"

MIX = """index,train_a,train_b,train_c
0,0.5,0.5,0.0
1,0.2,0.3,0.498
2,0.1,0.1,0.8
3,0.0,0.0,1.0
"""
LOSS = """index,metric/a_val_loss,metric/pile_cc_val_loss
3,1.0,4.0
1,1.5,4.5
0,2.0,5.0
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _pair(tmp_path: Path, mix: str = MIX, loss: str = LOSS) -> tuple[Path, Path]:
    return _write(tmp_path, "mix.csv", mix), _write(tmp_path, "loss.csv", loss)


# --- RegMix format -------------------------------------------------------------------------------

def test_regmix_joins_by_index_not_position_and_drops_unfinished_runs(tmp_path):
    s = read_regmix(*_pair(tmp_path))
    assert s.ids == ("0", "1", "3")  # mixture-file order; index 2 has no loss row
    assert s.dropped == ("2",)
    assert s.objective.tolist() == [5.0, 4.5, 4.0]
    assert s.objective_name == "metric/pile_cc_val_loss"
    assert s.domains == ("train_a", "train_b", "train_c")
    np.testing.assert_allclose(s.weights.sum(axis=1), 1.0, atol=1e-15)  # row 1 summed to 0.998
    assert s.weights[1, 2] == pytest.approx(0.498 / 0.998)


def test_regmix_target_by_exact_name(tmp_path):
    s = read_regmix(*_pair(tmp_path), target="metric/a_val_loss")
    assert s.objective.tolist() == [2.0, 1.5, 1.0]


@pytest.mark.parametrize(("mix", "loss", "kwargs", "match"), [
    (MIX, LOSS, {"strict": True}, "index '2' has no loss row"),
    (MIX, LOSS + "9,1.0,1.0\n", {}, "index '9' has a loss but no mixture"),
    (MIX.replace("index", "idx"), LOSS, {}, "no 'index' column"),
    (MIX, LOSS.replace("index", "run"), {}, "no 'index' column"),
    (MIX, LOSS, {"target": "wikipedia"}, "matches no column"),
    (MIX, LOSS, {"target": "val_loss"}, "matches columns"),
    (MIX.replace("0,0.5,0.5,0.0", "0,0.5,0.4,0.0"), LOSS, {}, "run 0: weights sum to 0.9"),
    (MIX.replace("0,0.5,0.5,0.0", "0,0.5,nan,0.5"), LOSS, {}, r"mix.csv:2: column 'train_b' is NaN"),
    (MIX.replace("0,0.5,0.5,0.0", "0,0.5,,0.5"), LOSS, {}, r"mix.csv:2: column 'train_b': '' is not a number"),
    (MIX.replace("0,0.5,0.5,0.0", "0,1.5,-0.5,0.0"), LOSS, {}, "run 0: a negative weight"),
    (MIX.replace("0,0.5,0.5,0.0", "0,inf,0.5,0.0"), LOSS, {}, "run 0: a NaN or infinite weight"),
    (MIX, LOSS.replace("3,1.0,4.0", "3,1.0,NaN"), {}, r"loss.csv:2: column 'metric/pile_cc_val_loss' is NaN"),
    (MIX, LOSS.replace("1,1.5,4.5", "3,1.5,4.5"), {}, r"loss.csv:3: 'index' '3' repeats line 2"),
    (MIX.replace("3,0.0,0.0,1.0", "3,0.0,1.0"), LOSS, {}, r"mix.csv:5: 3 fields, header has 4"),
    (MIX.replace("train_c", "train_b"), LOSS, {}, "duplicate column 'train_b'"),
    ("", LOSS, {}, "empty file"),
    ("index,train_a\n", LOSS, {}, "no rows"),
])
def test_regmix_bad_input_is_one_clear_error(tmp_path, mix, loss, kwargs, match):
    with pytest.raises(MixtureError, match=match) as info:
        read_regmix(*_pair(tmp_path, mix, loss), **kwargs)
    assert isinstance(info.value, ClusterClipError)


def test_missing_file_is_a_mixture_error(tmp_path):
    with pytest.raises(MixtureError, match="cannot read CSV"):
        read_regmix(tmp_path / "absent.csv", tmp_path / "absent2.csv")


# --- single-file format ------------------------------------------------------------------------

ONE = """id,w_web,w_code,loss
r1,0.7,0.3,3.1
r2,0.25,0.75,3.4
"""


def test_single_file_reads_ids_domains_and_objective(tmp_path):
    s = read_swarm(_write(tmp_path, "s.csv", ONE))
    assert s.ids == ("r1", "r2") and s.domains == ("web", "code") and s.objective_name == "loss"
    assert s.objective.tolist() == [3.1, 3.4]


def test_single_file_without_id_uses_line_numbers_and_named_objective_ignores_others(tmp_path):
    text = "w_a,w_b,loss,note\n0.5,0.5,1.0,7\n1.0,0.0,2.0,8\n"
    s = read_swarm(_write(tmp_path, "s.csv", text), objective="loss")
    assert s.ids == ("2", "3") and s.objective.tolist() == [1.0, 2.0]


@pytest.mark.parametrize(("text", "kwargs", "match"), [
    ("id,a,b,loss\nx,0.5,0.5,1\n", {}, "no weight columns"),
    ("id,w_,w_b,loss\nx,0.5,0.5,1\n", {}, "'w_' has no domain name"),
    ("id,w_a,w_b\nx,0.5,0.5\n", {}, "found none"),
    ("id,w_a,w_b,loss,acc\nx,0.5,0.5,1,2\n", {}, "found 'loss', 'acc'"),
    (ONE, {"objective": "perplexity"}, "no objective column 'perplexity'"),
    (ONE.replace("r2,0.25", "r1,0.25"), {}, "'id' 'r1' repeats line 2"),
    (ONE.replace("0.7,0.3", "0.7,0.7"), {}, "run r1: weights sum to 1.4"),
    (ONE.replace("3.4", "nan"), {}, r"s.csv:3: column 'loss' is NaN"),
    (ONE.replace("3.4", "abc"), {}, r"s.csv:3: column 'loss': 'abc' is not a number"),
])
def test_single_file_bad_input(tmp_path, text, kwargs, match):
    with pytest.raises(MixtureError, match=match):
        read_swarm(_write(tmp_path, "s.csv", text), **kwargs)


def test_write_then_read_round_trips(tmp_path):
    s = read_swarm(_write(tmp_path, "s.csv", ONE))
    write_swarm(tmp_path / "out.csv", s)
    t = read_swarm(tmp_path / "out.csv")
    assert (t.ids, t.domains, t.objective_name) == (s.ids, s.domains, s.objective_name)
    np.testing.assert_allclose(t.weights, s.weights, rtol=0, atol=1e-15)
    assert t.objective.tolist() == s.objective.tolist()


def test_from_arrays_subset_and_extend():
    s = from_arrays(np.array([[0.5, 0.5], [1.0, 0.0]]), np.array([1.0, 2.0]), ["a", "b"])
    assert s.subset([1]).ids == ("1",)
    t = s.extend(np.array([[0.0, 1.0]]), np.array([0.5]))
    assert len(t) == 3 and t.ids[-1] == "new-2" and t.objective.tolist() == [1.0, 2.0, 0.5]
    with pytest.raises(MixtureError, match="already in the swarm"):
        s.extend(np.array([[0.0, 1.0]]), np.array([0.5]), ids=["0"])
    with pytest.raises(MixtureError, match="sum to 2"):
        s.extend(np.array([[1.0, 1.0]]), np.array([0.5]))
    with pytest.raises(MixtureError, match="duplicate run id"):
        from_arrays(np.eye(2), np.ones(2), ids=["x", "x"])
    with pytest.raises(MixtureError, match="objective"):
        from_arrays(np.eye(2), np.array([1.0, np.nan]))
    with pytest.raises(MixtureError, match="weights must be"):
        from_arrays(np.eye(2), np.ones(3))


# --- predictors ---------------------------------------------------------------------------------

def _law(n: int, seed: int, noise: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """Mixtures over 5 domains and losses from a known log-linear law plus Gaussian noise."""
    rng = np.random.default_rng(seed)
    X = rng.dirichlet(np.full(5, 0.7), size=n)
    t = np.array([-2.0, -0.5, 0.3, 1.0, -1.2])
    y = 2.0 + 0.8 * np.exp(X @ t) + rng.normal(0.0, noise, n)
    return X, y


@pytest.mark.parametrize(("name", "floor"), [("loglinear", 0.95), ("linear", 0.85), ("lightgbm", 0.85)])
def test_predictor_recovers_a_known_mixing_law(name, floor):
    if name == "lightgbm":
        pytest.importorskip("lightgbm")
    X, y = _law(300, seed=1)
    p = make_predictor(name).fit(X[:200], y[:200])
    pred = p.predict(X[200:])
    assert pred.shape == (100,)
    assert spearmanr(pred, y[200:]).statistic > floor


def test_loglinear_fits_the_law_closely():
    X, y = _law(300, seed=2, noise=0.0)
    p = make_predictor("loglinear").fit(X, y)
    np.testing.assert_allclose(p.predict(X), y, atol=1e-4)
    assert p.c_ == pytest.approx(2.0, abs=1e-3)


def test_lightgbm_is_deterministic():
    pytest.importorskip("lightgbm")
    X, y = _law(120, seed=3)
    a = make_predictor("lightgbm").fit(X, y).predict(X)
    b = make_predictor("lightgbm").fit(X, y).predict(X)
    assert a.tobytes() == b.tobytes()


def test_lightgbm_missing_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "lightgbm", None)
    with pytest.raises(MixtureError, match=r"pip install 'clusterclip\[search\]'"):
        make_predictor("lightgbm")


def test_predictor_errors():
    X, y = _law(20, seed=4)
    with pytest.raises(MixtureError, match="unknown predictor 'gp'"):
        make_predictor("gp")
    with pytest.raises(RuntimeError, match="before fit"):
        make_predictor("linear").predict(X)
    p = make_predictor("linear").fit(X, y)
    with pytest.raises(MixtureError, match="fitted on 5 domains"):
        p.predict(X[:, :3])
    with pytest.raises(MixtureError, match="finite"):
        make_predictor("loglinear").fit(np.where(X > 0.5, np.nan, X), y)
    with pytest.raises(MixtureError, match="objective must be finite"):
        make_predictor("loglinear").fit(X, y[:-1])
    assert set(PREDICTORS) >= {"loglinear", "linear", "lightgbm"}


# --- proposals ---------------------------------------------------------------------------------

PRIOR = np.array([0.5, 0.3, 0.15, 0.05, 0.0])


def test_temperature_candidates():
    w = temperature_candidates(PRIOR, [1.0, 0.0, 0.5])
    np.testing.assert_allclose(w[0], PRIOR)
    np.testing.assert_allclose(w[1], [0.25, 0.25, 0.25, 0.25, 0.0])
    assert w[2, 0] < PRIOR[0] and w[2, 4] == 0.0


def test_proposals_are_seeded_bytes_identical_and_on_the_simplex():
    a = propose(PRIOR, 500, seed=7)
    b = propose(PRIOR, 500, seed=7)
    assert a.tobytes() == b.tobytes()
    assert a.tobytes() != propose(PRIOR, 500, seed=8).tobytes()
    assert a.shape == (500, 5) and (a >= 0).all()
    np.testing.assert_allclose(a.sum(axis=1), 1.0, atol=1e-12)
    d = dirichlet_candidates(PRIOR, 200, seed=1)
    assert d.tobytes() == dirichlet_candidates(PRIOR, 200, seed=1).tobytes()
    assert (d[:, 4] > 0).any()  # a domain with zero prior can still be drawn


def test_proposals_pass_the_feasible_hook():
    hook = rowwise(lambda m: m[0] <= 0.2)
    c = propose(PRIOR, 300, seed=0, feasible=hook)
    assert len(c) == 300 and (c[:, 0] <= 0.2).all()
    assert len(propose(PRIOR, 10, feasible=lambda m: np.zeros(len(m), dtype=bool))) == 0
    assert accept_all(c).all()
    with pytest.raises(MixtureError, match="boolean mask"):
        propose(PRIOR, 10, feasible=lambda m: np.ones(3, dtype=bool))
    with pytest.raises(MixtureError, match="boolean mask"):  # the Dirichlet draws' masks are checked too
        propose(PRIOR, 10, taus=(), feasible=lambda m: np.ones(len(m)))
    with pytest.raises(MixtureError, match="prior"):
        propose([0.0, 0.0], 5)
    with pytest.raises(MixtureError, match="concentration"):
        dirichlet_candidates(PRIOR, 5, concentration=(0.0, 1.0))


def test_a_tight_feasible_region_is_filled_by_pulling_draws_towards_the_prior():
    """Only mixtures within 0.02 (L1) of the prior pass, so random draws almost never do: the rejected draws
    are pulled towards the prior until they pass, giving every candidate asked for, distinct and feasible,
    each as far out as the region allows; an infeasible prior still gives nothing."""
    prior = np.asarray(PRIOR, dtype=float) / np.sum(PRIOR)

    def near(m):
        return np.abs(m - prior).sum(axis=1) <= 0.02

    c = propose(PRIOR, 12, seed=3, taus=(), feasible=near)
    assert len(c) == 12 and near(c).all() and len(np.unique(c.round(6), axis=0)) == 12
    assert np.abs(c - prior).sum(axis=1).min() > 0.019
    assert np.allclose(c.sum(axis=1), 1.0)
    assert np.array_equal(c, propose(PRIOR, 12, seed=3, taus=(), feasible=near))
    assert len(propose(PRIOR, 5, taus=(), feasible=lambda m: np.abs(m - 0.5).sum(axis=1) < 1e-9)) == 0


def test_rank_candidates_orders_by_prediction():
    X, y = _law(100, seed=5)
    p = make_predictor("loglinear").fit(X, y)
    order, pred = rank_candidates(p, X)
    assert (np.diff(pred[order]) >= 0).all()


def test_next_round_rule_and_determinism():
    X, y = _law(60, seed=6)
    swarm = from_arrays(X, y)
    cfg = RoundConfig(seed=3, n_candidates=2000, explore=0.25, min_distance=0.05)
    hook = rowwise(lambda m: m[3] <= 0.5)
    a = next_round(swarm, make_predictor("loglinear"), 8, cfg, feasible=hook)
    b = next_round(swarm, make_predictor("loglinear"), 8, cfg, feasible=hook)
    assert a.weights.tobytes() == b.weights.tobytes()
    assert a.weights.shape == (8, 5) and a.explore.sum() == 2 and not a.explore[:6].any()
    np.testing.assert_allclose(a.weights.sum(axis=1), 1.0, atol=1e-12)
    assert (a.weights[:, 3] <= 0.5).all()
    assert (np.diff(a.predicted[:6]) >= 0).all()  # exploitation picks come best first
    pts = np.vstack([swarm.weights, a.weights])
    dist = np.sqrt(((pts[:, None, :] - pts[None, :, :]) ** 2).sum(-1))
    assert dist[len(X):, :][~np.eye(len(pts), dtype=bool)[len(X):, :]].min() >= 0.05
    with pytest.raises(MixtureError):
        RoundConfig(explore=1.5)
    with pytest.raises(MixtureError, match="n >= 1"):
        next_round(swarm, make_predictor("linear"), 0)


# --- the published swarm -----------------------------------------------------------------------

@pytest.mark.integration
@pytest.mark.skipif(not REGMIX.exists(), reason=f"{REGMIX} not found (only in the project's workspace)")
def test_regmix_swarm_loglinear_ranks_the_1b_runs():
    train = read_regmix(REGMIX / "train_mixture_1m.csv", REGMIX / "train_pile_loss_1m.csv")
    test = read_regmix(REGMIX / "test_mixture_1B.csv", REGMIX / "test_pile_loss_1B.csv")
    assert (len(train), len(test), len(train.domains)) == (512, 64, 17)
    assert train.objective_name == "metric/the_pile_pile_cc_val_loss"
    p = make_predictor("loglinear").fit(train.weights, train.objective)
    assert spearmanr(p.predict(test.weights), test.objective).statistic > 0.9


# --- trust region: proposals that extrapolate are pulled back and flagged --------------------------

def _extrapolating_swarm():
    """60 runs over four domains in which ``d`` never exceeds 5 %, and the loss falls with ``d``: a linear law
    fitted on it runs off to an all-``d`` mixture it has never seen (RegMix's Enron case in small)."""
    rng = np.random.default_rng(3)
    w = rng.dirichlet(np.ones(4), size=60)
    w[:, 3] = rng.uniform(0, 0.05, 60)
    w[:, :3] *= (1 - w[:, 3:4]) / w[:, :3].sum(axis=1, keepdims=True)
    y = 4.0 - 3.0 * w[:, 3] + 0.2 * w[:, 0] + rng.normal(0, 0.001, 60)
    return from_arrays(w, y, ["a", "b", "c", "d"], objective_name="loss")


def test_a_proposal_outside_the_measured_mixtures_is_pulled_back_and_flagged():
    swarm = _extrapolating_swarm()
    cfg = RoundConfig(seed=0, n_candidates=2000, explore=0.0)
    free = next_round(swarm, make_predictor("linear"), 1, RoundConfig(seed=0, n_candidates=2000, explore=0.0,
                                                                      trust=False))
    assert free.weights[0, 3] > 0.9 and free.radius is None  # without the trust region: (almost) all d
    prop = next_round(swarm, make_predictor("linear"), 1, cfg)
    region = TrustRegion.around(swarm)
    assert prop.radius == region.radius == RADIUS_BOUNDS[0]  # a dense swarm: the smallest radius
    dist, _ = region.nearest(prop.weights)
    assert dist[0] <= region.radius + 1e-9 and prop.pulled()[0] and prop.distance[0] > region.radius
    assert prop.weights[0, 3] <= swarm.weights[:, 3].max() + region.radius + 1e-9
    hull, below = prop.flags[0]
    assert hull.startswith("outside the hull of the 60 measured mixtures (total variation 0.050 from it)")
    assert "beyond the measured range: d 0.100 (measured 0.001-0.050)" in hull
    assert below.startswith("predicted 3.73") and below.endswith(f"below every measured objective (lowest "
                                                                 f"{swarm.objective.min():.4g})")


def test_hull_distance_radius_and_flags_on_known_mixtures():
    runs = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    assert hull_distance(np.array([0.5, 0.5, 0.0]), runs) == pytest.approx(0.0, abs=1e-9)
    assert hull_distance(np.array([0.4, 0.4, 0.2]), runs) == pytest.approx(0.2)
    assert hull_distance(np.array([0.0, 0.0, 1.0]), runs) == pytest.approx(1.0)
    region = TrustRegion(runs, 0.1, best=3.0)
    assert region.flags(np.array([[0.5, 0.5, 0.0]]), np.array([3.5]), ("a", "b", "c")) == [[]]
    (hull, below), = region.flags(np.array([[0.4, 0.4, 0.2]]), np.array([2.0]), ("a", "b", "c"))
    assert hull == ("outside the hull of the 2 measured mixtures (total variation 0.200 from it); beyond the "
                    "measured range: c 0.200 (measured 0.000-0.000)")
    assert below == "predicted 2, below every measured objective (lowest 3)"
    moved, before = region.pull(np.array([[0.0, 0.0, 1.0], [0.95, 0.05, 0.0]]))
    assert before.tolist() == pytest.approx([1.0, 0.05])
    assert moved.tolist() == [pytest.approx([0.9, 0.0, 0.1]), pytest.approx([0.95, 0.05, 0.0])]
    assert adaptive_radius(np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])) == pytest.approx(0.1)
    assert adaptive_radius(np.array([[1.0, 0.0], [0.0, 1.0]])) == RADIUS_BOUNDS[1]


def test_a_swarm_whose_weights_never_vary_is_refused():
    swarm = from_arrays(np.tile([0.5, 0.3, 0.2], (5, 1)), np.arange(5.0), ["a", "b", "c"])
    with pytest.raises(MixtureError, match=r"^the swarm's 5 runs all have the same mixture: weights that never "
                                           r"vary tell a predictor nothing about them"):
        next_round(swarm, make_predictor("linear"), 2)
    with pytest.raises(MixtureError, match="same mixture"):
        check_varies(swarm)
    check_varies(_extrapolating_swarm())


@pytest.mark.skipif(not (REGMIX / "train_mixture_1m.csv").exists(), reason="no RegMix swarm here")
def test_regmix_linear_proposal_stays_near_the_runs_and_says_it_extrapolates():
    """Without the trust region the linear law proposed 98.8 % Enron emails (no run above 2.6 %) at a predicted
    3.59 where no run got below 5.08."""
    swarm = read_regmix(REGMIX / "train_mixture_1m.csv", REGMIX / "train_pile_loss_1m.csv")
    res = propose_from_swarm(swarm, "linear")
    enron = res["weights"][res["domains"].index("train_the_pile_enron_emails")]
    t = res["trust"]
    assert enron < 0.5 and t["distance"] <= t["radius"] + 1e-9
    assert any(f.startswith("outside the hull of the 512 measured mixtures") for f in t["flags"])
    assert any("below every measured objective (lowest 5.082)" in f for f in t["flags"])
    text = format_proposal(res)
    assert "Trust region: within 0.212 (total variation) of a measured run" in text
    assert "WARNING: extrapolation: predicted" in text
