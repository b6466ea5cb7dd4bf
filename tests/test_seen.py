"""``status --at-step`` / ``where_in_data``: where a run is in its data, checked against a brute-force count."""

from __future__ import annotations

import numpy as np
import pytest

from clusterclip.cli.main import main
from clusterclip.contract.corpus import load_fields
from clusterclip.contract.plan import PLAN_TIERS, list_plans, plan_path
from clusterclip.plan.axes import where_in_data
from clusterclip.store import RunDir, load_npy
from tests.test_strata_consumers import topic_corpus


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("seen")
    topic_corpus(tmp / "c.jsonl", docs=240, width=15, length=30, seed=0, sources=("web", "books", "code"))
    out = tmp / "run"
    assert main(["embed", str(tmp / "c.jsonl"), "--out", str(out), "--embedder", "hashing", "--id-field", "id",
                 "--keep-fields", "quality,source", "-q"]) == 0
    assert main(["cluster", str(out), "--k", "4", "-q"]) == 0
    assert main(["plan", str(out), "--strata", "cluster,quality:3", "--tier-weights", "0,1,3",
                 "--max-repeats-by-tier", "0,2,6", "--epochs", "2", "-q"]) == 0
    return out


def brute_force(order, labels, names, position, batch):
    counts = {}
    rows = []
    seen_at = {}
    for pos, doc in enumerate(order[:position].tolist()):
        counts[doc] = counts.get(doc, 0) + 1
        seen_at.setdefault(doc, []).append(pos)
    for g, name in enumerate(names):
        docs = [d for d in range(len(labels)) if labels[d] == g]
        passes = min((counts.get(d, 0) for d in docs), default=0)
        steps = [max(seen_at[d][p] for d in docs) // batch + 1 for p in range(passes)]
        rows.append({"group": name, "documents": len(docs), "seen": sum(counts.get(d, 0) > 0 for d in docs),
                     "passes": passes, "pass_steps": steps})
    return rows


@pytest.mark.parametrize(("step", "batch"), [(0, 8), (7, 8), (31, 16), (1000, 16)])
def test_at_step_agrees_with_a_brute_force_count(run, step, batch):
    (name,) = list_plans(RunDir(run))
    result = where_in_data(run, name, step, batch, ["cluster", "tier", "source"])
    order = load_npy(run / plan_path(name, "plan.npy"))
    position = min(step * batch, order.size)
    assert result["position"] == position
    labels = {"cluster": load_npy(run / "labels.npy"), "tier": load_npy(run / plan_path(name, PLAN_TIERS)),
              "source": load_fields(RunDir(run), ["source"])["source"].values}
    for axis, table in result["groups"].items():
        want = brute_force(order, np.asarray(labels[axis]), [r["group"] for r in table], position, batch)
        assert [{k: r[k] for k in want[0]} for r in table] == want, axis
    tiers = {r["group"]: r for r in result["groups"]["tier"]}
    assert tiers["0"]["seen"] == 0  # a tier at weight 0 is never reached


def test_the_status_command_prints_the_table_and_refuses_bad_settings(run, capsys):
    (name,) = list_plans(RunDir(run))
    assert main(["status", str(run), "--plan", name, "--at-step", "10", "--global-batch", "8", "--by",
                 "cluster,tier,source"]) == 0
    out = capsys.readouterr().out
    assert "after step 10 x 8: position 80" in out and "source: 3 groups" in out and "full passes" in out
    assert main(["status", str(run), "--at-step", "10"]) == 2
    assert "go together" in capsys.readouterr().err
    assert main(["status", str(run), "--at-step", "1", "--global-batch", "4", "--by", "quality"]) == 2
    assert "numeric field 'quality'" in capsys.readouterr().err
    assert main(["status", str(run), "--at-step", "1", "--global-batch", "4", "--by", "lang"]) == 2
    assert "names 'lang'" in capsys.readouterr().err
