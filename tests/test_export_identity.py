"""An export says which plan it holds (``export.json`` and the format's own metadata), and a trainer
refuses an export of another plan than its saved state; ``--pad-to-multiple`` pads like DistributedSampler."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from clusterclip.contract.export import ExportMismatchError, check_export, read_export
from clusterclip.errors import ClusterClipError
from clusterclip.export.stage import export_plan
from clusterclip.plan import PlanConfig
from clusterclip.plan.stage import plan_stage
from clusterclip.store import load_json
from tests.test_export import _run
from tests.test_export_formats import _available, _plan, _tokenizer

torch = pytest.importorskip("torch")
from clusterclip.torch import ClusterClipSampler

FORMATS = ["jsonl", "parquet", "hf", "litdata", "megatron", "mds"]
META_FILE = {"hf": "dataset_info.json", "litdata": "index.json", "mds": "index.json"}


def _export(tmp_path, fmt, **opts):
    run, cfg, _labels = _run(tmp_path)
    if fmt == "megatron":
        opts.setdefault("tokenizer", _tokenizer(tmp_path))
    out = tmp_path / fmt
    export_plan(run, cfg.name(), out, fmt=fmt, shard_size=32, **opts)
    return run, cfg, out


def _format_meta(out, fmt):
    if fmt == "parquet":
        return json.loads(pq.read_schema(out / "part-00000.parquet").metadata[b"clusterclip"])
    return load_json(out / META_FILE[fmt])["clusterclip"] if fmt in META_FILE else None


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_export_records_the_plan_identity_in_its_own_metadata(tmp_path, fmt):
    if not _available(fmt):
        pytest.skip(f"{fmt} library not installed")
    run, cfg, out = _export(tmp_path, fmt)
    sampler = ClusterClipSampler(run.root, plan_name=cfg.name())
    info = read_export(out)
    assert info.plan == cfg.name() and info.plan_identity == sampler.identity
    assert info.stream_identity == sampler.identity  # unpacked: row i is plan position i
    record = load_json(out / "export.json")
    assert record["identity"]["plan_identity"] == sampler.identity
    assert record["stream_identity"] == sampler.identity
    meta = _format_meta(out, fmt)
    if fmt in ("jsonl", "megatron"):
        assert meta is None
    else:
        assert meta["plan_identity"] == sampler.identity and meta["plan"] == cfg.name()
    if fmt == "hf":
        import datasets

        ds = datasets.load_from_disk(str(out))
        assert cfg.name() in ds.info.description and len(ds) == len(_plan(run, cfg))


def test_trainer_side_check_refuses_an_export_of_another_plan(tmp_path):
    run, cfg, out = _export(tmp_path, "parquet")
    other = PlanConfig(budget=90, seed=5)
    plan_stage(run, other)
    export_plan(run, other.name(), tmp_path / "other", fmt="parquet")
    mine = ClusterClipSampler(run.root, plan_name=cfg.name())
    assert check_export(out, mine.state_dict()).plan == cfg.name()
    with pytest.raises(ExportMismatchError, match=f"saved on stream .* of plan '{cfg.name()}'"):
        check_export(tmp_path / "other", mine.state_dict())
    with pytest.raises(ExportMismatchError, match="names no plan identity"):
        check_export(out, {"consumed": 3})


def test_metadata_of_another_export_is_refused(tmp_path):
    run, _cfg, out = _export(tmp_path, "litdata") if _available("litdata") else _export(tmp_path, "parquet")
    fmt = read_export(out).format
    if fmt == "litdata":
        index = load_json(out / "index.json")
        index["clusterclip"]["stream_identity"] = "0" * 32
        (out / "index.json").write_text(json.dumps(index))
    else:
        other = PlanConfig(budget=90, seed=5)
        plan_stage(run, other)
        export_plan(run, other.name(), tmp_path / "o", fmt="parquet")
        (out / "part-00000.parquet").write_bytes((tmp_path / "o" / "part-00000.parquet").read_bytes())
    with pytest.raises(ExportMismatchError, match="files of two exports are mixed"):
        read_export(out)


def test_not_an_export_and_a_killed_export_are_named(tmp_path):
    with pytest.raises(ExportMismatchError, match=r"not a finished clusterclip export$"):
        read_export(tmp_path)
    (tmp_path / ".partial").mkdir()
    with pytest.raises(ExportMismatchError, match="a killed export"):
        read_export(tmp_path)


def test_sampler_over_an_export_resumes_a_corpus_state_and_refuses_another(tmp_path):
    run, cfg, out = _export(tmp_path, "parquet")
    plan = _plan(run, cfg)
    corpus = ClusterClipSampler(run.root, plan_name=cfg.name(), rank=0, world_size=2)
    state = corpus.state_dict(consumed_batches=3, batch_size=5)  # 30 plan positions trained
    rows = ClusterClipSampler.from_export(out, rank=1, world_size=3)
    rows.load_state_dict(state)
    per_rank = -(-(len(plan) - 30) // 3)
    assert list(rows) == [(30 + 1 + 3 * j) % len(plan) for j in range(per_rank)]  # row i is plan position i
    packed = tmp_path / "packed"
    export_plan(run, cfg.name(), packed, fmt="parquet", tokenizer=_tokenizer(tmp_path), seq_len=4)
    over_packed = ClusterClipSampler.from_export(packed)
    assert over_packed.identity == read_export(packed).stream_identity != corpus.identity
    with pytest.raises(Exception, match="state is from plan"):
        over_packed.load_state_dict(state)


@pytest.mark.parametrize("multiple", [1, 7, 64])
def test_pad_to_multiple_repeats_the_first_rows(tmp_path, multiple):
    run, cfg, out = _export(tmp_path, "parquet", pad_to_multiple=multiple)
    plan = _plan(run, cfg)
    rows = pq.read_table(sorted(out.glob("part-*.parquet"))).column("index").to_numpy()
    pad = (-len(plan)) % multiple
    assert len(rows) % multiple == 0 and len(rows) == len(plan) + pad
    np.testing.assert_array_equal(rows, np.resize(plan, len(plan) + pad))
    record = load_json(out / "export.json")
    assert record["pad_rows"] == pad and record["rows"] == len(rows)
    assert read_export(out).stream_identity != ClusterClipSampler(run.root, plan_name=cfg.name()).identity


@pytest.mark.parametrize("extra", [{}, {"seq_len": 4}])
def test_a_pad_that_would_repeat_rows_twice_is_refused(tmp_path, extra):
    """--pad-to-multiple larger than twice the stream would write some rows three times and more (a 200-row plan
    padded to 1,000 repeats the whole plan four more times): one line, nothing exported."""
    if extra:
        extra = {**extra, "tokenizer": _tokenizer(tmp_path)}
    with pytest.raises(ClusterClipError, match=r"--pad-to-multiple 100,000,000 would add [\d,]+ pad rows to the "
                                               r"stream's [\d,]+: rows would repeat more than once more"):
        _export(tmp_path, "parquet", pad_to_multiple=10**8, **extra)
    assert not (tmp_path / "parquet" / "export.json").exists()


def test_a_saved_stream_identity_checks_a_megatron_export(tmp_path):
    if not _available("megatron"):
        pytest.skip("megatron-core not installed")
    run, _, out = _export(tmp_path, "megatron")
    saved = read_export(out).stream_identity
    assert check_export(out, saved).format == "megatron"
    other = PlanConfig(budget=90, seed=5)
    plan_stage(run, other)
    export_plan(run, other.name(), tmp_path / "meg2", fmt="megatron", tokenizer=str(tmp_path / "tok"))
    with pytest.raises(ExportMismatchError, match="resume on the export of the plan it was saved with"):
        check_export(tmp_path / "meg2", saved)


@pytest.mark.parametrize("damage", ["append", "truncate", "delete"])
def test_an_export_file_changed_since_the_export_is_refused_before_reading(tmp_path, damage):
    """read_export and the sampler over an export check every file's size against export.json: a row appended to a
    part, a truncated part or a missing one is one line, not a trainer's surprise mid-epoch."""
    _, _, out = _export(tmp_path, "jsonl")
    part = sorted(out.glob("part-*.jsonl"))[-1]
    if damage == "append":
        with part.open("a") as fh:
            fh.write('{"text": "an extra row"}\n')
    elif damage == "truncate":
        part.write_bytes(part.read_bytes()[:100])
    else:
        part.unlink()
    found = "is missing" if damage == "delete" else r"has [\d,]+ bytes"
    with pytest.raises(ExportMismatchError, match=rf"{part.name} {found}, export\.json records [\d,]+: it changed"):
        read_export(out)
    with pytest.raises(ExportMismatchError, match="it changed since the export"):
        ClusterClipSampler.from_export(out)


