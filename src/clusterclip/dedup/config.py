"""Settings of the dedup stage and the run-relative paths of its artifacts."""

from __future__ import annotations

from dataclasses import dataclass

from clusterclip.settings import Settings, SettingsError, at_least, between, setting

DEDUP_STAGE = "dedup"
DEDUP_DIR = "dedup"
NEIGHBOUR = "dedup/neighbour.npy"
"""int64 [N]: the earlier member (kept-rule order, same cluster) of highest cosine, -1 for a cluster's first."""
SIMILARITY = "dedup/similarity.npy"
"""float32 [N]: that cosine (-2 for a cluster's first): with ``NEIGHBOUR`` it derives groups for any eps."""
LEXICAL_PAIRS = "dedup/lexical_pairs.npy"
"""int64 [P, 2]: MinHash LSH candidate pairs (both in one band bucket), each once, first < second."""
LEXICAL_JACCARD = "dedup/lexical_jaccard.npy"
"""float32 [P]: the signatures' Jaccard estimate of each candidate pair."""
GROUP = "dedup/group.npy"
"""int64 [N]: group id per document (ids 0..G-1 in the order of their representatives' indices)."""
KEPT = "dedup/kept.npy"
"""int64 [G]: the representative (kept document) of each group, ascending."""
REMOVED = "dedup/removed.parquet"
"""One row per removed document: removed/kept index and id, cosine to the kept one, and the detector."""
SIGNATURES = "dedup/signatures.npy"
"""uint32 [N, num_perm]: MinHash signatures (kept so that ``clusterclip add`` hashes only the new texts)."""
INDEX_ARTIFACTS = (NEIGHBOUR, SIMILARITY, LEXICAL_PAIRS, LEXICAL_JACCARD, SIGNATURES)
"""The pairwise work, reused when only the thresholds change."""
INDEX_SETTINGS = ("num_perm", "bands", "shingle", "lexical_seed")
"""Settings the pairwise work depends on (besides the inputs)."""


@dataclass(frozen=True)
class DedupConfig(Settings):
    """Options of the dedup stage (part of its record); validated on construction."""

    eps: float = setting(0.05, check=between(0.0, 2.0, closed=True),
                         help="semantic threshold: documents of one cluster with cosine >= 1 - eps are duplicates")
    jaccard: float = setting(0.7, check=between(0.0, 1.0, closed=True),
                             help="lexical threshold on the MinHash Jaccard estimate of word shingles "
                                  "(1: identical signatures only)")
    num_perm: int = setting(128, check=at_least(8), help="MinHash permutations (signature length)")
    bands: int = setting(16, check=at_least(1), help="LSH bands (num_perm must be a multiple)")
    shingle: int = setting(3, check=at_least(1), help="words per shingle")
    lexical_seed: int = setting(0, check=at_least(0), help="MinHash seed")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_perm % self.bands:
            raise SettingsError("bands", f"{self.bands} does not divide num_perm={self.num_perm}", type(self))

    def index_settings(self) -> dict[str, int]:
        """The settings the stored pairwise work depends on."""
        return {name: int(getattr(self, name)) for name in INDEX_SETTINGS}
