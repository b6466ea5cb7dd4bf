"""``clusterclip export --blend``: one Megatron source per cluster plus the plan's token mixture as a blend.

The fixture documents are ``text of doc {i} ünï`` followed by ``i % 7`` unknown words (so documents differ in
length and token shares differ from document shares), each ending with EOS; token ``6 + i`` is unique to
document ``i``. Expected values are computed from the plan file and the hand tokenization, never copied.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from clusterclip.cli.main import main
from clusterclip.contract.dedup import dedup_inputs
from clusterclip.contract.export import check_export, read_export
from clusterclip.errors import ClusterClipError
from clusterclip.export import blend as export_blend
from clusterclip.export.stage import ExportConfig, export_plan
from clusterclip.export.writers import megatron as megatron_writer
from clusterclip.plan import PlanConfig
from clusterclip.plan.stage import plan_stage
from clusterclip.settings import SettingsError, error_message
from clusterclip.store import save_npy
from tests.records import write_record
from tests.test_export import _run
from tests.test_export_formats import _ids, _plan, _tokenizer

pytest.importorskip("megatron.core")


def _pad(i: int) -> str:
    return " zz" * (i % 7)


def _doc(i: int) -> list[int]:
    """Token ids of fixture document ``i`` with EOS (``zz`` is ``[UNK]``, id 0)."""
    ids = _ids(i, eos=True)
    return ids[:-1] + [0] * (i % 7) + ids[-1:]


def _export(run, cfg, tok, out, **kw):
    return export_plan(run, cfg.name(), out, fmt="megatron", tokenizer=tok, append_eos=True, blend=True, **kw)


@pytest.fixture(scope="module")
def blended(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("blend")
    run, cfg, labels = _run(tmp, pad=_pad)
    tok = _tokenizer(tmp)
    files = _export(run, cfg, tok, tmp / "out")
    record = json.loads((tmp / "out" / "export.json").read_text())
    return run, cfg, labels, tok, tmp / "out", files, record


def _sources(record):
    return {s["cluster"]: s for s in record["blend"]["sources"]}


def _planned_tokens(plan, labels, k):
    """Per cluster: sum over draws of the drawn document's token count (with EOS)."""
    lengths = np.array([len(_doc(i)) for i in range(labels.size)])
    return np.bincount(labels[plan], weights=lengths[plan], minlength=k)


def test_each_source_holds_its_clusters_documents_once_in_corpus_order(blended):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    _, _, labels, _, out, files, record = blended
    sources = _sources(record)
    assert sorted(sources) == sorted(np.unique(labels).tolist())
    for c, source in sources.items():
        members = np.flatnonzero(labels == c)
        ds = IndexedDataset(str(out / source["prefix"]))
        assert [ds[j].tolist() for j in range(len(ds))] == [_doc(int(i)) for i in members]
        assert source["documents"] == members.size and source["tokens"] == sum(len(_doc(int(i))) for i in members)
    assert sorted(p.name for p in files) == sorted(
        [f"{s['prefix']}{x}" for s in sources.values() for x in (".bin", ".idx")]
        + ["megatron_data_path.txt", "olmo_source_mixture.json"])


def test_weights_are_the_plans_token_shares(blended):
    run, cfg, labels, _, out, _, record = blended
    plan = _plan(run, cfg)
    planned = _planned_tokens(plan, labels, int(labels.max()) + 1)
    lines = [line.split() for line in (out / "megatron_data_path.txt").read_text().splitlines()]
    weights = {Path(prefix).name: float(w) for w, prefix in lines}
    assert all(Path(prefix).parent == out.absolute() for _, prefix in lines)
    expected = {f"cluster-{c:05d}": planned[c] / planned.sum() for c in range(planned.size) if planned[c] > 0}
    assert weights.keys() == expected.keys() and sum(weights.values()) == 1.0
    assert all(abs(weights[k] - expected[k]) < 1e-12 for k in expected)
    assert len(set(np.round(list(weights.values()), 6))) > 1  # documents differ in length: shares are not equal
    sources = _sources(record)
    for c, s in sources.items():
        assert s["planned_tokens"] == planned[c] and s["planned_draws"] == int(np.sum(labels[plan] == c))
        assert s["repetition"] == pytest.approx(planned[c] / s["tokens"])
        assert s["max_repeat_observed"] == np.bincount(plan[labels[plan] == c]).max() <= record["blend"]["max_repeat"]
    assert record["blend"]["planned_tokens"] == planned.sum() and record["documents"] == plan.size


def test_olmo_token_files_memmap_to_the_sources_tokens(blended):
    _, _, labels, _, out, _, record = blended
    config = json.loads((out / "olmo_source_mixture.json").read_text())
    sources = {s["prefix"]: s for s in record["blend"]["sources"]}
    entries = config["source_list"]["sources"]
    dtype = record["blend"]["olmo_dtype"]
    assert dtype == "uint16" and sum(s["target_ratio"] for s in entries) == 1.0
    assert config["requested_tokens"] == record["blend"]["planned_tokens"]
    for entry in entries:
        c = int(entry["source_name"].split("-")[1])
        tokens = np.memmap(entry["paths"][0], dtype=dtype, mode="r")
        assert tokens.tolist() == [t for i in np.flatnonzero(labels == c) for t in _doc(int(i))]
        # OLMo-core's feasibility rule: population * max_repetition_ratio covers target_ratio * requested_tokens
        assert entry["max_repetition_ratio"] >= 1.0
        need = int(config["requested_tokens"] * entry["target_ratio"])
        assert int(tokens.size * entry["max_repetition_ratio"]) >= need
        assert entry["target_ratio"] == pytest.approx(sources[entry["source_name"]]["weight"])


