"""The contract between stages: typed records that refuse what they do not declare, one table of stages that
every reader agrees with, extension points that are classes, and a trainer side that imports light."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from clusterclip.cli import main as cli
from clusterclip.cli import options as cli_options
from clusterclip.cli.options import plan_configs
from clusterclip.cluster.config import ClusterConfig
from clusterclip.cluster.stage import cluster_stage
from clusterclip.contract.cluster import ClusterRecord
from clusterclip.contract.corpus import CorpusRecord, read_column
from clusterclip.contract.embed import EmbedRecord, load_embeddings
from clusterclip.contract.plan import PlanRecord
from clusterclip.contract.stages import GROWN, PIPELINE, SINGLE, STAGES, contract_of, finished_stages, upstream_first
from clusterclip.corpus.config import CorpusConfig
from clusterclip.corpus.format_base import RowFormat
from clusterclip.corpus.formats import FORMATS
from clusterclip.corpus.inputs import format_of
from clusterclip.corpus.stage import corpus_stage
from clusterclip.dedup.stage import dedup_stage
from clusterclip.embed import registry
from clusterclip.embed.base import EmbedderBase
from clusterclip.embed.config import EmbedConfig
from clusterclip.embed.load import run_embedder
from clusterclip.embed.stage import embed_stage
from clusterclip.errors import BadRecordError, ClusterClipError
from clusterclip.pipeline import DEFAULT_EPOCHS
from clusterclip.plan import strategies
from clusterclip.plan.build import build_plan
from clusterclip.plan.config import PlanConfig, PlanConfigError
from clusterclip.plan.stage import plan_stage
from clusterclip.plan.strategies import Strategy
from clusterclip.stage_table import TABLE
from clusterclip.store import RunDir
from clusterclip.store.record import RecordError, StageRecord
from clusterclip.summary import format_summary, summarize
from tests.test_cli import make_corpus


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("contracts")
    corpus = make_corpus(root / "c.jsonl", {"cooking": 40, "astronomy": 20, "finance": 10})
    run = RunDir(root / "run")
    with run.lock():
        corpus_stage(run, [corpus], progress=False)
        embed_stage(run, EmbedConfig(embedder="hashing", shard_size=32, extra={"dim": 16}), progress=False)
        cluster_stage(run, ClusterConfig(k=3), progress=False)
        plan_stage(run, PlanConfig())
    return run


def test_the_stages_are_ordered_by_their_declared_upstream_alone():
    names = [c.NAME for c in STAGES]
    assert names == ["corpus", "embed", "cluster", "dedup", "plans", "report"]
    for i, contract in enumerate(STAGES):
        assert set(contract.UPSTREAM) <= set(names[:i]), contract.NAME
    assert upstream_first(reversed(STAGES)) == STAGES
    assert upstream_first([STAGES[4], STAGES[1], STAGES[5], STAGES[0], STAGES[3], STAGES[2]]) == STAGES
    assert contract_of("plans/x/plan") is PlanRecord and contract_of("corpus") is CorpusRecord


def test_every_list_of_stages_is_derived_from_the_declaration():
    assert [c.NAME for c in PIPELINE] == ["corpus", "embed", "cluster", "plans"]
    assert [c.NAME for c in GROWN] == ["corpus", "embed", "cluster"]
    assert [c.NAME for c in SINGLE] == ["corpus", "embed", "cluster", "dedup"]
    assert tuple(entry.contract for entry in TABLE) == STAGES
    assert [e.name for e in TABLE if e.grow is not None] == ["corpus", "embed", "cluster", "dedup"]


def _record(name: str, upstream: tuple[str, ...]) -> type[StageRecord]:
    return type(f"Toy{name}", (StageRecord,), {"NAME": name, "UPSTREAM": upstream})


def test_a_new_stage_is_placed_by_its_upstream_and_a_wrong_declaration_is_refused():
    toy = _record("toy", ("cluster",))
    assert [c.NAME for c in upstream_first((toy, *STAGES))][:4] == ["corpus", "embed", "cluster", "toy"]
    with pytest.raises(ValueError, match=r"upstream stage\(s\) cluster that are not declared"):
        upstream_first((toy, CorpusRecord))
    with pytest.raises(ValueError, match="declared twice"):
        upstream_first((*STAGES, CorpusRecord))
    with pytest.raises(ValueError, match="a cycle"):
        upstream_first((_record("a", ("b",)), _record("b", ("a",))))


def test_the_declared_upstream_holds_every_stage_a_build_records(small_run, tmp_path):
    shutil.copytree(small_run.root, tmp_path / "run")
    run = RunDir(tmp_path / "run")
    with run.lock():
        dedup_stage(run)
        plan_stage(run, PlanConfig(duplicates="group-cap"))
    seen = set()
    for stage in finished_stages(run):
        recorded = {s.split("/")[0] for s in json.loads(run.record_path(stage).read_text())["upstream"]}
        assert recorded <= set(contract_of(stage).UPSTREAM), (stage, recorded)
        seen |= recorded
    assert seen == {"corpus", "embed", "cluster", "dedup"}


@pytest.mark.parametrize("contract", [CorpusRecord, EmbedRecord, ClusterRecord, PlanRecord])
def test_a_record_reads_back_as_written_and_refuses_what_it_does_not_declare(small_run, contract):
    stage = contract.instances(small_run)[0]
    raw = json.loads(small_run.record_path(stage).read_text())
    rec = contract.from_json(raw)
    assert rec.to_json() == raw  # nothing lost, nothing added
    with pytest.raises(RecordError, match=r"unknown field\(s\) surprise") as err:
        contract.from_json({**raw, "surprise": 1})
    assert len(str(err.value).splitlines()) == 1
    required = next(f.name for f in dataclasses.fields(contract) if f.name in contract.own_fields()
                    and f.default is dataclasses.MISSING)
    with pytest.raises(RecordError, match=rf"missing field\(s\) {required}"):
        contract.from_json({k: v for k, v in raw.items() if k != required})
    with pytest.raises(RecordError, match="format_version 3"):
        contract.from_json({**raw, "format_version": 3})
    with pytest.raises(RecordError, match="field 'config_hash' is int"):
        contract.from_json({**raw, "config_hash": 7})


def test_a_malformed_record_is_one_line_naming_its_rebuild(small_run, tmp_path):
    raw = json.loads(small_run.record_path("cluster").read_text())
    raw["k"] = "three"
    small_run.record_path("cluster").write_text(json.dumps(raw))
    try:
        with pytest.raises(RecordError,
                           match=r"cluster\.json: field 'k' is str 'three', not int; rebuild it: .clusterclip cluster"):
            ClusterRecord.require(small_run, verify=False)
    finally:
        raw["k"] = 3
        small_run.record_path("cluster").write_text(json.dumps(raw))


def test_status_lists_every_stage_of_the_table_including_dedup(small_run):
    from clusterclip.dedup.stage import dedup_stage

    assert finished_stages(small_run)[:3] == ["corpus", "embed", "cluster"]
    with small_run.lock():
        dedup_stage(small_run)
    assert "dedup" in finished_stages(small_run)
    summary = summarize(small_run)
    assert summary["dedup"]["documents"] == 70 and "problems" not in summary
    assert "dedup:" in format_summary(summary)


class Reversed(EmbedderBase):
    """A toy embedder: characters of the reversed text, hashed into a few buckets (what a new embedder needs:
    its name, a summary, the options that rebuild it, ``config`` and ``_encode_batches``)."""

    name = "toy-reversed"
    SUMMARY = "a test's toy embedder"
    REBUILD_OPTIONS = ("dim",)

    def __init__(self, *, dim: int = 8, batch_size: int = 64, progress: bool = False) -> None:
        super().__init__(batch_size, progress)
        self.dim = dim

    def config(self) -> dict[str, object]:
        return {"name": self.name, "dim": self.dim}

    def _encode_batches(self, texts):
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            np.add.at(out[i], [ord(c) % self.dim for c in t[::-1]], 1.0)
        yield slice(0, len(texts)), out


def test_a_new_embedder_is_a_class_plus_one_registry_line(tmp_path, monkeypatch):
    monkeypatch.setitem(registry.EMBEDDERS, Reversed.name, Reversed)
    run = RunDir(tmp_path / "run")
    corpus = make_corpus(tmp_path / "c.jsonl", {"cooking": 12, "sailing": 8})
    with run.lock():
        corpus_stage(run, [corpus], progress=False)
        emb = registry.get_embedder("toy-reversed", dim=4)  # built by name, as --embedder builds it
        rec = embed_stage(run, EmbedConfig(shard_size=8), embedder=emb, progress=False)
    assert rec.embedder == "toy-reversed" and rec.dim == 4 and load_embeddings(run).shape == (20, 4)
    rebuilt = run_embedder(run)  # what `clusterclip add` embeds new documents with, from the record
    assert isinstance(rebuilt, Reversed) and rebuilt.config() == rec.embedder_config


IMPORT_PROBE = """
import json, sys, time
t = time.perf_counter()
{statement}
print(json.dumps({{"seconds": time.perf_counter() - t,
                  "modules": sorted(m for m in sys.modules if m.startswith("clusterclip"))}}))
