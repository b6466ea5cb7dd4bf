"""Plan access for the training integrations: argument checks, plan names and identities, dataset order.

Kept apart from the sampler so the sampler module holds only the replay logic.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clusterclip.contract.cluster import LABELS
from clusterclip.contract.plan import PLAN_RECORD, PLANS_DIR
from clusterclip.contract.plan_identity import short
from clusterclip.contract.plan_locate import PlanIntegrityError, read_record, resolve_plan_path
from clusterclip.contract.plan_reader import PlanReader, open_plan
from clusterclip.errors import ClusterClipError
from clusterclip.settings import is_int
from clusterclip.store import RunDir
from clusterclip.store.objects import is_url

__all__ = ["PlanInfo", "RowRange", "SamplerArgumentError", "load_plan", "local_plan", "open_checked", "plan_file",
           "plan_info", "reorder_dataset"]


class SamplerArgumentError(ClusterClipError, ValueError):
    """A sampler argument or state of the wrong type or out of range (never truncated or coerced)."""


def integer(name: str, value: Any, lo: int, hi: int | None = None) -> int:
    """``value`` as an int in ``lo..hi``; refuses bools, floats (also 7.0), strings, None, NaN."""
    span = f"{lo}..{hi}" if hi is not None else f">= {lo}"
    if not is_int(value):
        raise SamplerArgumentError(f"{name} must be an integer {span}, got {value!r} ({type(value).__name__})")
    v = int(value)
    if v < lo or (hi is not None and v > hi):
        raise SamplerArgumentError(f"{name} must be in {span}, got {v}")
    return v


def load_plan(plan: Any, plan_name: str | None = None, n_docs: int | None = None) -> np.ndarray:
    """The plan as a verified 1-D int64 array: an array (or ``Plan``) as is, a path memory-mapped read-only.

    Every block is checked (its checksum, indices in ``[0, n_docs)``; see ``clusterclip.contract.plan_reader``)
    before the array is returned, so this reads a file plan once; the sampler instead verifies each block
    when it first reads it.
    """
    return open_checked(plan, plan_name, n_docs).verified()


def local_plan(plan: Any, plan_name: str | None = None) -> tuple[Any, str | None]:
    """A plan given as a URL of object storage (a run directory, a plan folder or a ``plan.npy``) as a local path with
    only that plan's files fetched (and the run's records, which say whether it is current); any other plan as is.
    A run directory's plan is returned as its plan folder (``plan_name`` then None)."""
    if not is_url(plan):
        return plan, plan_name
    url = str(plan).rstrip("/")
    if url.endswith(".npy"):
        folder = RunDir(url.rsplit("/", 1)[0])
        return folder.path() / url.rsplit("/", 1)[1], plan_name
    run = RunDir(url)
    if (run.root / PLAN_RECORD).is_file():
        return run.path(), plan_name
    names = sorted(p.parent.name for p in (run.root / PLANS_DIR).glob(f"*/{PLAN_RECORD}"))
    name = plan_name if plan_name in names else names[0] if plan_name is None and len(names) == 1 else None
    if name is None:
        return run.root, plan_name  # the usual refusal names the plans there
    return run.path(PLANS_DIR, name), None


def open_checked(plan: Any, plan_name: str | None = None, n_docs: int | None = None) -> PlanReader:
    """``open_plan``, plus for a ``plan.npy`` without its ``plan.json``: the run's ``labels.npy`` (when the
    file sits at ``RUN/plans/NAME/plan.npy``) or ``n_docs`` bounds the indices, and a warning says what cannot be
    checked; without either the file is refused (its indices could point past the corpus unnoticed). ``plan`` may be a
    URL (:func:`local_plan`)."""
    plan, plan_name = local_plan(plan, plan_name)
    reader = open_plan(plan, plan_name, n_docs)
    if reader.path is None or reader.record is not None:
        return reader
    labels = reader.path.parent.parent.parent / LABELS
    if n_docs is None and reader.path.parent.parent.name == PLANS_DIR and labels.is_file():
        reader.n_docs = int(np.load(labels, mmap_mode="r").shape[0])
    if reader.n_docs is None:
        raise PlanIntegrityError(
            f"{reader.path}: no plan.json beside it and no run directory around it, so nothing says how many "
            "documents its indices may point at; pass n_docs=len(dataset), or keep plan.json and blocks.npy "
            "next to plan.npy")
    source = "n_docs" if n_docs is not None else "the run's documents"
    bound = f"0..{reader.n_docs - 1} ({source})"
    warnings.warn(f"{reader.path}: no plan.json beside it, so only its shape and index range {bound} are checked; "
                  "its checksums, recorded identity and repeat cap cannot be", stacklevel=3)
    return reader


