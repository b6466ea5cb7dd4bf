"""The typed JSON records read strictly: a field this version does not know, or a version it does not read, is
refused (one line naming the file and the field) rather than half understood; a record read and written back
keeps its JSON, key for key. Covers the drift report, the experiment's and tune's results and every stage's
recorded settings (the records' ``config``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from clusterclip.contract.cluster import ClusterRecord, ClusterSettings
from clusterclip.contract.corpus import CorpusSettings
from clusterclip.contract.dedup import DedupSettings
from clusterclip.contract.drift import DriftReport
from clusterclip.contract.embed import EmbedSettings
from clusterclip.contract.experiment_results import RESULTS_VERSION, ExperimentResults
from clusterclip.contract.online import MixerSettings
from clusterclip.contract.plan import PlanSettings
from clusterclip.contract.report import ReportSettings
from clusterclip.contract.tune_results import TUNE_VERSION, TuneResults
from clusterclip.dedup.config import DedupConfig
from clusterclip.plan.config import PlanConfig
from clusterclip.store.record import RecordError

DRIFT: dict[str, Any] = {
    "inputs": ["new.jsonl"], "documents_before": 100, "documents_added": 10, "percentile": 5.0,
    "reference": "training documents", "similarity_cut": 0.31, "below_cut": 2, "cluster_shift": 0.1,
    "cluster_shift_chance": 0.05, "cluster_shift_excess": 0.05, "drift_share": 0.2, "drift_threshold": 0.25,
    "recommend_refit": False, "cluster_before": [50, 50], "cluster_added": [5, 5], "cluster_growth": [0.1, 0.1],
    "embedder": "lsa", "dedup": None, "duplicates_skipped": 0, "duplicates_within": 0}
EXPERIMENT: dict[str, Any] = {
    "version": RESULTS_VERSION, "status": "complete", "config": {"seeds": [0]}, "config_hash": "c", "data_hash": "d",
    "split_hash": "s", "inputs": ["a.jsonl"], "run_dir": "runs/exp", "started_at": "2026-12-07T16:00:00+0000",
    "environment": {}, "data": {}, "splits": {}, "model": {}, "train": {}, "unigram": {}, "runs": {}}
TUNE: dict[str, Any] = {
    "version": TUNE_VERSION, "status": "running", "inputs": ["a.jsonl"], "config": {}, "tune": {}, "grid": ["random"],
    "pairs": [[0, 0]], "trajectory": []}
CASES = [(DriftReport, DRIFT, None), (ExperimentResults, EXPERIMENT, "version"), (TuneResults, TUNE, "version")]

# settings as a default `clusterclip run` records them (the order is the stages')
CORPUS = {"text_field": "text", "id_field": None, "group_field": "module", "on_bad_record": "error", "split": "train",
          "record_kind": "auto", "text_template": None, "tokenizer": None, "min_words": 25,
          "inputs": ["stdlib-docstrings"]}
EMBED = {"embedder": {"name": "lsa", "dim": 256, "seed": 0}, "shard_size": 65536}
CLUSTER = {"k": 37, "seed": 0, "niter": 25, "nredo": 1, "points_per_centroid": 256, "init": "kmeans++"}
PLAN = {"strategy": "clusterclip", "budget": None, "budget_unit": "tokens", "max_repeat": 4, "tau": None,
        "weights": None, "seed": 0, "window": None, "order": "equal-rate", "epochs": 2}
DEDUP = DedupConfig().__dict__
SETTINGS = [(CorpusSettings, CORPUS), (EmbedSettings, EMBED), (ClusterSettings, CLUSTER), (PlanSettings, PLAN),
            (DedupSettings, dict(DEDUP)), (ReportSettings, {}), (MixerSettings, {"format": 2})]


@pytest.mark.parametrize(("cls", "obj", "version_field"), CASES, ids=lambda c: getattr(c, "__name__", ""))
def test_a_record_reads_back_as_written(cls: Any, obj: dict[str, Any], version_field: str | None) -> None:
    assert cls.from_json(obj, "f.json").to_json() == obj


@pytest.mark.parametrize(("cls", "obj", "version_field"), CASES, ids=lambda c: getattr(c, "__name__", ""))
def test_a_record_with_a_field_this_version_does_not_know_is_refused(cls: Any, obj: dict[str, Any],
                                                                     version_field: str | None) -> None:
    with pytest.raises(RecordError, match=r"f\.json: unknown field\(s\) surprise"):
        cls.from_json({**obj, "surprise": 1}, "f.json")


@pytest.mark.parametrize(("cls", "obj", "version_field"), CASES, ids=lambda c: getattr(c, "__name__", ""))
def test_a_record_of_a_version_this_one_does_not_read_is_refused(cls: Any, obj: dict[str, Any],
                                                                 version_field: str | None) -> None:
    with pytest.raises(RecordError, match=r"f\.json: version 99 is not one this clusterclip reads"):
        cls.from_json({**obj, "version": 99}, "f.json")
    if version_field is not None:  # a file that names no version is refused too (the drift report's 1 names none)
        with pytest.raises(RecordError, match="version None is not one"):
            cls.from_json({k: v for k, v in obj.items() if k != version_field}, "f.json")


@pytest.mark.parametrize(("cls", "obj"), SETTINGS, ids=lambda c: getattr(c, "__name__", ""))
def test_recorded_settings_read_back_key_for_key(cls: Any, obj: dict[str, Any]) -> None:
    back = cls.from_json(obj, "r.json").to_json()
    assert json.dumps(back) == json.dumps(obj)  # the same keys in the same order: a rewritten record keeps its bytes
    with pytest.raises(RecordError, match=r"r\.json: config: unknown field\(s\) surprise"):
        cls.from_json({**obj, "surprise": 1}, "r.json")


def test_optional_settings_are_written_only_when_set() -> None:
    stratified = {**PLAN, "duplicates": "drop", "strata": "cluster,quality:4", "quality_mix": 0.5}
    assert list(PlanSettings.from_json(stratified).to_json()) == list(stratified)
    added = {**CORPUS, "added": [{"inputs": ["b.jsonl"], "read": {}}]}
    settings = CorpusSettings.from_json(CORPUS)
    assert settings.added is None and settings.with_added({"inputs": ["b.jsonl"], "read": {}}) == added
    assert settings.differing({**CORPUS, "min_words": 3, "inputs": ["x"]}) == ["min_words"]


def test_a_stage_record_reads_its_settings_typed_and_writes_them_back() -> None:
    rec = {"stage": "cluster", "format_version": 2, "config": CLUSTER, "config_hash": "h", "inputs_hash": "i",
           "finished_at": "t", "seconds": 1.0, "upstream": {}, "artifacts": {}, "k": 37, "k_requested": 37,
           "empty_clusters_removed": 0, "sample_size": 10, "objective": 0.5, "train_objective": 0.5, "iterations": 3,
           "fit_seconds": 0.1, "engine": "local", "size_min": 1, "size_median": 2.0, "size_max": 3}
    typed = ClusterRecord.from_json(rec, "cluster.json")
    assert isinstance(typed.config, ClusterSettings) and typed.config.init == "kmeans++"
    assert json.dumps(typed.to_json()) == json.dumps(rec)
    with pytest.raises(RecordError, match=r"cluster.json: config: field 'k' is str"):
        ClusterRecord.from_json({**rec, "config": {**CLUSTER, "k": "37"}}, "cluster.json")


def test_the_planner_builds_its_config_from_the_recorded_settings() -> None:
    config = PlanConfig.from_recorded(PlanSettings.from_json(PLAN))
    assert config.to_json() == PLAN and config.name() == "clusterclip-R4-tokens-B2epochs-s0"


# an export's settings as `clusterclip export --tokenizer T --seq-len 8` records them, and before --pad-to-multiple
EXPORT = {"fmt": "jsonl", "shard_size": 100000, "memory_mb": 4096, "tokenizer": "t", "append_eos": False, "seq_len": 8,
          "pad_to_multiple": None, "tokenizer_sha256": "abc"}
EXPORT_BEFORE_PAD = {k: v for k, v in EXPORT.items() if k != "pad_to_multiple"}


def test_export_settings_read_back_key_for_key_and_settings_added_later_only_when_on() -> None:
    from clusterclip.contract.export import ExportSettings

    first = {k: v for k, v in EXPORT.items() if k != "tokenizer_sha256"}
    blend = {**first, "keep_record": True, "blend": True, "tokenizer_sha256": "abc"}
    for obj in (EXPORT, blend):
        assert json.dumps(ExportSettings.from_json(obj, "export.json").to_json()) == json.dumps(obj)


def test_an_export_record_written_before_pad_to_multiple_reads_and_an_unknown_setting_is_refused() -> None:
    from clusterclip.contract.export import ExportSettings
    from clusterclip.export.stage import ExportConfig

    old = ExportSettings.from_json(EXPORT_BEFORE_PAD, "export.json")
    assert old.pad_to_multiple is None and not old.blend and not old.keep_record
    assert ExportConfig.from_recorded(old).seq_len == 8
    with pytest.raises(RecordError, match=r"export\.json: config: unknown field\(s\) surprise"):
        ExportSettings.from_json({**EXPORT, "surprise": 1}, "export.json")


def test_experiment_and_tune_settings_read_back_key_for_key_and_build_their_config() -> None:
    from clusterclip.contract.experiment import ExperimentSettings, ProxyRunSettings, SearchSettings
    from clusterclip.experiment.config import ExperimentConfig
    from clusterclip.experiment.specs import DEFAULT_ONLINE_UPDATES

    cfg = ExperimentConfig(docs=100, objective="sft")
    recorded = json.loads(json.dumps(cfg.recorded()))
    settings = ExperimentSettings.from_json(recorded, "experiment.json")
    assert json.dumps(settings.to_json()) == json.dumps(recorded)
    assert ExperimentConfig.from_recorded(settings) == cfg
    before = {k: v for k, v in recorded.items() if k not in ("online_updates", "quality_scorer", "objective")}
    assert ExperimentSettings.from_json(before).online_updates == DEFAULT_ONLINE_UPDATES
    for cls, obj in ((ProxyRunSettings, {"spec": {"strategy": "random"}, "split": 0, "seed": 1}),
                     (SearchSettings, {"config": {}, "tune": {}, "write_plan": True})):
        assert json.dumps(cls.from_json(obj).to_json()) == json.dumps(obj)
        with pytest.raises(RecordError, match="unknown field"):
            cls.from_json({**obj, "surprise": 1})
