"""A clip you can see: every capped plan records what its cap did, and when the cap never binds, the budget and
the cap that would make it bind are exact (checked against the planner itself)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip.contract.plan_notes import clip_note
from clusterclip.plan import PlanConfig, build_plan


def _labels(sizes: list[int]) -> np.ndarray:
    return np.repeat(np.arange(len(sizes)), sizes).astype(np.int32)


def test_a_binding_cap_records_the_documents_it_clipped_and_the_clusters_it_exhausted():
    labels = _labels([3, 40, 60])
    plan = build_plan(labels, PlanConfig(max_repeat=2, budget=120))
    counts = np.bincount(plan.order, minlength=labels.size)
    assert plan.stats["cap_binds"] and plan.stats["exhausted_clusters"] == [0]
    assert plan.stats["docs_at_cap"] == int((counts == 2).sum())
    note = clip_note(plan.stats)
    assert note is not None and "clipped" in note and "exhausted 1 clusters (0)" in note


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 30), min_size=2, max_size=6), cap=st.integers(1, 5),
       epochs=st.integers(1, 3), strategy=st.sampled_from(["clusterclip", "temperature"]))
def test_when_the_cap_does_not_bind_the_hints_are_exact(sizes, cap, epochs, strategy):
    labels = _labels(sizes)
    cfg = PlanConfig(strategy=strategy, max_repeat=cap, epochs=epochs)
    if epochs > cap:
        epochs = cap  # more epochs than the cap allows is infeasible (and says so)
        cfg = PlanConfig(strategy=strategy, max_repeat=cap, epochs=epochs)
    stats = build_plan(labels, cfg).stats
    if stats["cap_binds"]:
        assert stats["docs_at_cap"] > 0 and stats["exhausted_clusters"]
        return
    assert "never binds" in (clip_note(stats) or "")
    weights = np.asarray(sizes, float) ** (0.5 if strategy == "temperature" else 0.0)
    share = weights / weights.sum()  # of the budget, per cluster, without a cap
    if stats["bind_budget"] is not None:  # the cap surely binds there, and no smaller budget reaches it unrounded
        at = build_plan(labels, PlanConfig(strategy=strategy, max_repeat=cap, budget=stats["bind_budget"])).stats
        assert at["cap_binds"], stats
        assert ((stats["bind_budget"] - 1) * share < cap * np.asarray(sizes)).all()
    if stats["bind_cap"] is not None:  # likewise for the largest cap that surely binds at this budget
        budget = stats["budget"]
        assert build_plan(labels, PlanConfig(strategy=strategy, max_repeat=stats["bind_cap"], budget=budget)
                          ).stats["cap_binds"]
        assert (budget * share < (stats["bind_cap"] + 1) * np.asarray(sizes)).all()


def test_epochs_is_a_budget_in_passes_over_the_corpus():
    labels = _labels([5, 7, 9])
    two = build_plan(labels, PlanConfig(strategy="uniform", epochs=2))
    assert two.stats["length"] == 2 * labels.size and two.config.name().endswith("B2epochs-s0")
    assert PlanConfig(epochs=1) == PlanConfig() and PlanConfig(epochs=1).name() == PlanConfig().name()
    assert "epochs" not in PlanConfig().to_json() and PlanConfig(epochs=3).to_json()["epochs"] == 3


def test_the_default_run_makes_a_plan_where_the_clip_acts_and_the_report_shows_it(tmp_path):
    from clusterclip.cluster.config import ClusterConfig
    from clusterclip.contract.plan import PLAN_ORDER, plan_path
    from clusterclip.embed.config import EmbedConfig
    from clusterclip.pipeline import run_pipeline
    from clusterclip.report import build_report
    from tests.test_cli import make_corpus

    corpus = make_corpus(tmp_path / "c.jsonl", {"cooking": 120, "astronomy": 40, "finance": 12, "sailing": 8})
    summary = run_pipeline([corpus], tmp_path / "run", embed=EmbedConfig(embedder="hashing", extra={"dim": 32}),
                           cluster=ClusterConfig(k=4), progress=False)
    plans = summary["plans"]
    clip = next(p for name, p in plans.items() if name.startswith("clusterclip"))
    assert clip["cap_binds"] and clip["clusters_exhausted"] >= 1 and clip["docs_at_cap"] > 0
    orders = {name.split("-")[0]: np.load(tmp_path / "run" / plan_path(name, PLAN_ORDER)) for name in plans}
    assert not np.array_equal(orders["clusterclip"], orders["uniform"])
    html = build_report(tmp_path / "run", progress=False).read_text()
    assert "What the repetition cap did" in html and "clipped" in html
