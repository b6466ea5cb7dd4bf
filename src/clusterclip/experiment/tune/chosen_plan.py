"""The chosen plan for the whole corpus: an ordinary plan of the run directory, with its ``clusterclip plan``
command."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clusterclip.cluster import ClusterConfig
from clusterclip.corpus import CorpusConfig
from clusterclip.experiment.config import ExperimentConfig
from clusterclip.experiment.prepare import pipeline_stages
from clusterclip.experiment.specs import plan_config
from clusterclip.plan import plan_stage
from clusterclip.store import RunDir, load_npy
from clusterclip.store import layout as A


def write_chosen_plan(inputs: Sequence[str | os.PathLike[str]], run_dir: Path, cfg: ExperimentConfig,
                      spec: dict[str, Any], seed: int, progress: bool = False) -> dict[str, Any]:
    """The whole corpus through corpus, embed and cluster stages (K, embedder and fields of ``cfg``), and
    the chosen plan over it: an ordinary plan for a budget of ``cfg.passes`` passes over its tokens. Returns
    its name, settings, command (as :meth:`RunDir.rebuild_command <clusterclip.store.RunDir.rebuild_command>`
    renders every other) and scalar statistics."""
    run = RunDir(run_dir)
    pipeline_stages(run, inputs, CorpusConfig(text_field=cfg.text_field, group_field=cfg.group_field), progress,
                    cfg.embedder, ClusterConfig(k=cfg.k, seed=seed))
    tokens = int(load_npy(run.path(A.TOKENS)).sum())
    pc = plan_config(spec, round(cfg.passes * tokens), seed)
    record = plan_stage(run, pc)
    command = run.rebuild_command(A.plan_stage_name(pc.name()), record)
    return {"name": pc.name(), "config": pc.to_json(), "command": command,
            "stats": {k: v for k, v in record.get("stats", {}).items() if isinstance(v, (int, float, str))}}
