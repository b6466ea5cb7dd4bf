"""``clusterclip add``: appending documents to a finished run, the drift statistic, and ``cluster --refit``."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip.add.drift import drift_report, leave_one_out, lower_percentile
from clusterclip.add.workflow import AddConfig, add_documents
from clusterclip.cli.main import main
from clusterclip.cluster.config import ClusterConfig
from clusterclip.cluster.stage import cluster_stage
from clusterclip.contract.cluster import CENTROIDS, CLUSTER_STAGE, LABELS, SCORES, SIZES
from clusterclip.contract.corpus import CORPUS_DIR, CORPUS_STAGE, TOKENS, read_column
from clusterclip.contract.embed import EMBED_STAGE, load_embeddings
from clusterclip.contract.plan import PLAN_ORDER, plan_path, plan_stage_name
from clusterclip.contract.stages import audit
from clusterclip.corpus.config import CorpusConfig
from clusterclip.corpus.records import ReadOptions
from clusterclip.corpus.stage import corpus_stage
from clusterclip.embed.config import EmbedConfig
from clusterclip.embed.registry import get_embedder
from clusterclip.embed.stage import embed_stage
from clusterclip.errors import ClusterClipError
from clusterclip.plan import PlanConfig
from clusterclip.plan.stage import plan_stage
from clusterclip.store import RunDir, load_npy
from clusterclip.store import layout as A
from clusterclip.store.npy_rows import append_npy
from clusterclip.torch import ClusterClipSampler, load_plan
from tests.test_cli import TOPICS, make_corpus

CLUSTER = ClusterConfig(k=4)


def build_run(tmp_path: Path, name: str = "run", id_field: str | None = "id") -> tuple[RunDir, Path]:
    corpus = make_corpus(tmp_path / "old.jsonl", {"cooking": 80, "astronomy": 40, "finance": 30})
    run = RunDir(tmp_path / name)
    with run.lock():
        corpus_stage(run, [corpus], CorpusConfig(id_field=id_field), progress=False)
        embed_stage(run, EmbedConfig(embedder="hashing", shard_size=50), progress=False)
        cluster_stage(run, CLUSTER, progress=False)
        plan_stage(run, PlanConfig(strategy="clusterclip", max_repeat=3))
    return run, corpus


def new_file(path: Path, topics: dict[str, int], prefix: str = "new", seed: int = 1) -> Path:
    make_corpus(path, topics, seed=seed)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({**r, "id": f"{prefix}-{r['id']}"}) + "\n" for r in rows))
    return path


def add(run: RunDir, inputs: list[Path], **kw) -> dict:
    with run.lock():
        return add_documents(run, inputs, progress=False, **kw)


# ----------------------------------------------------------------------------------- the drift statistic


@given(st.lists(st.floats(-1, 1, width=32), min_size=1, max_size=300), st.sampled_from([0.0, 5.0, 37.5, 100.0]))
@settings(max_examples=60, deadline=None)
def test_lower_percentile_is_numpys(tmp_path_factory, values, q):
    path = tmp_path_factory.mktemp("pct") / "x.npy"
    x = np.asarray(values, dtype=np.float32)
    np.save(path, np.concatenate([x, np.float32([9.0, -9.0])]))
    assert lower_percentile(path, len(x), q) == float(np.percentile(x, q, method="lower"))


def _members(rng, centres, per_cluster, noise):
    """Unit vectors around ``centres`` (``per_cluster`` each) and their cluster labels."""
    labels = np.repeat(np.arange(len(centres)), per_cluster)
    x = centres[labels] + noise * rng.standard_normal((labels.size, centres.shape[1]))
    return x / np.linalg.norm(x, axis=1, keepdims=True), labels


def _spherical(x, labels, k):
    sums = np.stack([x[labels == c].sum(0) for c in range(k)])
    return sums / np.linalg.norm(sums, axis=1, keepdims=True)


def test_leave_one_out_equals_the_cosine_to_the_centroid_without_the_document(tmp_path):
    rng = np.random.default_rng(0)
    x, labels = _members(rng, rng.standard_normal((4, 16)), 12, 1.0)
    centroids = _spherical(x, labels, 4)
    np.save(tmp_path / "scores.npy", np.einsum("ij,ij->i", x, centroids[labels]).astype(np.float32))
    np.save(tmp_path / "labels.npy", labels.astype(np.int32))
    got = np.concatenate(list(leave_one_out(tmp_path / "scores.npy", tmp_path / "labels.npy", labels.size, 4)()))
    for i in range(labels.size):
        rest = x[labels == labels[i]].sum(0) - x[i]
        assert got[i] == pytest.approx(float(x[i] @ rest / np.linalg.norm(rest)), abs=1e-5)


def test_drift_of_documents_like_the_old_ones_is_about_five_percent(tmp_path):
    """Small clusters pull their centroids towards their members; new documents from the same distribution
    must still come out near the 5th percentile (the plain cut flagged about twice as many)."""
    rng = np.random.default_rng(1)
    centres = rng.standard_normal((20, 64))
    x, labels = _members(rng, centres, 25, 1.2)
    centroids = _spherical(x, labels, 20)
    np.save(tmp_path / "scores.npy", np.einsum("ij,ij->i", x, centroids[labels]).astype(np.float32))
    np.save(tmp_path / "labels.npy", labels.astype(np.int32))
    new, _ = _members(rng, centres, 200, 1.2)
    new_scores = (new @ centroids.T).max(1).astype(np.float32)
    sizes = np.bincount(labels)
    report = drift_report((tmp_path / "scores.npy", tmp_path / "labels.npy"), labels.size, new_scores,
                          (new @ centroids.T).argmax(1), sizes, 0.10)
    plain = float(np.mean(new_scores < np.percentile(np.load(tmp_path / "scores.npy"), 5, method="lower")))
    assert 0.02 <= report["drift_share"] <= 0.09 < plain and report["recommend_refit"] is False
    far, _ = _members(rng, rng.standard_normal((5, 64)), 100, 1.2)
    shifted = drift_report((tmp_path / "scores.npy", tmp_path / "labels.npy"), labels.size,
                           (far @ centroids.T).max(1).astype(np.float32), (far @ centroids.T).argmax(1), sizes, 0.10)
    assert shifted["drift_share"] > 0.5 and shifted["recommend_refit"] is True
    assert shifted["cluster_added"] == np.bincount((far @ centroids.T).argmax(1), minlength=20).tolist()


@given(st.integers(0, 40), st.integers(0, 40))
@settings(max_examples=30, deadline=None)
def test_append_npy_writes_what_np_save_writes(tmp_path_factory, n_old, n_new):
    path = tmp_path_factory.mktemp("app") / "a.npy"
    old, new = np.arange(n_old + 5, dtype=np.int64) * 3, np.arange(n_new, dtype=np.int64) - 7
    np.save(path, old)
    append_npy(path, n_old, new)
    buf = io.BytesIO()
    np.save(buf, np.concatenate([old[:n_old], new]))
    assert path.read_bytes() == buf.getvalue()


# ----------------------------------------------------------------------------------------- add itself


def test_add_grows_every_stage_and_new_plans_cover_everything(tmp_path):
    run, _ = build_run(tmp_path)
    old_plan_name = "clusterclip-R3-docs-Bepoch-s0"
    old_plan = load_plan(run.path(plan_path(old_plan_name, PLAN_ORDER))).copy()
    old_labels, old_tokens = load_npy(run.path(LABELS)), load_npy(run.path(TOKENS))
    centroids = load_npy(run.path(CENTROIDS))
    new = new_file(tmp_path / "new.jsonl", {"sailing": 25, "cooking": 10})

    report = add(run, [new])
    n = 150 + 35
    assert report["documents_before"] == 150 and report["documents_added"] == 35
    assert json.loads(run.path(A.DRIFT_REPORT).read_text())["drift_share"] == report["drift_share"]
    assert not run.path(A.ADD_JOURNAL).exists()
    assert [s for s, problems in audit(run).items() if problems] == []
    assert run.record(CORPUS_STAGE)["count"] == n and run.record(EMBED_STAGE)["count"] == n
    labels, tokens = load_npy(run.path(LABELS)), load_npy(run.path(TOKENS))
    assert labels.shape == (n,) and tokens.shape == (n,) and load_npy(run.path(SCORES)).shape == (n,)
    np.testing.assert_array_equal(labels[:150], old_labels)
    np.testing.assert_array_equal(tokens[:150], old_tokens)
    np.testing.assert_array_equal(load_npy(run.path(CENTROIDS)), centroids)
    np.testing.assert_array_equal(load_npy(run.path(SIZES)), np.bincount(labels, minlength=len(centroids)))
    ids = read_column(run, "id")
    assert len(set(ids)) == n and ids[150:] == [json.loads(line)["id"] for line in new.read_text().splitlines()]
    emb = get_embedder("hashing", progress=False)
    texts = read_column(run, "text")[150:]
    np.testing.assert_array_equal(load_embeddings(run, np.float16)[150:], emb.encode(texts).astype(np.float16))
    scores = load_embeddings(run)[150:] @ centroids.T
    np.testing.assert_array_equal(labels[150:], scores.argmax(axis=1))

    with run.lock():
        assert cluster_stage(run, CLUSTER, progress=False).to_json()["fit_count"] == 150  # fresh: the add kept its fit
        rec = plan_stage(run, PlanConfig(strategy="random")).to_json()
    order = load_plan(run.path(plan_path(rec["name"], PLAN_ORDER)))
    assert sorted(order.tolist()) == list(range(n))
    still = load_plan(run.path(plan_path(old_plan_name, PLAN_ORDER)))
    np.testing.assert_array_equal(still, old_plan)
    assert sorted(ClusterClipSampler(run.path(plan_path(old_plan_name)), rank=0, world_size=1)) == sorted(old_plan)


def test_rerun_after_completion_is_a_no_op(tmp_path):
    run, _ = build_run(tmp_path)
    new = new_file(tmp_path / "new.jsonl", {"sailing": 20})
    add(run, [new])
    before = {p: p.stat().st_mtime_ns for p in run.root.rglob("*") if p.is_file() and p.name != A.LOCK}
    assert add(run, [new])["already_added"] is True
    assert {p: p.stat().st_mtime_ns for p in run.root.rglob("*") if p.is_file() and p.name != A.LOCK} == before


def test_colliding_id_names_both_places_and_changes_nothing(tmp_path):
    run, _ = build_run(tmp_path)
    records = {s: run.record_path(s).read_bytes() for s in ("corpus", "embed", "cluster")}
    new = new_file(tmp_path / "new.jsonl", {"sailing": 5})
    lines = new.read_text().splitlines()
    lines.insert(3, json.dumps({"id": "astronomy-7", "text": "a comet and a moon", "domain": "astronomy"}))
    new.write_text("\n".join(lines) + "\n")
    with pytest.raises(ClusterClipError) as err:
        add(run, [new])
    msg = str(err.value)
    assert f"{new}:4" in msg and "'astronomy-7'" in msg and "document 87 (corpus/part-00000.parquet)" in msg
    assert {s: run.record_path(s).read_bytes() for s in ("corpus", "embed", "cluster")} == records
    assert sorted(p.name for p in run.path(CORPUS_DIR).glob("*.parquet")) == ["part-00000.parquet"]
    assert not run.path(A.ADD_JOURNAL).exists()


def test_duplicate_among_new_documents_names_both_lines(tmp_path):
    run, _ = build_run(tmp_path)
    new = new_file(tmp_path / "new.jsonl", {"sailing": 5})
    lines = new.read_text().splitlines()
    other_text = json.dumps({**json.loads(lines[1]), "text": "another text under the same id"})
    new.write_text("\n".join([*lines, other_text]) + "\n")
    with pytest.raises(ClusterClipError, match=rf"{new}:6: id 'new-sailing-1' is also the id of {new}:2"):
        add(run, [new])
    new.write_text("\n".join([*lines, lines[1]]) + "\n")  # same id, same text: skipped and counted
    assert add(run, [new])["duplicates_skipped"] == 1


def test_default_ids_of_a_same_named_file_collide_with_a_hint(tmp_path):
    run, old = build_run(tmp_path, id_field=None)
    (tmp_path / "feb").mkdir()
    again = new_file(tmp_path / "feb" / old.name, {"sailing": 5})
    with pytest.raises(ClusterClipError, match=r"already in the run.*set read=ReadOptions\(id_field=\.\.\.\)"):
        add(run, [again])
    renamed = shutil.copy(again, tmp_path / "feb" / "feb.jsonl")
    assert add(run, [Path(renamed)])["documents_added"] == 5


def test_reader_options_override_the_recorded_ones(tmp_path):
    run, _ = build_run(tmp_path)
    new = tmp_path / "new.jsonl"
    new.write_text("".join(json.dumps({"key": f"k{i}", "body": f"{TOPICS['sailing']} {i}"}) + "\n" for i in range(4)))
    with pytest.raises(ClusterClipError, match="text"):
        add(run, [new])
    add(run, [new], read=ReadOptions(text_field="body", id_field="key"))
    assert read_column(run, "id")[-4:] == ["k0", "k1", "k2", "k3"]


def test_drift_separates_a_new_topic_from_more_of_the_same(tmp_path):
    run, _ = build_run(tmp_path)
    same = add(run, [new_file(tmp_path / "same.jsonl", {"cooking": 40, "astronomy": 20}, "same", seed=5)])
    other = add(run, [new_file(tmp_path / "other.jsonl", {"sailing": 60}, "other", seed=6)])
    assert same["drift_share"] <= AddConfig().drift_threshold < other["drift_share"]
    assert not same["recommend_refit"] and other["recommend_refit"]


def test_cluster_refit_fits_over_all_documents_and_makes_plans_stale(tmp_path):
    run, _ = build_run(tmp_path)
    add(run, [new_file(tmp_path / "new.jsonl", {"sailing": 60})])
    plan = PlanConfig(strategy="clusterclip", max_repeat=3)
    stale_hash = run.record(plan_stage_name(plan.name()))["inputs_hash"]
    assert main(["cluster", str(run.root), "--k", "4", "--refit", "-q"]) == 2  # would strand the plan
    assert run.record(plan_stage_name(plan.name()))["inputs_hash"] == stale_hash
    before = run.output_hash(CLUSTER_STAGE)
    assert main(["cluster", str(run.root), "--k", "4", "--refit", "--force", "-q"]) == 0
    rec = run.record(CLUSTER_STAGE)
    assert "fit_count" not in rec and rec["sample_size"] == 210 and rec["refits"][-1]["from"] == before
    assert audit(run)[CLUSTER_STAGE] == []
    with run.lock():
        rebuilt = plan_stage(run, plan).to_json()
    assert rebuilt["inputs_hash"] != stale_hash
    assert load_npy(run.path(LABELS)).shape == (210,)


def test_add_cli_prints_the_report_and_refuses_ray(tmp_path, capsys):
    run, _ = build_run(tmp_path)
    new = new_file(tmp_path / "new.jsonl", {"sailing": 30})
    assert main(["add", str(run.root), str(new), "--engine", "ray", "-q"]) == 2
    assert "--engine local only" in capsys.readouterr().err
    assert main(["add", str(run.root), str(new), "--drift-threshold", "0.01", "-q"]) == 0
    out = capsys.readouterr().out
    assert "added 30 documents to 150" in out and f"clusterclip cluster {run.root} --refit" in out
    assert main(["add", str(run.root), str(new), "-q"]) == 0
    assert "already added" in capsys.readouterr().out


def test_add_reuses_the_fitted_lsa_model(tmp_path):
    from clusterclip.embed.lsa import LsaEmbedder

    corpus = make_corpus(tmp_path / "old.jsonl", {"cooking": 60, "astronomy": 40, "finance": 30})
    run = RunDir(tmp_path / "run")
    with run.lock():
        corpus_stage(run, [corpus], CorpusConfig(id_field="id"), progress=False)
        embed_stage(run, EmbedConfig(embedder="lsa", shard_size=50, extra={'dim': 8, 'sample_size': 100}),
                                     progress=False)
        cluster_stage(run, CLUSTER, progress=False)
    model = {p.name: p.read_bytes() for p in run.path(LsaEmbedder.MODEL_DIR).iterdir()}
    add(run, [new_file(tmp_path / "new.jsonl", {"sailing": 12, "finance": 8})])
    assert {p.name: p.read_bytes() for p in run.path(LsaEmbedder.MODEL_DIR).iterdir()} == model
    fitted = LsaEmbedder.load(run.path(LsaEmbedder.MODEL_DIR), progress=False)
    expected = fitted.encode(read_column(run, "text")[130:]).astype(np.float16)
    np.testing.assert_array_equal(load_embeddings(run, np.float16)[130:], expected)
    assert audit(run)[EMBED_STAGE] == []


def test_default_k_follows_the_fit_only_while_the_cluster_record_is_current(tmp_path):
    from clusterclip.cluster.config import default_k

    run, old = build_run(tmp_path)
    with run.lock():
        assert cluster_stage(run, ClusterConfig(), progress=False).to_json()["k"] == default_k(150)
    new = new_file(tmp_path / "new.jsonl", {"sailing": 35})
    add(run, [new])
    with run.lock():
        assert cluster_stage(run, ClusterConfig(), progress=False).to_json()["fit_count"] == 150  # fresh, same k
        assert corpus_stage(run, [old, new], CorpusConfig(id_field="id"), progress=False).additions  # no-op
        corpus_stage(run, [old, new], CorpusConfig(id_field="id"), progress=False, force=True)
        embed_stage(run, EmbedConfig(embedder="hashing", shard_size=50), progress=False)
        assert cluster_stage(run, ClusterConfig(), progress=False).to_json()["k"] == default_k(185) != default_k(150)


def test_a_damaged_add_journal_is_a_one_line_error_naming_it(tmp_path, capsys):
    from clusterclip.errors import CorruptFileError
    from clusterclip.store import load_json

    run, _ = build_run(tmp_path)
    new = new_file(tmp_path / "new.jsonl", {"sailing": 30})
    run.path(A.ADD_JOURNAL).write_text('{"key": "abc", "inputs": [')
    assert main(["add", str(run.root), str(new), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("clusterclip: error: ") and str(run.path(A.ADD_JOURNAL)) in err and "damaged" in err
    assert "\n" not in err and "Traceback" not in err and "--abort" in err
    with pytest.raises(CorruptFileError) as caught:
        load_json(run.path(A.ADD_JOURNAL))
    assert isinstance(caught.value, ValueError)  # callers that treat an unreadable record as stale still do


def test_the_drift_check_sees_a_domain_the_vocabulary_never_saw(tmp_path):
    """With a fitted vocabulary (lsa), new documents of unseen words look familiar by cosine (their unseen words
    are dropped), so the drift report also counts documents the embedder barely represented: an unseen domain is
    new, documents like the existing ones are not."""
    from clusterclip.add.workflow import add_documents
    from clusterclip.cluster.config import ClusterConfig
    from clusterclip.cluster.stage import cluster_stage
    from clusterclip.corpus.config import CorpusConfig
    from clusterclip.corpus.stage import corpus_stage

    rng = np.random.default_rng(0)
    old = make_corpus(tmp_path / "old.jsonl", {"cooking": 90, "astronomy": 60, "finance": 50})
    same = make_corpus(tmp_path / "same.jsonl", {"cooking": 30, "astronomy": 20}, seed=1)
    same.write_text("".join(json.dumps({**r, "id": "new-" + r["id"]}) + "\n"
                            for r in map(json.loads, same.read_text().splitlines())))
    foreign = tmp_path / "foreign.jsonl"
    words = ["".join(rng.choice(list("áéíóúñçãõ"), 6)) for _ in range(80)]  # a language the run never saw
    foreign.write_text("".join(json.dumps({"id": f"f{i}", "text": " ".join(rng.choice(words, 40))}) + "\n"
                               for i in range(40)))
    reports = {}
    for name, new in (("same", same), ("foreign", foreign)):
        run = RunDir(tmp_path / name)
        with run.lock():
            corpus_stage(run, [old], CorpusConfig(id_field="id"), progress=False)
            embed_stage(run, EmbedConfig(embedder="lsa", extra={"dim": 8, "sample_size": 200, "min_df": 1}),
                        progress=False)
            cluster_stage(run, ClusterConfig(k=3), progress=False)
            reports[name] = add_documents(run, [new], progress=False)
    assert reports["foreign"]["below_coverage_cut"] == 40 and reports["foreign"]["drift_share"] == 1.0
    assert reports["foreign"]["recommend_refit"]
    assert reports["same"]["drift_share"] < 0.15 and not reports["same"]["recommend_refit"]


def test_cluster_shift_is_chance_for_the_same_spread_and_large_for_a_crowded_add():
    """A same-distribution add shifts the spread over clusters by about what sampling alone gives; an add that
    crowds into one cluster shifts it by nearly its whole size; the numbers are seeded."""
    from clusterclip.add.drift import cluster_shift

    old = np.array([500, 300, 150, 50])
    same = np.random.default_rng(3).multinomial(400, old / old.sum())
    s = cluster_shift(same, old)
    assert s["shift"] < 3 * s["chance"] and s["excess"] < 0.05
    crowded = cluster_shift(np.array([0, 0, 0, 400]), old)
    assert crowded["shift"] == pytest.approx(0.95) and crowded["excess"] > 0.9
    assert cluster_shift(same, old) == s and cluster_shift(np.zeros(4, np.int64), old)["shift"] == 0.0


def test_the_coverage_cut_never_rises_above_the_floor(tmp_path):
    """Existing documents' own coverage is optimistic (the vocabulary was fitted on them): new documents count as
    unseen only below COVERAGE_FLOOR even when the existing ones' 5th percentile is higher."""
    from clusterclip.add.drift import COVERAGE_FLOOR, drift_report
    from clusterclip.store import save_npy

    scores, labels = tmp_path / "s.npy", tmp_path / "l.npy"
    save_npy(scores, np.full(100, 0.9, np.float32))
    save_npy(labels, np.repeat(np.arange(2), 50).astype(np.int32))
    old_cov = np.full(100, 0.8, np.float32)
    new_cov = np.array([0.7, 0.6, 0.45, 0.1], np.float32)
    report = drift_report((scores, labels), 100, np.full(4, 0.95, np.float32), np.array([0, 1, 0, 1]),
                          np.array([50, 50]), 0.1, (lambda: iter([old_cov]), new_cov))
    assert report["coverage_cut"] == COVERAGE_FLOOR and report["below_coverage_cut"] == 2
    assert report["drift_share"] == 0.5 and report["cluster_shift"] == 0.0