def test_olmo_core_builds_the_mixture(blended):
    """Where OLMo-core is installed, its own builder selects about each source's planned tokens."""
    source_mixture = pytest.importorskip("olmo_core.data.source_mixture")
    _, _, _, _, out, _, record = blended
    config = json.loads((out / "olmo_source_mixture.json").read_text())
    seq = 8
    mixture = source_mixture.SourceMixtureDatasetConfig.from_dict(
        {**config, "global_batch_size": 4 * seq, "quiet": True, "render_tables": False})
    built = mixture.build(npdtype=getattr(np, record["blend"]["olmo_dtype"]), sequence_length=seq)
    got = {o.name: sum(p.tokens for p in o.path_tokens) for o in built.sources}
    assert got.keys() == {s["prefix"] for s in record["blend"]["sources"]}
    assert all(abs(got[s["prefix"]] - s["planned_tokens"]) <= 4 * seq for s in record["blend"]["sources"])


def test_megatron_blends_the_sources_by_the_weights(blended, tmp_path, monkeypatch):
    import torch.distributed
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.utils import get_blend_from_list

    from tests.test_megatron_dataset import _Tokenizer

    _, _, labels, _, out, _, _ = blended
    blend = get_blend_from_list((out / "megatron_data_path.txt").read_text().split())  # as --data-args-path
    n = 4000
    monkeypatch.setattr(torch.distributed, "get_rank", lambda *a: 0)  # BlendedDataset asks even on one process
    config = GPTDatasetConfig(random_seed=7, sequence_length=8, tokenizer=_Tokenizer(), blend=blend, split="100,0,0",
                              path_to_cache=str(tmp_path), reset_position_ids=False, reset_attention_mask=False,
                              eod_mask_loss=False)
    train, _, _ = BlendedMegatronDatasetBuilder(GPTDataset, [n, 0, 0], lambda: True, config).build()
    share = np.bincount(train.dataset_index, minlength=len(blend[0])) / len(train)
    assert np.abs(share - np.array(blend[1])).max() < 0.01
    seen = 0
    for i in range(0, len(train), 37):  # every sample of source c holds documents of cluster c only
        docs = {t - 6 for t in train[i]["tokens"].tolist() if t >= 6}
        cluster = int(Path(blend[0][train.dataset_index[i]]).name.split("-")[1])
        assert all(labels[d] == cluster for d in docs)
        seen += len(docs)
    assert seen > 50


def test_read_export_accepts_it_and_no_stream_state_matches(blended):
    from clusterclip.export.megatron_dataset import read_export_record

    *_, out, _, record = blended
    info = read_export(out)
    assert info.blend and info.rows == record["rows"] == 50 and info.stream_identity != info.plan_identity
    with pytest.raises(ClusterClipError, match="is a --blend export"):
        check_export(out, info.plan_identity)
    with pytest.raises(ClusterClipError, match="is a --blend export"):
        read_export_record(out / "cluster-00000")
    from clusterclip.torch import ClusterClipSampler

    with pytest.raises(ClusterClipError, match=r"is a --blend export .*no planned stream to sample or resume on"):
        ClusterClipSampler.from_export(out)


def test_same_command_writes_the_same_bytes_and_a_killed_export_finishes(blended, tmp_path, monkeypatch):
    run, cfg, _, tok, out, files, _ = blended
    clean = {p.name: p.read_bytes() for p in files}
    again = _export(run, cfg, tok, out, force=True)
    assert {p.name: p.read_bytes() for p in again} == clean
    real = megatron_writer.MegatronWriter.close
    closed = []

    def dies_after_one(self):
        if closed:
            raise KeyboardInterrupt
        closed.append(real(self))

    monkeypatch.setattr(megatron_writer.MegatronWriter, "close", dies_after_one)
    with pytest.raises(KeyboardInterrupt):
        _export(run, cfg, tok, tmp_path / "killed")
    assert (tmp_path / "killed" / ".partial").is_dir() and not (tmp_path / "killed" / "export.json").exists()
    monkeypatch.setattr(megatron_writer.MegatronWriter, "close", real)
    killed = _export(run, cfg, tok, tmp_path / "killed")
    moved = {p.name: p.read_bytes().replace(str(tmp_path / "killed").encode(), str(out.absolute()).encode())
             for p in killed}
    assert moved == clean