@dataclass(frozen=True)
class PlanInfo:
    """Who a plan is: its ``name`` (folder under ``plans/``), ``identity`` (content hash of the order;
    ``None`` when it must be computed from the order) and, for a continuation, ``continues``: the parent's
    ``name``, ``identity`` and the position ``consumed`` where training switches."""

    name: str | None = None
    identity: str | None = None
    continues: Mapping[str, Any] | None = None

    def describe(self, identity: str | None = None) -> str:
        """``name (hash)`` for messages."""
        return f"{self.name or 'unnamed plan'} ({short(identity or self.identity)})"


class RowRange:
    """Rows ``0..length-1`` of an export as a plan: row ``i`` is the export's ``i``-th sample, so a sampler
    over it yields row positions in order (the export already holds the plan's order). ``info`` names the
    export's stream (:func:`clusterclip.export.manifest.stream_identity`)."""

    def __init__(self, length: int, info: PlanInfo) -> None:
        self.length = length
        self.n_docs = length
        self.info = info
        self.path = None
        self.record = None

    def take(self, pos: np.ndarray) -> np.ndarray:
        """Row positions are the rows."""
        return np.asarray(pos, dtype=np.int64)

    @property
    def array(self) -> np.ndarray:
        """The rows, materialised (only for consumers that need the whole order)."""
        return np.arange(self.length, dtype=np.int64)

    def verified(self) -> np.ndarray:
        """Nothing to verify: the rows are positions."""
        return self.array


def plan_info(plan: Any, plan_name: str | None = None) -> PlanInfo:
    """The name, identity and parent of a plan given as ``load_plan`` takes it (read from ``plan.json``).

    A path without a record, or an array, has no name and its identity is computed from the order
    (``clusterclip.contract.plan_identity.identity_of``) when first needed.
    """
    if hasattr(plan, "order") and not isinstance(plan, np.ndarray):
        return PlanInfo(plan.config.name(), plan.identity or None)
    if not isinstance(plan, (str, os.PathLike)):
        return PlanInfo()
    path = resolve_plan_path(*local_plan(plan, plan_name))
    rec = read_record(path)
    if rec is None:
        return PlanInfo()
    return PlanInfo(rec.name or path.parent.name, rec.order_identity(), rec.continues)


def plan_file(plan: Any, plan_name: str | None) -> Path | None:
    """The ``plan.npy`` a path (or URL) names (``None`` for an array or ``Plan``)."""
    return resolve_plan_path(*local_plan(plan, plan_name)) if isinstance(plan, (str, os.PathLike)) else None


def reorder_dataset(dataset: Any, plan: Any, plan_name: str | None = None) -> Any:
    """A Hugging Face ``datasets.Dataset`` in plan order (repeats expanded): ``dataset.select(plan)``.

    ``select`` stores an index mapping (8 bytes per planned sample), not copies of the rows. The whole
    plan is verified first (checksums, index range), and must index rows of ``dataset``.
    """
    order = load_plan(plan, plan_name)
    n = len(dataset)
    if order.size and (int(order.max()) >= n or int(order.min()) < 0):
        raise ClusterClipError(f"plan holds document index {int(order.max())} but the dataset has {n} rows; "
                               "was the plan built for this corpus?")
    return dataset.select(np.asarray(order))
