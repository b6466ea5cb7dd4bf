"""The duplicate-id check's external hash partition equals counting in memory, for any flush and bucket size."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from clusterclip.corpus.id_spill import UNIT_SHIFT, IdSpill


def oracle(hashes: np.ndarray) -> tuple[int, tuple[int, int] | None]:
    """Repeats and the earliest repeat (second = smallest index seen before, first = where), in memory."""
    seen: dict[int, int] = {}
    count, best = 0, None
    for i, h in enumerate(hashes.tolist()):
        if h in seen:
            count += 1
            best = best or (seen[h], i)
        else:
            seen[h] = i
    return count, best


@hs.composite
def id_hashes(draw) -> np.ndarray:
    n = draw(hs.integers(0, 300))
    rng = np.random.default_rng(draw(hs.integers(0, 2**16)))
    distinct = rng.integers(0, 2**64, size=max(1, draw(hs.integers(1, 400))), dtype=np.uint64)
    return distinct[rng.integers(0, distinct.size, n)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hashes=id_hashes(), bits=hs.integers(0, 6), flush=hs.integers(1, 50), batch=hs.integers(1, 70))
def test_spilled_duplicates_equal_counting_in_memory(tmp_path: Path, hashes, bits, flush, batch) -> None:
    spill = IdSpill(tmp_path / "ids", bucket_bits=bits, flush_rows=flush)
    for a in range(0, hashes.size, batch):
        spill.add(hashes[a:a + batch], a)
    assert spill.n == hashes.size
    assert spill.duplicates() == oracle(hashes)
    assert not (tmp_path / "ids").exists()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hashes=id_hashes(), cuts=hs.lists(hs.integers(0, 300), max_size=5), order_seed=hs.integers(0, 100))
def test_ray_units_arriving_in_any_order_map_back_to_corpus_indices(tmp_path: Path, hashes, cuts, order_seed) -> None:
    """Units finish in any order; keys ``unit << UNIT_SHIFT | row`` give the same answer as the corpus order."""
    bounds = sorted({0, hashes.size, *(min(c, hashes.size) for c in cuts)})
    units = [hashes[a:b] for a, b in itertools.pairwise(bounds)]
    spill = IdSpill(tmp_path / "ids", bucket_bits=2, flush_rows=7)
    for u in np.random.default_rng(order_seed).permutation(len(units)).tolist():
        spill.add(units[u], u << UNIT_SHIFT)
    spill.units([u.size for u in units])
    assert spill.duplicates() == oracle(hashes)
