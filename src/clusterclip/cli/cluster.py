"""``clusterclip cluster``: spherical k-means over the embeddings."""

from __future__ import annotations

import argparse
from typing import Any

from clusterclip.cli.options import add_cluster, add_common, cluster_config, command, engine_config
from clusterclip.cluster.stage import cluster_stage
from clusterclip.contract.plan import refuse_stranding_refit
from clusterclip.stages import writing
from clusterclip.store import RunDir


def add_cluster_parser(sub: Any) -> argparse.ArgumentParser:
    p = command(sub, "cluster", cmd_cluster, "spherical k-means over the embeddings",
                "Fit centroids on a sample and assign every document: centroids.npy, labels.npy, scores.npy, "
                "sizes.npy.",
                ("clusterclip cluster runs/web --k 500",
                 "clusterclip cluster runs/web --refit --force    # after `clusterclip add`; then re-plan"),
                run_dir="run directory with embeddings")
    add_cluster(p, standalone=True)
    p.add_argument("--refit", action="store_true",
                   help="fit new centroids over all documents (after `clusterclip add`; the default k follows "
                        "the new count); plans built on the old clusters become stale")
    add_common(p)
    return p


def cmd_cluster(a: argparse.Namespace) -> int:
    run, engine = RunDir(a.run_dir), engine_config(a)
    with writing(run):
        if a.refit and not a.force:
            refuse_stranding_refit(run)
        with engine.session():
            rec = cluster_stage(run, cluster_config(a), force=a.force, progress=not a.quiet, engine=engine.engine,
                                refit=a.refit)
    print(f"{run.root}: k={rec.k} clusters (sizes {rec.size_min}..{rec.size_max}), "
          f"mean cosine {rec.objective:.4f}, trained on {rec.sample_size:,} documents")
    return 0
