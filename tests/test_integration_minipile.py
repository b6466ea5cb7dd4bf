"""Integration: the default pipeline on real text (minipile-1k, 1,013 documents in 7 domains).

Uses ``../shared/data`` beside the repository, which a user's clone does not have: skipped then.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import normalized_mutual_info_score

from clusterclip.contract.corpus import read_column
from clusterclip.pipeline import run_pipeline
from clusterclip.plan import PlanConfig
from clusterclip.store import RunDir, load_npy

MINIPILE_1K = Path(__file__).resolve().parents[2] / "shared" / "data" / "minipile-1k.jsonl"

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not MINIPILE_1K.exists(), reason=f"{MINIPILE_1K} not found (only in the project's "
                                                        "workspace, not in a plain clone)"),
]


def test_default_pipeline_on_minipile_1k(tmp_path):
    plans = [PlanConfig(strategy="clusterclip", max_repeat=3, budget=2000),
             PlanConfig(strategy="random", budget=2000)]
    summary = run_pipeline([MINIPILE_1K], tmp_path / "run", plans=plans, progress=False)
    run = RunDir(tmp_path / "run")
    assert summary["corpus"]["documents"] == 1013
    labels = load_npy(run.root / "labels.npy")
    domains = read_column(run, "group")
    assert len(set(domains)) == 7
    assert normalized_mutual_info_score(domains, labels) > 0.3, "clusters should follow the domains"

    clip = load_npy(next((run.root / "plans").glob("clusterclip-*")) / "plan.npy")
    rand = load_npy(next((run.root / "plans").glob("random-*")) / "plan.npy")
    assert len(clip) == len(rand) == 2000
    assert np.bincount(clip).max() <= 3
    k = labels.max() + 1

    def spread(order: np.ndarray) -> float:
        return float(np.bincount(labels[order], minlength=k).std())

    assert spread(clip) < spread(rand), "clusterclip must balance clusters better than random"
    small = np.argsort(np.bincount(labels))[: k // 4]
    assert np.isin(labels[clip], small).mean() > np.isin(labels[rand], small).mean()