def test_groups_of_sources_write_the_same_bytes(blended, tmp_path, monkeypatch):
    """More clusters than MAX_OPEN (several passes) and windows smaller than the corpus change no byte."""
    run, cfg, _, tok, out, files, record = blended
    monkeypatch.setattr(export_blend, "MAX_OPEN", 1)
    monkeypatch.setattr(export_blend, "window_rows", lambda corpus, n, memory_mb, shard: 3)
    written = _export(run, cfg, tok, tmp_path / "small")
    relocated = str(tmp_path / "small").encode()
    assert {p.name: p.read_bytes().replace(relocated, str(out.absolute()).encode()) for p in written} == \
        {p.name: p.read_bytes() for p in files}
    reads = json.loads((tmp_path / "small" / "export.json").read_text())["corpus_reads"]
    assert reads > record["corpus_reads"] == 1


def test_a_cluster_without_planned_tokens_is_left_out_and_recorded(tmp_path):
    run, _, _ = _run(tmp_path, pad=_pad)
    cfg = PlanConfig(strategy="weights", weights={0: 1.0, 1: 0.0, 2: 2.0, 3: 1.0}, budget=60, seed=1)
    plan_stage(run, cfg)
    _export(run, cfg, _tokenizer(tmp_path), tmp_path / "out")
    record = json.loads((tmp_path / "out" / "export.json").read_text())
    assert [s["cluster"] for s in record["blend"]["sources"]] == [0, 2, 3]
    assert record["blend"]["omitted"] == [{"cluster": 1, "planned_draws": 0, "reason": "no planned draws"}]
    assert not (tmp_path / "out" / "cluster-00001.bin").exists()
    assert "cluster-00001" not in (tmp_path / "out" / "megatron_data_path.txt").read_text()
    assert "cluster-00001" not in (tmp_path / "out" / "olmo_source_mixture.json").read_text()


def test_a_drop_plan_writes_only_the_kept_documents(tmp_path):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    run, _, labels = _run(tmp_path, pad=_pad)
    rep = np.arange(labels.size)
    for c in np.unique(labels):  # each cluster's second document duplicates its first
        first, second = np.flatnonzero(labels == c)[:2]
        rep[second] = first
    kept = np.unique(rep)
    save_npy(run.path("dedup/group.npy"), np.searchsorted(kept, rep))
    save_npy(run.path("dedup/kept.npy"), kept)
    write_record(run, "embed", {}, run.output_hash("corpus"), [], 0.0)  # the lineage dedup reads
    write_record(run, "cluster", {}, run.output_hash("embed"), ["labels.npy"], 0.0)
    write_record(run, "dedup", {}, dedup_inputs(run), ["dedup/group.npy", "dedup/kept.npy"], 0.0)
    cfg = PlanConfig(budget=100, seed=2, duplicates="drop")
    plan_stage(run, cfg)
    _export(run, cfg, _tokenizer(tmp_path), tmp_path / "out")
    record = json.loads((tmp_path / "out" / "export.json").read_text())
    for s in record["blend"]["sources"]:
        ds = IndexedDataset(str(tmp_path / "out" / s["prefix"]))
        members = [int(i) for i in kept if labels[i] == s["cluster"]]
        assert [ds[j].tolist() for j in range(len(ds))] == [_doc(i) for i in members]


@pytest.mark.parametrize(("options", "message"), [
    ({"fmt": "parquet"}, "--blend writes Megatron .bin/.idx sources: use --format megatron, not parquet"),
    ({"tokenizer": None}, "--blend needs --tokenizer"),
    ({"seq_len": 8}, "--blend writes whole documents, which --seq-len would cut into samples"),
    ({"pad_to_multiple": 4}, "--blend writes no stream to pad: drop --pad-to-multiple"),
])
def test_options_that_do_not_fit_a_blend_are_refused(options, message):
    with pytest.raises(SettingsError) as err:
        ExportConfig(**{"fmt": "megatron", "tokenizer": "tok", "blend": True, **options})
    assert error_message(err.value).startswith(message) and "\n" not in error_message(err.value)


def test_an_out_folder_with_whitespace_is_refused(blended, tmp_path):
    run, cfg, _, tok, _, _, _ = blended
    with pytest.raises(ClusterClipError, match="choose a --dest without spaces"):
        _export(run, cfg, tok, tmp_path / "my blend")
    assert not (tmp_path / "my blend").exists()


def test_cli_blend_export(blended, tmp_path, capsys):
    run, cfg, _, tok, _, files, _ = blended
    args = ["export", str(run.root), "--plan", cfg.name(), "--format", "megatron", "--tokenizer", tok,
            "--append-eos", "--blend", "--dest", str(tmp_path / "cli")]
    assert main(args) == 0
    assert sorted(Path(p).name for p in capsys.readouterr().out.split()) == sorted(p.name for p in files)
    assert main([*args[:-2], "--seq-len", "8", "--dest", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert "--blend writes whole documents" in err and err.count("\n") == 1 and not (tmp_path / "bad").exists()
    assert main([*args[:-1], str(tmp_path / "cli")]) == 0  # the same command again: kept
    other = ["export", str(run.root), "--plan", cfg.name(), "--format", "megatron", "--tokenizer", tok,
             "--append-eos", "--dest", str(tmp_path / "cli")]
    assert main(other) == 2 and "blend: True here, None now" in capsys.readouterr().err
