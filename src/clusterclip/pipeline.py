"""The whole job in one call: corpus -> embeddings -> clusters -> plans -> summary.

Each stage is skipped when its record in the run directory is fresh, so calling :func:`run_pipeline`
again after a change of one option re-runs only that stage and the ones after it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from clusterclip.cluster.config import ClusterConfig
from clusterclip.cluster.stage import cluster_stage
from clusterclip.contract.embed import EmbedRecord
from clusterclip.contract.stages import record_paths
from clusterclip.corpus.config import CorpusConfig
from clusterclip.corpus.stage import corpus_command, corpus_stage
from clusterclip.embed.config import EmbedConfig
from clusterclip.embed.stage import embed_stage
from clusterclip.engines import EngineConfig
from clusterclip.plan.config import PlanConfig
from clusterclip.plan.stage import plan_stage
from clusterclip.settings import command_flags
from clusterclip.stages import writing
from clusterclip.store import RunDir, save_json
from clusterclip.store import layout as A
from clusterclip.store.lineage import check_record_files
from clusterclip.summary import summarize

log = logging.getLogger(__name__)

DEFAULT_STRATEGIES = ("clusterclip", "uniform", "random")
DEFAULT_EPOCHS = 2
"""The budget of ``clusterclip run``'s plans when none is given: two passes over the corpus, so that the cap can
act (at one epoch a balanced plan rarely asks any cluster for more than ``max_repeat`` passes, and ClusterClip's
plan is then uniform's); each plan says whether its cap bound (``docs/sampling.md``)."""


DEFAULT_RUN_DIR = "clusterclip-run"
"""The run directory of ``clusterclip run`` and :func:`run_pipeline` when none is given."""


def embed_command(inputs: Sequence[str | os.PathLike[str]], corpus: CorpusConfig, embed: EmbedConfig) -> list[str]:
    """The ``clusterclip embed`` command line that builds the corpus and embed stages with these settings."""
    return [*corpus_command(inputs, corpus), *command_flags(EmbedConfig, asdict(embed), embed.command_fields())]


def embed_corpus(run: RunDir, inputs: Sequence[str | os.PathLike[str]], corpus: CorpusConfig,
                 embed: EmbedConfig, force: bool = False, progress: bool = True,
                 engine: str = "local") -> EmbedRecord:
    """Corpus and embed stages (what ``clusterclip embed`` does), on ``engine`` (the caller opens its session:
    :meth:`EngineConfig.session <clusterclip.engines.EngineConfig.session>`)."""
    command = embed_command(inputs, corpus, embed)
    corpus_stage(run, inputs, corpus, force=force, progress=progress, engine=engine, command=command)
    return embed_stage(run, embed, force=force, progress=progress, engine=engine, command=command)


def run_pipeline(  # noqa: PLR0913 -- one argument per settings section, as the CLI's option groups
    inputs: Sequence[str | os.PathLike[str]] = (),
    out: str | os.PathLike[str] = DEFAULT_RUN_DIR,
    corpus: CorpusConfig | None = None,
    embed: EmbedConfig | None = None,
    cluster: ClusterConfig | None = None,
    plans: Sequence[Any] | None = None,
    force: bool = False,
    progress: bool = True,
    engine: EngineConfig | None = None,
) -> dict[str, Any]:
    """Run every stage into ``out`` (the default corpus when ``inputs`` is empty); returns the summary.

    ``plans`` is a sequence of :class:`clusterclip.plan.PlanConfig`; by default ClusterClip plus the
    uniform and random baselines, each with a budget of :data:`DEFAULT_EPOCHS` epochs of the corpus' tokens (equal
    tokens, so that they compare at the same training budget). With ``engine.engine == "ray"``,
    embedding and assignment run on Ray Data (a local instance, or the cluster at ``engine.ray_address``).
    """
    corpus, embed, cluster = corpus or CorpusConfig(), embed or EmbedConfig(), cluster or ClusterConfig()
    engine = engine or EngineConfig()
    run = RunDir(out)
    plan_configs = list(plans) if plans is not None else \
        [PlanConfig(strategy=s, epochs=DEFAULT_EPOCHS, budget_unit="tokens") for s in DEFAULT_STRATEGIES]
    with writing(run), engine.session():
        check_record_files(record_paths(run))
        embed_corpus(run, inputs, corpus, embed, force=force, progress=progress, engine=engine.engine)
        cluster_stage(run, cluster, force=force, progress=progress, engine=engine.engine)
        for cfg in plan_configs:
            plan_stage(run, cfg, force=force)
        summary = summarize(run)
        save_json(run.path(A.SUMMARY), summary)
    return summary


