"""``OUT/experiment/results.json``, typed: what :mod:`clusterclip.experiment.proxy_runs` writes after every proxy run
(:data:`RESULTS_VERSION`) and what a restart reads back to reuse the finished runs. The report reads the file
through :func:`results_view`, which checks an experiment's own file as strictly and passes a results file a user
wrote in their own shape on as it is."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from clusterclip.contract.json_record import JsonRecord

RESULTS_VERSION = 2


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExperimentResults(JsonRecord):
    """The header of an experiment (its settings and their hash, the data of the first split and of every split,
    the model, the recipe, the unigram baseline), its proxy runs by key (``<strategy>/<seed>[/split-<s>]``), and
    from the first write on the progress, the aggregates (``stats``, the report's ``summary`` rows, mean
    ``curves``) and the plots."""

    WHAT: ClassVar[str] = "an experiment's results"
    VERSIONS: ClassVar[tuple[int, ...]] = (RESULTS_VERSION,)
    FIX: ClassVar[str] = "pass --force to set it aside and train again"

    version: int
    status: str
    config: dict[str, Any]
    config_hash: str
    data_hash: str
    split_hash: str
    inputs: list[str]
    run_dir: str
    started_at: str
    environment: dict[str, Any]
    data: dict[str, Any]
    splits: dict[str, dict[str, Any]]
    model: dict[str, Any]
    train: dict[str, Any]
    unigram: dict[str, Any]
    runs: dict[str, dict[str, Any]]
    progress: dict[str, Any] | None = None
    stats: dict[str, dict[str, Any]] | None = None
    summary: dict[str, dict[str, Any]] | None = None
    curves: dict[str, dict[str, Any]] | None = None
    updated_at: str | None = None
    seconds_this_session: float | None = None
    plots: list[str] | None = None

    def setting(self, name: str, default: Any = None) -> Any:
        """A setting the experiment ran with (``config``: its recorded ``ExperimentConfig``), or ``default``."""
        return self.config.get(name, default)

    def split_data(self, split: int, primary: int) -> dict[str, Any]:
        """What the results recorded about a split's data: its ``split_hash`` and ``data_hash`` (and for a split
        after the first its sizes), {} when they hold none of it."""
        if split == primary:
            return {"split_hash": self.split_hash, "data_hash": self.data_hash}
        return dict(self.splits.get(str(split), {}))


def results_view(obj: Any) -> dict[str, Any] | None:
    """What the report shows of a parsed ``results.json``: an experiment's own (its version field set), read as
    :class:`ExperimentResults`, as its JSON; a file of another shape (a user's own results) as it is, which the
    report reads for the common shapes only; None for what is no JSON object."""
    if not isinstance(obj, dict):
        return None
    if ExperimentResults.VERSION_FIELD in obj:
        return ExperimentResults.from_json(obj, "experiment/results.json").to_json()
    return obj
