"""Where a run is in its data (:func:`where_in_data`, ``status --at-step``), and the ways to group its documents:
clusters, a stratified plan's tiers, the corpus' ground-truth group (``--group-field``) and every categorical
field it kept (``--keep-fields``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from clusterclip.contract.cluster import load_labels
from clusterclip.contract.corpus import CorpusRecord, load_fields, read_column
from clusterclip.contract.plan import PLAN_TIERS
from clusterclip.contract.plan_reader import PlanReader
from clusterclip.plan.config import PlanConfigError
from clusterclip.plan.seen import Axis, seen_in
from clusterclip.store import RunDir, load_npy


def run_axes(run_dir: str | os.PathLike[str], reader: PlanReader, by: Sequence[str]) -> list[Axis]:
    """One :class:`Axis` per name of ``by``: ``cluster``, ``tier``, ``group`` or a kept categorical field."""
    run = RunDir(run_dir)
    corpus = CorpusRecord.require(run, verify=False)
    axes = []
    for name in by:
        if name == "cluster":
            labels = np.asarray(load_labels(run), np.int64)
            axes.append(Axis("cluster", labels, [str(c) for c in range(int(labels.max(initial=-1)) + 1)]))
        elif name == "tier":
            axes.append(_tiers(reader))
        elif name == "group":
            values = np.array(["" if v is None else v for v in read_column(run, "group")], dtype=object)
            names, codes = np.unique(values.astype(str), return_inverse=True)
            axes.append(Axis("group", codes.astype(np.int64), names.tolist()))
        elif name in (corpus.fields or {}):
            field = load_fields(run, [name])[name]
            if field.numeric:
                raise PlanConfigError("by", f"names numeric field {name!r}: group by the tiers of a plan over strata "
                                      f"(--strata cluster,{name}:TIERS) with `tier`")
            axes.append(Axis(name, np.asarray(field.values, np.int64), list(field.categories or ())))
        else:
            kept = ", ".join(["cluster", "tier", "group", *(corpus.fields or {})])
            raise PlanConfigError("by", f"names {name!r}, which is no way to group this run's documents ({kept})")
    return axes


def _tiers(reader: PlanReader) -> Axis:
    strata = reader.record.stats.get("strata") if reader.record is not None else None
    if not strata or reader.path is None:
        raise PlanConfigError("by", "names `tier`, but the plan has no strata (plan it with --strata)")
    tiers = np.asarray(load_npy(reader.path.parent / PLAN_TIERS), np.int64)
    return Axis("tier", tiers, [t["label"] for t in strata["tiers"]])


def where_in_data(run_dir: str | os.PathLike[str], plan_name: str | None, step: int, global_batch: int,
                  by: Sequence[str] = ("cluster", "tier")) -> dict[str, Any]:
    """:func:`seen_in` for a plan of a run directory after ``step`` steps of ``global_batch`` positions, grouped
    by ``by``: ``cluster``, ``tier`` (a plan over strata) and any field the corpus kept."""
    if step < 0 or global_batch < 1:
        raise PlanConfigError("at_step", f"needs a step >= 0 and a global batch >= 1, got {step} and {global_batch}")
    reader = PlanReader.open(run_dir, plan_name)
    axes = run_axes(run_dir, reader, by)
    position = min(step * global_batch, reader.length)
    out = seen_in(reader, position, axes, global_batch)
    return {"step": step, "global_batch": global_batch, "position": position, "plan_length": reader.length,
            "groups": out}
