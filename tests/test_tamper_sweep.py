"""The tampering sweep of ``benchmarks/hostile/tamper_sweep.py``: every artifact of a small run directory truncated,
flipped, zeroed, deleted, replaced by a pickled object array and by a link out of the directory, against
every command and the sampler. Each case must end in one clear error line or a correct result: never a
silent wrong result, a traceback, or a write outside the run directory."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "hostile"))
import tamper_sweep as tamper


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    _, found = tamper.sweep(tmp_path_factory.mktemp("tamper"))
    return found


def test_sweep_covers_every_artifact_mutation_and_command(outcomes):
    seen = {(o.mutation, o.command) for o in outcomes}
    assert seen == {(m, c) for m in tamper.MUTATIONS for c in tamper.COMMANDS}
    targets = {o.target for o in outcomes}
    for must in ("corpus/part-00000.parquet", "labels.npy", "sizes.npy", "cluster.json", ".lock", "report"):
        assert must in targets
    assert any(t.endswith("/plan.npy") for t in targets) and any(t.endswith("/plan.json") for t in targets)


def test_no_silent_wrong_result_traceback_or_write_outside(outcomes):
    bad = [o for o in outcomes if o.kind in tamper.BAD]
    assert not bad, "\n" + tamper.summarise(bad)


def test_damage_is_caught_not_ignored(outcomes):
    """The sweep is not vacuous: damaged plans stop the sampler and export, and status --verify names them."""
    plan_npy = [o for o in outcomes if o.target.endswith("/plan.npy") and o.mutation in ("flip", "zero", "truncate")]
    assert {o.kind for o in plan_npy if o.command in ("sampler", "export")} == {"error"}
    assert all(o.kind == "correct" and o.detail == "status flags it"
               for o in plan_npy if o.command == "verify")


def test_lineage_sweep_loses_or_doubles_no_document_and_holds_every_cap(tmp_path, capsys):
    """Seeded sequences of run / add / refit / plan / continue / killed add / re-run
    (benchmarks/hostile/lineage_sweep.py): every check passes after every step, and the sequences cover every
    operation."""
    import lineage_sweep

    done = lineage_sweep.sweep(tmp_path)
    assert {op for _, ops, _ in done for op in ops} == set(lineage_sweep.OPS)