def test_an_export_is_read_through_its_record_a_link_to_it_or_a_linked_record(tmp_path):
    """The export is the folder its export.json really lies in: read through the record, a link to the record
    elsewhere, or a folder whose export.json is a link (files beside the folder given)."""
    _, _, out = _export(tmp_path, "parquet")
    rows = read_export(out).rows
    link = tmp_path / "elsewhere" / "my-export.json"
    link.parent.mkdir()
    link.symlink_to(out / "export.json")
    for given in (out / "export.json", link):
        assert read_export(given).rows == rows and read_export(given).folder == out.resolve()
        assert len(ClusterClipSampler.from_export(given, world_size=1, rank=0)) == rows
    moved = tmp_path / "moved"
    moved.mkdir()
    for part in out.glob("part-*"):
        shutil.copy(part, moved)
    (tmp_path / "records").mkdir()
    shutil.copy(out / "export.json", tmp_path / "records" / "export.json")
    (moved / "export.json").symlink_to(tmp_path / "records" / "export.json")
    assert read_export(moved).rows == rows


@pytest.mark.parametrize("edit", ["rows", "identity", "pad_rows", "files"])
def test_an_export_record_edited_by_hand_is_refused_by_every_reader(tmp_path, edit):
    """export.json's rows, identity and files are covered by its content_hash: a row count raised by hand (which no
    file size betrays) or another plan identity written in is refused, not trusted."""
    _, _, out = _export(tmp_path, "jsonl")
    record = load_json(out / "export.json")
    assert record["content_hash"]
    if edit == "rows":
        record["rows"] += 1
    elif edit == "identity":
        record["identity"]["plan_identity"] = "0" * 16
    elif edit == "pad_rows":
        record["pad_rows"] += 3
    else:
        record["files"] = [*record["files"], "part-99999.jsonl"]
    (out / "export.json").write_text(json.dumps(record))
    for read in (read_export, ClusterClipSampler.from_export):
        with pytest.raises(ExportMismatchError, match=r"changed since the export \(its content_hash"):
            read(out)
    del record["content_hash"]  # an export written before content_hash: nothing to check against
    (out / "export.json").write_text(json.dumps(record))
    if edit in ("rows", "pad_rows"):
        read_export(out)