def test_neighbourhood_is_the_mean_of_the_k_most_similar_reference_rows_never_itself():
    from clusterclip.add.drift import neighbourhood

    rng = np.random.default_rng(4)
    unit = lambda a: (a / np.linalg.norm(a, axis=1, keepdims=True)).astype(np.float32)  # noqa: E731
    x, ref = unit(rng.normal(size=(50, 8))), unit(rng.normal(size=(30, 8)))
    want = np.sort(x @ ref.T, axis=1)[:, -3:].mean(axis=1)
    np.testing.assert_allclose(neighbourhood(x, ref, k=3, block=7), want, rtol=1e-5)
    own = ref @ ref.T
    np.fill_diagonal(own, -np.inf)
    np.testing.assert_allclose(neighbourhood(ref, ref, k=3, itself=True, block=4),
                               np.sort(own, axis=1)[:, -3:].mean(axis=1), rtol=1e-5)


def test_drift_counts_a_document_no_existing_document_is_near(tmp_path):
    """Close to a centroid is not enough: a new document whose neighbourhood among the existing documents is
    emptier than theirs is new."""
    from clusterclip.store import save_npy

    scores, labels = tmp_path / "s.npy", tmp_path / "l.npy"
    save_npy(scores, np.full(100, 0.5, np.float32))
    save_npy(labels, np.repeat(np.arange(2), 50).astype(np.int32))
    ref_sims = np.linspace(0.6, 0.9, 100).astype(np.float32)
    report = drift_report((scores, labels), 100, np.full(4, 0.9, np.float32), np.array([0, 1, 0, 1]),
                          np.array([50, 50]), 0.1, None,
                          (ref_sims, np.array([0.9, 0.8, 0.5, 0.55], np.float32), np.zeros(100, np.int32)))
    assert report["below_cut"] == 0 and report["below_neighbour_cut"] == 2 and report["drift_share"] == 0.5
    assert report["neighbour_cut"] == pytest.approx(np.percentile(ref_sims, 5, method="lower"))


def test_the_add_command_prints_each_drift_test_and_the_cluster_shift(tmp_path, capsys):
    """What docs/workflows.md shows: the drift share with its three tests, the cluster shift beside its chance."""
    from clusterclip.cli.main import main

    run, _ = build_run(tmp_path)
    new = new_file(tmp_path / "other.jsonl", {"sailing": 30}, "other", seed=6)
    capsys.readouterr()
    assert main(["add", str(run.root), str(new)]) == 0
    out = capsys.readouterr().out
    drift = next(line for line in out.splitlines() if line.startswith("drift: "))
    assert "of the new documents are new (threshold 10%)" in drift and "neighbourhood" in drift
    shift = next(line for line in out.splitlines() if line.startswith("cluster shift: "))
    report = json.loads(run.path("drift.json").read_text())
    assert f"{report['cluster_shift']:.1%}" in shift and f"({report['cluster_shift_chance']:.1%} by chance" in shift
    assert report["reference_documents"] == 150 and report["below_neighbour_cut"] > 0
