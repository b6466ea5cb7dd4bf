"""Where ``clusterclip experiment`` and ``clusterclip tune`` keep their work and results inside a run directory
(names), and the records of their stages: the experiment's (``experiment/experiment.json``), tune's proxy runs
(``tune/runs/<key>.json``) and its search (``tune/search.json``), each with its settings typed."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from clusterclip.store.record import RecordedConfig, StageRecord, later

EXPERIMENT_DIR = "experiment"
"""``clusterclip experiment``'s work: a run directory of its own whose one stage is :data:`EXPERIMENT_STAGE`."""
EXPERIMENT_STAGE = "experiment"
EXPERIMENT_RESULTS = "experiment/results.json"
TUNE_DIR = "tune"
"""``clusterclip tune``'s work: ``splits/<seed>/`` run directories, ``runs/<hash>.json`` proxy runs."""
TUNE_RESULTS = "tune/results.json"
TUNE_RUNS = "tune/runs"
TUNE_SEARCH_STAGE = "search"
"""The stage of the tune directory whose record (``tune/search.json``) lists ``results.json``."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExperimentSettings(RecordedConfig):
    """``experiment.json``'s ``config``: the experiment's settings as ``ExperimentConfig.recorded`` writes them (its
    fields in order, ``model`` and ``train`` as objects). Settings added after the stage's first record
    (2026-12-05) are optional, with the value the experiment had before them; ``ExperimentConfig.from_recorded``
    builds the experiment's settings from them."""

    WHAT: ClassVar[str] = "the experiment settings"

    docs: int | None
    max_words: int | None
    heldout: float
    split_seed: int
    split_seeds: list[int]
    text_field: str
    group_field: str | None
    quality_scorer: str | None = later(None, always=True)
    """Added 2026-12-07 (``--quality-scorer``): None (no scorer) in earlier records; written every time since."""
    embedder: str
    k: int
    strategies: list[str]
    passes: float
    max_repeats: list[int]
    duplicates: list[str] = later(("none",), always=True)  # noqa: RUF009 (a field, as the others)
    """Added 2026-12-05 (``--duplicates``): ``["none"]`` (the dedup stage's groups ignored) in earlier records."""
    tau: float
    online_updates: int = later(8, always=True)
    """Added 2026-12-06 (``--online-updates``): the default (``experiment.specs.DEFAULT_ONLINE_UPDATES``) in earlier
    records, which train no online strategy, so it changes nothing of them."""
    seeds: list[int]
    objective: str = later("lm")
    """Added 2026-12-07 (``--objective``): written only when not ``lm``, so earlier experiments keep their hash."""
    curve_docs: int
    small_clusters: float
    device: str
    threads: int | None
    model: dict[str, Any]
    train: dict[str, Any]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExperimentRecord(StageRecord):
    """``experiment/experiment.json``: the experiment's settings (:class:`ExperimentSettings`); its files
    (``results.json``, the table, the plots) are the artifacts."""

    NAME: ClassVar[str] = EXPERIMENT_STAGE

    config: ExperimentSettings


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProxyRunSettings(RecordedConfig):
    """A proxy run's ``config``: the candidate's ``spec`` (its strategy and plan options), the held-out ``split``
    and the training ``seed``."""

    WHAT: ClassVar[str] = "the proxy run settings"

    spec: dict[str, Any]
    split: int
    seed: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProxyRunRecord(StageRecord):
    """``tune/runs/<key>.json``: one proxy run of a search, its settings (:class:`ProxyRunSettings`) and the
    ``metrics`` it measured (the record is the result; it lists no files)."""

    config: ProxyRunSettings
    metrics: dict[str, Any]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchSettings(RecordedConfig):
    """``tune/search.json``'s ``config``: the proxies' experiment settings (``config``, as
    ``dataclasses.asdict`` of an ``ExperimentConfig``), the search's (``tune``, of a ``TuneConfig``) and whether
    it writes the chosen plan for the whole corpus."""

    WHAT: ClassVar[str] = "the search settings"

    config: dict[str, Any]
    tune: dict[str, Any]
    write_plan: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchRecord(StageRecord):
    """``tune/search.json``: the search's settings (:class:`SearchSettings`); its one artifact is ``results.json``."""

    NAME: ClassVar[str] = TUNE_SEARCH_STAGE

    config: SearchSettings
