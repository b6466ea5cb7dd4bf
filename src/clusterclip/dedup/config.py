"""Settings of the dedup stage (its files and record are in :mod:`clusterclip.contract.dedup`)."""

from __future__ import annotations

from dataclasses import dataclass

from clusterclip.settings import Settings, SettingsError, at_least, between, setting, uint64

INDEX_SETTINGS = ("num_perm", "bands", "shingle", "lexical_seed", "word_perm", "char_ngram", "char_words",
                  "boilerplate")
"""Settings the pairwise work depends on (besides the inputs); the others only change the derivation of the
groups from it, so changing them reuses the stored work."""


@dataclass(frozen=True)
class DedupConfig(Settings):
    """Options of the dedup stage (part of its record); validated on construction."""

    eps: float = setting(0.05, check=between(0.0, 2.0, closed=True),
                         help="semantic threshold: documents of one cluster with cosine >= 1 - eps are duplicates")
    jaccard: float = setting(0.7, check=between(0.0, 1.0, closed=True),
                             help="lexical threshold on the MinHash Jaccard estimate of word shingles "
                                  "(1: identical signatures only)")
    confirm: float = setting(0.6, check=between(0.0, 1.0, closed=True),
                             help="a semantic edge counts only when the pair's word-set MinHash Jaccard estimate "
                                  "is >= this (0: every semantic edge counts)")
    verify: float = setting(0.6, check=between(0.0, 1.0, closed=True),
                            help="star check: a group member whose word-set Jaccard estimate to the group's kept "
                                 "document is below this (or below --confirm) is split off and regrouped")
    shingle_confirm: float = setting(0.5, check=between(0.0, 1.0, closed=True),
                                     help="a semantic edge, and a group member's tie to its kept document, also needs "
                                          "a shingle MinHash Jaccard estimate >= this (0: no such check)")
    min_shingles: int = setting(10, check=at_least(0),
                                help="a document with fewer distinct word shingles joins only documents with the "
                                     "same normalised text (0: no such guard)")
    num_perm: int = setting(128, check=at_least(8), help="MinHash permutations (signature length)")
    bands: int = setting(16, check=at_least(1), help="LSH bands (num_perm must be a multiple)")
    shingle: int = setting(3, check=at_least(1), help="words per shingle")
    lexical_seed: int = setting(0, check=uint64(), help="MinHash seed")
    word_perm: int = setting(64, check=at_least(8),
                             help="MinHash permutations of the word-set signatures that confirm edges")
    char_ngram: int = setting(5, check=at_least(0),
                              help="a document with fewer than --char-words distinct word shingles is hashed by "
                                   "shingles of this many bytes of its normalised text instead (0: word shingles "
                                   "only)")
    char_words: int = setting(10, check=at_least(0),
                              help="documents with fewer distinct word shingles than this get byte shingles "
                                   "(with --char-ngram); those with fewer than twice this many also get a byte "
                                   "signature, and two of them are compared on it")
    boilerplate: float = setting(0.005, check=between(0.0, 1.0, closed=True),
                                 help="a line (its words) that at least this share of the documents (and at least 50 "
                                      "of them; counted on a sample of 20,000) contain is boilerplate: left out of "
                                      "what the near-copies are measured on, unless a document has nothing else "
                                      "(0: off)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_perm % self.bands:
            raise SettingsError("bands", f"{self.bands} does not divide num_perm={self.num_perm}", type(self))

    def index_settings(self) -> dict[str, int | float]:
        """The settings the stored pairwise work depends on."""
        return {name: getattr(self, name) for name in INDEX_SETTINGS}
