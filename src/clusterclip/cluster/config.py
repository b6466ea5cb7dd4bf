"""Settings of the cluster stage and the default number of clusters."""

from __future__ import annotations

import math
from dataclasses import dataclass

from clusterclip.errors import ClusterClipError
from clusterclip.settings import INT32_MAX, Settings, SettingsError, at_least, optional, setting

DEFAULT_POINTS_PER_CENTROID = 256
INITS = ("kmeans++", "random", "afkmc2")


def default_k(n: int) -> int:
    """Default number of clusters: ``sqrt(N / 2)`` clipped to [2, 10000] (about 90 for 16k documents).

    It grows sub-linearly so clusters stay meaningful (a few hundred documents each at 10^5-10^6
    documents) and k-means cost stays affordable; the paper used thousands for 10^7-10^8 documents.
    """
    if n < 2:
        raise ClusterClipError(f"clustering needs at least 2 documents, got {n}")
    return int(min(10_000, max(2, round(math.sqrt(n / 2)))))


@dataclass(frozen=True)
class ClusterConfig(Settings):
    """Options of the cluster stage (part of the stage record); validated on construction."""

    k: int | None = setting(None, check=optional(at_least(1)),
                            help="number of clusters (default: sqrt(N/2) clipped to [2, 10000])")
    seed: int = setting(0, check=at_least(0, at_most=INT32_MAX), flag="--cluster-seed", help="k-means seed")
    niter: int = setting(25, check=at_least(1, at_most=INT32_MAX), help="k-means iterations")
    nredo: int = setting(1, check=at_least(1, at_most=INT32_MAX), help="k-means restarts; the best objective is kept")
    points_per_centroid: int = setting(DEFAULT_POINTS_PER_CENTROID, check=at_least(1, at_most=INT32_MAX),
                                       help="training sample size per centroid (sample = k x this, at most N)")
    init: str = setting("kmeans++", choices=INITS,
                        help="centroid seeding: greedy k-means++ (robust), or faiss' random or AFK-MC2 seeding")

    def effective_k(self, n: int) -> int:
        """The k used for ``n`` documents: ``k``, or :func:`default_k`; ``k`` may not exceed ``n``."""
        if self.k is None:
            return default_k(n)
        if self.k > n:
            raise SettingsError("k", f"{self.k} is larger than the number of documents ({n}); use 1 <= k <= {n}",
                                type(self))
        return int(self.k)
