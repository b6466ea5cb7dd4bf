"""Reading the corpus with Ray tasks: work units in parallel into staging parts, then cut into the final
parts with global indices, byte for byte the parts this process would write."""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from clusterclip.contract.corpus import CORPUS_ID_SPILL, corpus_part, corpus_staging_part
from clusterclip.corpus import limits
from clusterclip.corpus.config import CorpusConfig
from clusterclip.corpus.format_base import WorkUnit
from clusterclip.corpus.id_spill import UNIT_SHIFT, IdSpill
from clusterclip.corpus.inputs import number_lines, work_units
from clusterclip.corpus.jsonl import count_newlines
from clusterclip.corpus.parts import PartWriter, WrittenParts, concat, without_empty_records, write_part
from clusterclip.corpus.quality import SCORERS
from clusterclip.corpus.reading import read_unit
from clusterclip.corpus.records import ReadStats
from clusterclip.corpus.tokens import make_token_counter
from clusterclip.engines import ray_tasks
from clusterclip.store.paths import source

Piece = tuple[str, int, int]
"""Rows ``[start, stop)`` of a staging part."""


def read_on_ray(root: Path, resolved: Sequence[tuple[Path, str]], config: CorpusConfig, bar: Any) -> WrittenParts:
    """Read the inputs' work units with Ray tasks (after counting the lines of split JSONL files), then cut
    their staging parts into final parts of ``limits.PART_ROWS`` rows with global indices: the same parts,
    byte for byte, as reading them in this process."""
    part_rows = limits.PART_ROWS
    units = work_units(resolved, split=True)
    ranges = [(str(u.path), *u.byte_range) for u in units if u.byte_range is not None]
    units = number_lines(units, ray_tasks(count_newlines, ranges))

    spill = IdSpill(root / CORPUS_ID_SPILL)

    def done(r: WrittenParts) -> None:
        """Spill a unit's id hashes as it finishes, so that the driver never holds them all."""
        bar.update(r.tokens.size)
        spill.add(r.id_hashes, r.key_base)
        r.id_hashes = r.id_hashes[:0]

    reads: list[WrittenParts] = ray_tasks(
        _read_unit_task, [(str(root), i, unit, config, part_rows) for i, unit in enumerate(units)], on_done=done)
    spill.units([r.tokens.size for r in reads])
    staged = [(rel, size) for r in reads for rel, size in zip(r.parts, r.part_sizes, strict=True)]
    cuts = _cut_parts(staged, part_rows)
    ray_tasks(_assemble_part_task, [(str(root), rel, pieces, first) for rel, pieces, first in cuts])
    stats = ReadStats()
    groups: Counter[str] = Counter()
    for r in reads:
        stats.merge(r.stats)
        groups.update(r.groups)
    n = sum(size for _, size in staged)
    sizes = [min(part_rows, n - first) for _, _, first in cuts]
    return WrittenParts([rel for rel, _, _ in cuts], sizes, concat([r.tokens for r in reads], np.int64),
                        np.zeros(0, np.uint64), groups, stats, spill)


def _cut_parts(staged: Sequence[tuple[str, int]], part_rows: int) -> list[tuple[str, list[Piece], int]]:
    """``(final part, its pieces of staging parts, index of its first row)`` for parts of ``part_rows`` rows
    cut from the staging parts ``(name, rows)`` end to end."""
    n = sum(size for _, size in staged)
    cuts: list[tuple[str, list[Piece], int]] = []
    src, offset = 0, 0
    for first in range(0, n, part_rows):
        pieces, want = [], min(part_rows, n - first)
        while want:
            name, size = staged[src]
            take = min(want, size - offset)
            pieces.append((name, offset, offset + take))
            want -= take
            offset += take
            if offset == size:
                src, offset = src + 1, 0
        cuts.append((corpus_part(len(cuts)), pieces, first))
    return cuts


def _read_unit_task(root: str, unit_no: int, unit: WorkUnit, config: CorpusConfig, part_rows: int) -> WrittenParts:
    """Ray task: read one work unit into staging parts (indexed from 0 within the unit)."""
    stats = ReadStats()
    writer = PartWriter(Path(root), functools.partial(corpus_staging_part, unit_no),
                        make_token_counter(config.tokenizer), part_rows, field_names=config.field_names,
                        scorer=SCORERS.get(config.quality_scorer or ""))
    for batch in read_unit(unit, config, stats):
        writer.add(batch)
    return dataclasses.replace(writer.finish(stats), key_base=unit_no << UNIT_SHIFT)


def _assemble_part_task(root: str, rel: str, pieces: list[Piece], first_index: int) -> None:
    """Ray task: write final part ``rel`` from row ranges ``[start, stop)`` of staging parts, re-indexed."""
    table = pa.concat_tables((pq.read_table(source(Path(root) / src)).slice(start, stop - start)
                              for src, start, stop in pieces), promote_options="default")
    table = without_empty_records(table)
    index = pa.array(np.arange(first_index, first_index + table.num_rows, dtype=np.int64))
    write_part(Path(root) / rel, table.set_column(0, "index", index))