"""


def _loaded(statement: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", IMPORT_PROBE.format(statement=statement)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)["modules"]


def test_the_trainer_side_and_the_planner_settings_import_light():
    """What a training job imports loads no reader, embedder, dedup, engine or build module (the module counts
    and times before and after are in benchmarks/RESULTS.md, ``bench_imports.py``)."""
    heavy = ("corpus.", "embed.", "dedup.", "engines", "cluster.stage", "cluster.kmeans", "export.stage",
             "export.stream", ".stage")
    sampler = _loaded("import clusterclip.torch")
    assert not [m for m in sampler if any(h in m.removeprefix("clusterclip.") for h in heavy)], sampler
    assert len(sampler) <= 24, sampler  # 31 before the contracts moved below the stages (no planner settings now)
    settings = _loaded("from clusterclip.plan import PlanConfig")
    assert set(settings) == {"clusterclip", "clusterclip.errors", "clusterclip.plan", "clusterclip.plan.config",
                             "clusterclip.plan.strata_spec", "clusterclip.plan.strategies",
                             "clusterclip.settings"}, settings


class Tsv(RowFormat):
    """A toy reader format: ``id<TAB>text`` lines (what a new format needs: its name, suffixes, records and the
    document of one record; the bad-record policy, batching and work units come with the base class)."""

    name = "tsv"
    SUFFIXES = (".tsv",)
    EXPECTED = ".tsv"

    @classmethod
    def records(cls, unit, opts):
        with open(unit.path, "rb") as fh:
            for lineno, raw in enumerate(fh, 1):
                if raw.strip():
                    yield str(unit.path), lineno, raw

    @staticmethod
    def document(line, opts, source, loc):
        doc_id, tab, text = line.decode("utf-8").rstrip("\n").partition("\t")
        if not tab or not text.strip():
            raise BadRecordError(source, loc, "expected id<TAB>text")
        return doc_id, text, None


def test_a_new_reader_format_is_a_class_plus_one_registry_line(tmp_path, monkeypatch):
    monkeypatch.setitem(FORMATS, Tsv.name, Tsv)
    data = tmp_path / "in" / "docs.tsv"
    data.parent.mkdir()
    data.write_text("a1\tthe first document\nno tab here\n\na2\tthe second document\n")
    (tmp_path / "in" / "notes.md").write_text("not an input")
    with pytest.raises(ClusterClipError, match=r"notes\.md: unknown input format; expected .* or \.tsv$"):
        format_of(tmp_path / "in" / "notes.md")
    strict = RunDir(tmp_path / "strict")
    with strict.lock(), pytest.raises(BadRecordError, match=r"docs\.tsv:2: expected id<TAB>text"):
        corpus_stage(strict, [data], CorpusConfig(id_field="id"), progress=False)
    run = RunDir(tmp_path / "run")
    with run.lock():  # a folder's .tsv files are found by the registry too
        rec = corpus_stage(run, [tmp_path / "in"], CorpusConfig(id_field="id", on_bad_record="skip"), progress=False)
    assert rec.count == 2 and rec.skipped == 1 and "docs.tsv:2: expected id<TAB>text" in rec.skipped_examples[0]
    assert [e["format"] for e in rec.inputs] == ["tsv"]
    assert read_column(run, "id") == ["a1", "a2"]
    assert read_column(run, "text") == ["the first document", "the second document"]


class Inverse(Strategy):
    """A toy strategy: cluster weights ``1 / n_c`` under a default cap of 2 (what a new strategy needs: its name,
    help, default cap and weights; quotas, passes and order come from the planner)."""

    name = "inverse"
    SUMMARY = "cluster weights 1/n_c"
    DEFAULT_MAX_REPEAT = 2

    @classmethod
    def weights(cls, sizes, options):
        w = np.zeros(sizes.shape[0])
        w[sizes > 0] = 1.0 / sizes[sizes > 0]
        return w


def test_a_new_strategy_is_a_class_plus_one_registry_line(monkeypatch):
    monkeypatch.setitem(strategies.STRATEGIES, Inverse.name, Inverse)
    config = PlanConfig(strategy="inverse", budget=60)
    assert config.effective_max_repeat == 2 and config.name() == "inverse-R2-docs-B60-s0"
    assert config.to_json()["tau"] is None and config.to_json()["weights"] is None
    labels = np.repeat(np.arange(3, dtype=np.int32), [60, 20, 5])
    plan = build_plan(labels, config)
    draws = np.bincount(labels[plan.order], minlength=3)
    assert np.bincount(plan.order).max() <= 2, "the strategy's default cap holds"
    assert draws[2] == 10 and draws.sum() == 60 and abs(int(draws[1]) - 3 * int(draws[0])) <= 2, draws
    assert plan.stats["strategy"] == "inverse" and plan.stats["max_repeat"] == 2
    args = cli.build_parser().parse_args(["plan", "RUN", "--strategy", "inverse", "--weights", "w.json"])
    monkeypatch.setattr(cli_options, "load_weights", lambda path: ((0, 1.0),))
    assert plan_configs(args, [args.strategy]) == [PlanConfig(strategy="inverse", epochs=DEFAULT_EPOCHS)], \
        "no weights: it takes none"
    with pytest.raises(PlanConfigError, match="weights are only used by strategy 'weights', not 'inverse'"):
        PlanConfig(strategy="inverse", weights=((0, 1.0),))
    with pytest.raises(PlanConfigError, match=r"strategy must be one of clusterclip, .*, weights, inverse, got 'zipf'"):
        PlanConfig(strategy="zipf")


def test_the_trainer_side_without_torch_names_the_extra():
    """On a core install ``import clusterclip.torch`` names the extra that brings PyTorch."""
    import subprocess
    import sys

    code = "import sys; sys.modules['torch'] = None\nimport clusterclip.torch"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and last == ("ModuleNotFoundError: clusterclip.torch needs PyTorch, not installed: "
                                             "pip install 'clusterclip[torch]'"), proc.stderr


def test_the_export_reader_finds_the_identity_where_each_writer_declares_it_writes_it():
    """The writer carries the fact (``Writer.METADATA``, where it writes the identity); the reader's copy, which
    trainers use without importing the writers, is that of every registered writer."""
    from clusterclip.contract.export import FORMAT_METADATA
    from clusterclip.export.writers.registry import WRITERS

    declared = {name: cls.METADATA for name, cls in WRITERS.items() if cls.METADATA is not None}
    assert declared == FORMAT_METADATA and set(FORMAT_METADATA) <= set(WRITERS)
