"""A two-node Ray cluster on this machine for the tests that reach Ray through an address."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def two_node_cluster(nodes: int = 2) -> Iterator[Any]:
    """A ``ray.cluster_utils.Cluster`` of ``nodes`` one-CPU nodes; after the block it is shut down and its session
    folder (``/tmp/ray/session_*``) removed, as :func:`clusterclip.ray_session.ray_session` does for a local
    instance."""
    from ray.cluster_utils import Cluster

    from clusterclip.ray_session import remove_session

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    session = Path(cluster.head_node.get_session_dir_path())
    try:
        for _ in range(nodes - 1):
            cluster.add_node(num_cpus=1)
        yield cluster
    finally:
        cluster.shutdown()
        remove_session(session)
