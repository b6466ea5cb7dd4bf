"""Plan integrity (issue 16): block checksums verified on first read, index ranges, truncation, the
previous plan format, free space, budgets, weights files, extreme weights and the plan command's output."""

from __future__ import annotations

import collections
import json
import math
import os

import numpy as np
import pytest

from clusterclip.cli.main import main
from clusterclip.contract.cluster import CLUSTER_STAGE, LABELS
from clusterclip.contract.plan import PLAN_BLOCKS, PLAN_ORDER, PLAN_RECORD, PLANS_DIR, plan_path
from clusterclip.contract.plan_locate import PlanIntegrityError
from clusterclip.contract.plan_reader import BLOCK_ENTRIES, block_checksums, open_plan
from clusterclip.errors import ClusterClipError
from clusterclip.plan import PlanConfig, PlanConfigError, build_plan, load_weights
from clusterclip.plan.stage import plan_stage
from clusterclip.store import RunDir, file_digest, save_json, save_npy
from tests.records import write_record

N_DOCS = 200
BIG = 2 * BLOCK_ENTRIES + 1000  # three blocks, the last one short


def _run(tmp_path, *configs: PlanConfig) -> RunDir:
    run = RunDir(tmp_path / "run")
    save_npy(run.path(LABELS), np.random.default_rng(0).integers(0, 5, N_DOCS).astype(np.int32))
    write_record(run, CLUSTER_STAGE, {"k": 5}, "x", [LABELS], 0.0)
    for cfg in configs:
        plan_stage(run, cfg)
    return run


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A run directory with one plan of three checksum blocks; tests copy what they modify."""
    cfg = PlanConfig(strategy="uniform", budget=BIG)
    return _run(tmp_path_factory.mktemp("big"), cfg), cfg


def _copy(big, tmp_path):
    import shutil

    run, cfg = big
    shutil.copytree(run.root, tmp_path / "copy")
    return RunDir(tmp_path / "copy"), cfg


def _poke(path, entry: int, value: int) -> None:
    """Overwrite one int64 entry of a .npy in place (same size, so only a checksum can tell)."""
    arr = np.load(path, mmap_mode="r+")
    arr[entry] = value
    arr.flush()
    del arr


def test_plan_stage_writes_block_checksums_and_index_range(big):
    run, cfg = big
    folder = run.path(plan_path(cfg.name()))
    rec = json.loads((folder / PLAN_RECORD).read_text())
    assert rec["blocks"] == {"file": PLAN_BLOCKS, "entries": BLOCK_ENTRIES, "checksum": "crc32",
                             "index_range": [0, N_DOCS]}
    assert plan_path(cfg.name(), PLAN_BLOCKS) in rec["artifacts"]
    sums = np.load(folder / PLAN_BLOCKS)
    assert sums.dtype == np.uint32 and sums.shape == (3,)
    np.testing.assert_array_equal(sums, block_checksums(np.load(folder / PLAN_ORDER)))


def test_build_plan_checksums_do_not_depend_on_chunk_size():
    labels = np.random.default_rng(1).integers(0, 7, 500)
    cfg = PlanConfig(strategy="uniform", budget=BLOCK_ENTRIES + 77)
    a, b = build_plan(labels, cfg, chunk_size=1 << 20), build_plan(labels, cfg, chunk_size=999)
    np.testing.assert_array_equal(a.checksums, b.checksums)
    np.testing.assert_array_equal(a.checksums, block_checksums(a.order))


@pytest.mark.parametrize(("entry", "value"), [(BIG - 1, None), (BIG - 1, -1), (BIG - 1, 10**9), (5, 3)])
def test_sampler_refuses_a_modified_block_naming_it_and_the_rebuild_command(big, tmp_path, entry, value):
    torch = pytest.importorskip("torch")  # noqa: F841
    from clusterclip.torch import ClusterClipSampler

    run, cfg = _copy(big, tmp_path)
    path = run.path(plan_path(cfg.name(), PLAN_ORDER))
    if value is None:  # flip the last byte of the file (the 72057594037928872)
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF
        path.write_bytes(bytes(data))
    else:
        original = int(np.load(path, mmap_mode="r")[entry])
        _poke(path, entry, value if value != 3 else (original + 1) % N_DOCS)
    sampler = ClusterClipSampler(run.root, plan_name=cfg.name())  # start-up reads no block
    block = entry // BLOCK_ENTRIES
    with pytest.raises(PlanIntegrityError, match=rf"block {block} \(positions") as err:
        list(sampler)
    msg = str(err.value)
    assert "\n" not in msg and "checksum" in msg
    assert f"clusterclip plan {run.root} --strategy uniform --budget {BIG}" in msg and "--force`" in msg
    if value is None:  # following the command rebuilds the plan, and the sampler reads it again
        import shlex

        command = msg[msg.index("`clusterclip plan") + 1:msg.rindex("`")]
        assert main([*shlex.split(command)[1:], "-q"]) == 0
        assert len(list(ClusterClipSampler(run.root, plan_name=cfg.name()))) == BIG


def test_blocks_are_verified_lazily_once_each(big, tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")  # noqa: F841
    from clusterclip.contract import plan_reader as integrity
    from clusterclip.torch import ClusterClipSampler

    run, cfg = _copy(big, tmp_path)
    path = run.path(plan_path(cfg.name(), PLAN_ORDER))
    _poke(path, 3, -1)  # block 0 is corrupt
    expected = np.load(path)[2 * BLOCK_ENTRIES:]
    calls = []
    real = integrity.zlib.crc32
    monkeypatch.setattr(integrity.zlib, "crc32", lambda data, *a: calls.append(1) or real(data, *a))
    s = ClusterClipSampler(run.root, start=2 * BLOCK_ENTRIES)
    assert list(s) == expected.tolist(), "blocks after the corrupt one are read and verified on their own"
    assert len(calls) == 1
    s.set_consumed(2 * BLOCK_ENTRIES)
    list(s)
    assert len(calls) == 1, "a verified block is not hashed again"
    with pytest.raises(PlanIntegrityError, match="block 0"):
        list(ClusterClipSampler(run.root))


def test_truncated_plan_is_a_clear_error_at_start(big, tmp_path):
    torch = pytest.importorskip("torch")  # noqa: F841
    from clusterclip.torch import ClusterClipSampler, load_plan

    run, cfg = _copy(big, tmp_path)
    path = run.path(plan_path(cfg.name(), PLAN_ORDER))
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size - 8)
    for make in (lambda: ClusterClipSampler(run.root), lambda: load_plan(run.root)):
        with pytest.raises(PlanIntegrityError, match=r"truncated or modified\); rebuild it with `clusterclip plan"):
            make()
    # a bare plan.npy without a record: numpy's mmap error becomes one clear line too
    bare = tmp_path / "bare" / "plan.npy"
    bare.parent.mkdir()
    bare.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(PlanIntegrityError, match=r"not a readable plan \(not an int64 \.npy: truncated"):
        ClusterClipSampler(bare)


def test_modified_blocks_file_is_refused_at_start(big, tmp_path):
    run, cfg = _copy(big, tmp_path)
    sums = run.path(plan_path(cfg.name(), PLAN_BLOCKS))
    save_npy(sums, np.load(sums) ^ np.uint32(1))
    with pytest.raises(PlanIntegrityError, match=r"blocks\.npy: does not match the SHA-256"):
        open_plan(run.root)
    sums.unlink()
    with pytest.raises(PlanIntegrityError, match=r"blocks\.npy: missing"):
        open_plan(run.root)


def test_previous_format_without_blocks_is_verified_whole_once(big, tmp_path):
    torch = pytest.importorskip("torch")  # noqa: F841
    from clusterclip.torch import ClusterClipSampler, load_plan

    run, cfg = _copy(big, tmp_path)
    folder = run.path(plan_path(cfg.name()))
    rec = json.loads((folder / PLAN_RECORD).read_text())
    del rec["blocks"], rec["artifacts"][plan_path(cfg.name(), PLAN_BLOCKS)]
    save_json(folder / PLAN_RECORD, rec)
    (folder / PLAN_BLOCKS).unlink()
    expected = np.load(folder / PLAN_ORDER)
    assert list(ClusterClipSampler(run.root, start=BIG - 10)) == expected[-10:].tolist()
    np.testing.assert_array_equal(load_plan(run.root), expected)
    _poke(folder / PLAN_ORDER, BIG - 1, 7 if expected[-1] != 7 else 8)
    assert file_digest(folder / PLAN_ORDER) != rec["artifacts"][plan_path(cfg.name(), PLAN_ORDER)]["sha256"]
    with pytest.raises(PlanIntegrityError, match="does not match the SHA-256 in its record"):
        list(ClusterClipSampler(run.root, start=0))


@pytest.mark.parametrize("bad", [-1, 2**62, 10**12 + 2**40])
def test_array_plans_with_impossible_indices_are_refused(bad):
    torch = pytest.importorskip("torch")  # noqa: F841
    from clusterclip.torch import ClusterClipSampler, load_plan

    plan = np.array([1, 2, bad, 3], dtype=np.int64)
    with pytest.raises(PlanIntegrityError, match=f"document index {bad}"):
        ClusterClipSampler(plan)
    with pytest.raises(PlanIntegrityError, match=f"document index {bad}"):
        load_plan(plan)


def test_array_plan_beyond_a_known_corpus_is_refused():
    torch = pytest.importorskip("torch")  # noqa: F841
    from clusterclip.torch import ClusterClipSampler

    assert list(ClusterClipSampler(np.array([0, 9]), n_docs=10)) == [0, 9]
    with pytest.raises(PlanIntegrityError, match="document index 10 but the corpus has 10 documents"):
        ClusterClipSampler(np.array([0, 10]), n_docs=10)
    plan = build_plan(np.zeros(10, np.int64), PlanConfig(strategy="uniform", budget=30))
    assert len(ClusterClipSampler(plan)) == 30


def test_reorder_dataset_refuses_negative_indices():
    torch = pytest.importorskip("torch")  # noqa: F841
    from clusterclip.torch import reorder_dataset

    class Rows:
        def __len__(self):
            return 10

        def select(self, idx):
            return list(idx)

    assert reorder_dataset(Rows(), np.array([3, 1])) == [3, 1]
    with pytest.raises(PlanIntegrityError, match="document index -1"):
        reorder_dataset(Rows(), np.array([3, -1]))


# ----------------------------------------------------------------------------- sampler arguments (item 14)


@pytest.mark.parametrize("kwargs", [{"world_size": 2.5}, {"world_size": 2, "rank": 0.5}, {"world_size": True},
                                    {"world_size": "2"}, {"world_size": 0}, {"world_size": 2, "rank": 2},
                                    {"start": "7"}, {"start": 7.9}, {"start": 7.0}, {"start": True},
                                    {"start": None}, {"start": [7]}, {"start": math.nan}, {"start": 99},
                                    {"drop_last": "no"}, {"n_docs": 0}])
def test_sampler_refuses_bad_arguments_without_coercing(kwargs):
    pytest.importorskip("torch")
    from clusterclip.torch import ClusterClipSampler, SamplerArgumentError

    with pytest.raises(SamplerArgumentError) as err:
        ClusterClipSampler(np.arange(20), **kwargs)
    assert isinstance(err.value, ClusterClipError) and isinstance(err.value, ValueError)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("consumed", ["7", 7.9, True, None, [7], math.nan, -1])
def test_set_consumed_refuses_non_integers(consumed):
    pytest.importorskip("torch")
    from clusterclip.torch import ClusterClipSampler, SamplerArgumentError

    s = ClusterClipSampler(np.arange(20))
    with pytest.raises(SamplerArgumentError, match="consumed"):
        s.set_consumed(consumed)
    assert s.consumed == 0
    s.set_consumed(np.int64(7))
    assert s.consumed == 7


@pytest.mark.parametrize("state", [None, [("consumed", 4)], {}, {"plan_length": 20}, {"consumed": "4"},
                                   {"consumed": 4.0}, {"consumed": None}, {"consumed": math.nan},
                                   {"consumed": 4, "plan_length": "20"}, {"consumed": 4, "plan_identity": 5},
                                   {"consumed": 4, "world_size": 1.5}])
def test_load_state_dict_refuses_missing_keys_and_wrong_types(state):
    pytest.importorskip("torch")
    from clusterclip.torch import ClusterClipSampler, SamplerArgumentError

    s = ClusterClipSampler(np.arange(20))
    with pytest.raises(SamplerArgumentError):
        s.load_state_dict(state)
    assert s.consumed == 0
    s.load_state_dict({"consumed": 4})
    assert s.consumed == 4


# ----------------------------------------------------------------------------- weights files (items 5, 13)


@pytest.mark.parametrize(("content", "expected"), [
    (b"0.0,0\n1,2\n", ((0, 0.0), (1, 2.0))),
    (b"\xef\xbb\xbf0,0\n1,2\n", ((0, 0.0), (1, 2.0))),
    (b"\xef\xbb\xbfcluster,weight\n0,0\n", ((0, 0.0),)),
    (b"cluster,weight\n3.0,0.5\n", ((3, 0.5),)),
    (b"\xef\xbb\xbf{\"0\": 0, \"1\": 2}", ((0, 0.0), (1, 2.0))),
])
def test_weights_first_row_is_data_unless_it_is_text(tmp_path, content, expected):
    path = tmp_path / ("w.json" if b"{" in content else "w.csv")
    path.write_bytes(content)
    assert load_weights(path) == expected


@pytest.mark.parametrize(("content", "message"), [
    (b"1.5,1\n", r"w.csv:1: cluster id '1.5' is not an integer >= 0"),
    (b"0,abc\n", r"w.csv:1: 'abc' is not a number"),
    (b"\xff\xfe0\x00,\x000\x00", "UTF-16"),
    (b"0,1\n\xc3(,1\n", "not UTF-8 text"),
])
def test_weights_file_errors_say_what_is_wrong(tmp_path, content, message):
    path = tmp_path / "w.csv"
    path.write_bytes(content)
    with pytest.raises(PlanConfigError, match=message) as err:
        load_weights(path)
    assert "no clusters given" not in str(err.value)


def test_weights_file_errors_are_one_line_at_the_cli(tmp_path, capsys):
    run = _run(tmp_path)
    path = tmp_path / "w.csv"
    path.write_bytes(b"\xff\xfe0\x00,\x000\x00")
    assert main(["plan", str(run.root), "--strategy", "weights", "--weights", str(path), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("clusterclip: error:") and "UTF-16" in err and "\n" not in err


def test_weight_zero_in_a_numeric_first_row_drops_the_cluster(tmp_path):
    labels = np.repeat(np.arange(2), [10, 10])
    path = tmp_path / "w.csv"
    path.write_bytes(b"\xef\xbb\xbf0,0\n1,1\n")
    plan = build_plan(labels, PlanConfig(strategy="weights", weights=load_weights(path), budget=40))
    assert plan.per_cluster["draws"].tolist() == [0, 40]


@pytest.mark.parametrize(("cfg", "draws"), [
    (PlanConfig(strategy="temperature", tau=-1000), [595, 0, 0, 0]),
    (PlanConfig(strategy="temperature", tau=1000), [0, 0, 595, 0]),
    (PlanConfig(strategy="temperature", tau=-200, max_repeat=3), [15, 150, 310, 120]),
    (PlanConfig(strategy="weights", weights=((0, 1e308), (1, 1e308))), [297, 298, 0, 0]),
    (PlanConfig(strategy="weights", weights=((0, 1e308), (1, 1)), max_repeat=2), [10, 100, 405, 80]),
])
def test_extreme_weights_are_handled_in_log_space(cfg, draws):
    labels = np.repeat(np.arange(4), [5, 50, 500, 40])
    plan = build_plan(labels, cfg)
    assert plan.per_cluster["draws"].tolist() == draws
    assert np.bincount(labels[plan.order], minlength=4).tolist() == draws
    assert math.isfinite(plan.stats["water_level"])


@pytest.mark.parametrize("tau", [1e308, -1e7, float("inf"), float("nan")])
def test_a_tau_beyond_any_meaning_is_refused_by_name(tau):
    with pytest.raises(PlanConfigError, match=r"tau must be in \[-1e\+06, 1e\+06\]"):
        PlanConfig(strategy="temperature", tau=tau)


def test_ordinary_weights_keep_their_quotas():
    labels = np.repeat(np.arange(3), [10, 20, 30])
    plan = build_plan(labels, PlanConfig(strategy="temperature", tau=0.5, budget=100))
    assert plan.per_cluster["draws"].tolist() == [24, 34, 42]  # 100 * sqrt(n) / sum(sqrt(n))


# ----------------------------------------------------------------------------- plan command (items 8, 9, 15)


@pytest.mark.parametrize(("budget", "message"), [
    ("99999999999999999999", r"--budget must be an integer in 1\.\.9007199254740992"),
    ("0", r"--budget must be an integer in 1\.\.9007199254740992"),
    ("9007199254740992", r"needs 72\.1 PB but its file system has .* free; free space or lower --budget"),
])
def test_plan_budget_out_of_range_is_one_line(tmp_path, capsys, budget, message):
    run = _run(tmp_path)
    assert main(["plan", str(run.root), "--strategy", "uniform", "--budget", budget, "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert __import__("re").search(message, err), err
    assert not run.path(PLANS_DIR).exists() or not any(run.path(PLANS_DIR).iterdir())


def test_plan_output_quiet_summary_json(tmp_path, capsys):
    run = _run(tmp_path)
    args = ["plan", str(run.root), "--strategy", "uniform", "--budget", "400"]
    assert main([*args, "-q"]) == 0
    assert capsys.readouterr().out == ""
    assert main(args) == 0
    out = capsys.readouterr().out.strip().splitlines()
    name = PlanConfig(strategy="uniform", budget=400).name()
    assert len(out) == 1 and out[0].startswith(f"{name}: draws 400,") and "None" not in out[0]
    assert main([*args, "--json", "-q"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["name"] == name and obj["stats"]["length"] == 400 and obj["plan"].endswith("plan.npy")


def test_no_space_fails_cleanly_and_the_next_plan_works(tmp_path, capsys, monkeypatch):
    from clusterclip.plan import build

    run = _run(tmp_path)
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(build.shutil, "disk_usage", lambda p: usage(10**6, 10**6 - 5000, 5000))
    args = ["plan", str(run.root), "--strategy", "uniform", "--budget", "4000"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "needs 36.1 KB but its file system has 5.0 KB free" in err and "at most about 113 draws fit" in err
    assert not any(run.root.rglob(".tmp-*"))
    assert not run.path(PLANS_DIR).exists() or not any(run.path(PLANS_DIR).iterdir())
    monkeypatch.undo()
    # a plan killed mid-write (SIGBUS) leaves its temp file: the next plan removes it and works
    folder = run.path(plan_path(PlanConfig(strategy="uniform", budget=4000).name()))
    folder.mkdir(parents=True)
    (folder / ".tmp-plan.npy.killed").write_bytes(b"\0" * 4096)
    assert main([*args, "-q"]) == 0
    assert not any(run.root.rglob(".tmp-*"))
    assert np.load(folder / PLAN_ORDER).shape == (4000,)


def test_enospc_while_reserving_removes_the_temp_file(tmp_path, monkeypatch):
    import errno

    from clusterclip.plan import build

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(build.os, "posix_fallocate", full, raising=False)
    out = tmp_path / "p" / "plan.npy"
    with pytest.raises(build.PlanSpaceError, match="no space left for a plan of 500 draws"):
        build_plan(np.zeros(50, np.int64), PlanConfig(strategy="uniform", budget=500), out=out)
    assert not (tmp_path / "p").exists()


def test_the_trainer_reads_plan_json_as_its_typed_record(tmp_path):
    """``plan.json`` is read through :class:`PlanRecord` (its fields checked), not as a raw dict: the reader's
    record is the typed record, and a record this clusterclip does not write is one line naming the rebuild."""
    from clusterclip.contract.plan import PlanRecord
    from clusterclip.contract.plan_locate import read_record

    cfg = PlanConfig(strategy="uniform", budget=50)
    run = _run(tmp_path, cfg)
    order = run.path(plan_path(cfg.name(), PLAN_ORDER))
    rec = read_record(order)
    assert isinstance(rec, PlanRecord) and rec.name == cfg.name() and rec.stats["length"] == 50
    assert open_plan(order).record == rec
    path = order.parent / PLAN_RECORD
    raw = json.loads(path.read_text())
    path.write_text(json.dumps({**raw, "surprise": 1}))
    with pytest.raises(PlanIntegrityError, match=r"plan\.json: unknown field\(s\) surprise.*rebuild the plan"):
        open_plan(order)
    path.write_text(json.dumps({**raw, "stats": "many"}))
    with pytest.raises(PlanIntegrityError, match="field 'stats' is str"):
        read_record(order)
