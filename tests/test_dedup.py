"""Near-duplicate groups (``clusterclip dedup``) and plans over them (``--duplicates drop|group-cap``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from clusterclip.cli.main import main
from clusterclip.contract.corpus import iter_corpus, read_column
from clusterclip.contract.dedup import load_groups
from clusterclip.dedup.config import DedupConfig
from clusterclip.dedup.groups import derive_groups
from clusterclip.dedup.lexical import lsh_pairs, shingle_hashes, signatures
from clusterclip.dedup.semantic import (
    NONE_SIMILARITY,
    appended_neighbours,
    cluster_neighbours,
    earlier_neighbours,
    has_near_copy,
    kept_order,
)
from clusterclip.dedup.stage import dedup_stage
from clusterclip.errors import ClusterClipError, InfeasiblePlanError
from clusterclip.plan import PlanConfig, build_plan
from clusterclip.plan.duplicates import build_grouped_plan, reference_grouped_order
from clusterclip.store import RunDir, load_npy

WORDS = [f"w{i}" for i in range(32)]


def unit_rows(n: int, dim: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


# --------------------------------------------------------------------------------------------- semantic


@given(n=hs.integers(1, 40), block=hs.integers(1, 9), seed=hs.integers(0, 2**16))
@settings(max_examples=60, deadline=None)
def test_blocked_neighbours_equal_brute_force(n, block, seed):
    x = unit_rows(n, 8, seed)
    best, arg = cluster_neighbours(n, lambda a, b: x[a:b], block)
    s = x @ x.T
    for i in range(n):
        if i == 0:
            assert arg[i] == -1 and best[i] == NONE_SIMILARITY
        else:
            assert arg[i] == int(np.argmax(s[i, :i])) and best[i] == pytest.approx(s[i, :i].max(), abs=1e-5)


@given(n=hs.integers(1, 40), first=hs.integers(0, 40), k=hs.integers(1, 4), block=hs.integers(1, 9),
       cache=hs.sampled_from([0, 1000]), seed=hs.integers(0, 2**16))
@settings(max_examples=60, deadline=None)
def test_appended_neighbours_equal_brute_force(n, first, k, block, cache, seed):
    """Each document ``clusterclip add`` appended: its most similar same-cluster document of lower index."""
    first = min(first, n)
    x = unit_rows(n, 8, seed)
    labels = np.random.default_rng(seed).integers(0, k, n).astype(np.int32)
    nb, sim = appended_neighbours(labels, first, lambda r: x[r], block=block, cache_rows=cache)
    assert nb.shape == sim.shape == (n - first,)
    for i in range(first, n):
        same = np.flatnonzero(labels[:i] == labels[i])
        if not same.size:
            assert nb[i - first] == -1 and sim[i - first] == NONE_SIMILARITY
        else:
            s = x[same] @ x[i]
            assert nb[i - first] == same[np.argmax(s)] and sim[i - first] == pytest.approx(s.max(), abs=1e-5)


def test_earlier_neighbours_bounded_blocks_equal_cached():
    labels = np.random.default_rng(1).integers(0, 3, 200).astype(np.int32)
    tokens = np.random.default_rng(2).integers(1, 50, 200)
    x = unit_rows(200, 16, 3)
    a = earlier_neighbours(labels, tokens, lambda r: x[r])
    b = earlier_neighbours(labels, tokens, lambda r: x[r], block=7, cache_rows=0)
    assert np.array_equal(a[0], b[0]) and np.allclose(a[1], b[1], atol=1e-6)
    assert np.all(labels[a[0][a[0] >= 0]] == labels[a[0] >= 0])  # neighbours stay inside the cluster
    rank = np.empty(200, np.int64)
    rank[kept_order(labels, tokens)] = np.arange(200)
    assert np.all(rank[a[0][a[0] >= 0]] < rank[a[0] >= 0])  # and come earlier in the kept order


def test_groups_follow_eps_and_keep_the_longest():
    x = unit_rows(6, 64, 0)
    x[1] = x[0] + 0.005
    x[2] = x[0] + 0.03
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    labels, tokens = np.zeros(6, np.int32), np.array([5, 9, 5, 1, 1, 1])
    nb, sim = earlier_neighbours(labels, tokens, lambda r: x[r])
    empty = (np.zeros((0, 2), np.int64), np.zeros(0, np.float32))
    tight = derive_groups(nb, sim, *empty, tokens, 0.01, 1.0)
    loose = derive_groups(nb, sim, *empty, tokens, 0.1, 1.0)
    assert tight.group[0] == tight.group[1] != tight.group[2] and tight.kept[tight.group[0]] == 1  # longest kept
    assert loose.group[0] == loose.group[1] == loose.group[2]
    assert loose.kept.size == 4 and tight.kept.size == 5
    assert np.array_equal(loose.group[loose.kept], np.arange(loose.kept.size))


# ---------------------------------------------------------------------------------------------- lexical


def test_shingles_ignore_case_and_punctuation_and_lsh_finds_near_copies():
    rng = np.random.default_rng(0)
    docs = [" ".join(rng.choice(WORDS, 120)) for _ in range(30)]
    copy = docs[3].split()
    copy[10], copy[11] = copy[11], copy[10]
    texts = [*docs, docs[0].upper().replace(" ", ", "), " ".join(copy), "", ""]
    a, ra = shingle_hashes(pa.array([texts[0], texts[30]]), 3)
    assert np.array_equal(np.sort(a[ra[0]:ra[1]]), np.sort(a[ra[1]:ra[2]]))
    sig = signatures([pa.array(texts[:17]), pa.array(texts[17:])], len(texts), 128, 3, 0)
    pairs, jac = lsh_pairs(sig, 16)
    found = {tuple(p) for p, j in zip(pairs.tolist(), jac, strict=True) if j >= 0.7}
    assert {(0, 30), (3, 31)} <= found and (32, 33) not in found and len(found) == 2


# -------------------------------------------------------------------------------------------- the stage


def corpus_with_copies(path, n=120, seed=0):
    rng = np.random.default_rng(seed)
    docs = [" ".join(rng.choice(WORDS, rng.integers(40, 90))) for _ in range(n)]
    rows = [{"id": f"d{i}", "text": t} for i, t in enumerate(docs)]
    rows += [{"id": f"copy{j}", "text": docs[j] + " " + " ".join(docs[j].split()[:3])} for j in range(0, 20, 2)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return len(rows)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dedup")
    n = corpus_with_copies(tmp / "c.jsonl")
    assert main(["embed", str(tmp / "c.jsonl"), "--out", str(tmp / "run"), "--embedder", "hashing",
                 "--id-field", "id", "-q"]) == 0
    assert main(["cluster", str(tmp / "run"), "--k", "3", "-q"]) == 0
    return tmp / "run", n


def test_stage_artifacts_record_and_reuse(run_dir):
    path, n = run_dir
    run = RunDir(path)
    rec = dedup_stage(run, DedupConfig()).to_json()
    group, kept = load_groups(run)
    assert group.shape == (n,) and np.array_equal(group[kept], np.arange(kept.size))
    table = pq.read_table(path / "dedup" / "removed.parquet").to_pydict()
    pairs = set(zip(table["removed_id"], table["kept_id"], strict=True))
    assert {(f"d{j}", f"copy{j}") for j in range(0, 20, 2)} <= pairs  # the longer copy is kept
    assert rec["removed"] == len(table["removed_id"]) >= 10 and not rec["reused_pairwise"]
    assert min(table["word_jaccard"]) >= np.float32(DedupConfig().confirm)  # every removed document is confirmed
    assert {"word_signatures.npy", "shingle_count.npy", "text_key.npy"} <= {p.name for p in (path / "dedup").iterdir()}
    assert rec["semantic_edges"] >= rec["unconfirmed_semantic"] >= 0 and rec["split_off"] >= 0
    assert rec["largest_groups"][0]["size"] == rec["largest_group"] >= 2
    assert dedup_stage(run, DedupConfig()).to_json()["finished_at"] == rec["finished_at"]  # fresh: skipped
    again = dedup_stage(run, DedupConfig(eps=0.2, jaccard=0.9)).to_json()
    assert again["reused_pairwise"] and again["config"]["eps"] == 0.2
    checks = dedup_stage(run, DedupConfig(confirm=0.3, verify=0.8, min_shingles=3)).to_json()
    assert checks["reused_pairwise"] and checks["config"]["verify"] == 0.8  # the checks only change the derivation
    strict = pq.read_table(path / "dedup" / "removed.parquet").column("word_jaccard").to_numpy()
    assert strict.size == 0 or strict.min() >= np.float32(0.8)  # the star check's bar
    assert main(["dedup", str(path), "--eps", "0.05", "-q"]) == 0
    assert json.loads((path / "dedup.json").read_text())["command"][:3] == ["clusterclip", "dedup", "{run}"]


def test_command_prints_the_largest_groups_with_a_sample_pair(run_dir, tmp_path, capsys):
    """`clusterclip dedup` prints the largest groups: kept document and least similar member, with their ids,
    word-set Jaccard, cosine and the start of each text, so that a bad merge shows."""
    path = tmp_path / "run"
    shutil.copytree(run_dir[0], path)
    capsys.readouterr()
    assert main(["dedup", str(path), "--verify", "0.7", "-q"]) == 0
    out = capsys.readouterr().out
    rec = json.loads((path / "dedup.json").read_text())
    first = rec["largest_groups"][0]
    texts = dict(zip(read_column(RunDir(path), "id"), read_column(RunDir(path), "text"), strict=True))
    assert "largest groups" in out and "refused" in out and "split off" in out
    assert f"kept   #{first['kept']} {first['kept_id']}: '{texts[first['kept_id']][:40]}" in out
    assert f"member #{first['member']} {first['member_id']} (word-set Jaccard {first['jaccard']:.2f}" in out
    assert rec["command"][3:] == ["--verify", "0.7"]  # the rebuild command names the new setting


def test_plan_command_draws_each_group_within_the_cap(run_dir, tmp_path):
    """`clusterclip plan --duplicates group-cap|drop` over the run's groups: a group's members together never
    exceed the cap, `drop` draws only kept documents, and a continuation keeps both over the whole chain (it
    inherits the policy and the cap, docs/sampling.md)."""
    path = tmp_path / "run"
    shutil.copytree(run_dir[0], path)
    assert main(["dedup", str(path), "-q"]) == 0
    group, kept = load_groups(RunDir(path))
    for mode in ("group-cap", "drop"):
        assert main(["plan", str(path), "--strategy", "uniform", "--max-repeat", "2", "--epochs", "1", "--duplicates",
                     mode, "-q"]) == 0
        (folder,) = [p for p in (path / "plans").iterdir() if p.name.endswith(mode)]
        order = np.load(folder / "plan.npy")
        assert np.bincount(group[order], minlength=kept.size).max() <= 2
        if mode == "drop":
            assert np.isin(order, kept).all()
    assert main(["plan", str(path), "--strategy", "uniform", "--continue", folder.name, "--consumed", "5", "-q"]) == 0
    (cont,) = [p for p in (path / "plans").iterdir() if "-cont-" in p.name]
    chain = np.concatenate([np.load(folder / "plan.npy")[:5], np.load(cont / "plan.npy")])
    assert np.isin(chain, kept).all() and np.bincount(group[chain], minlength=kept.size).max() <= 2


def deduped_copy(run_dir, tmp_path) -> tuple[Path, RunDir]:
    """A copy of the module's run with the dedup stage's defaults run on it."""
    copy = tmp_path / "run"
    shutil.copytree(run_dir[0], copy)
    run = RunDir(copy)
    dedup_stage(run, DedupConfig())
    return copy, run


def test_stale_after_recluster(run_dir, tmp_path):
    copy, run = deduped_copy(run_dir, tmp_path)
    assert main(["cluster", str(copy), "--k", "4", "-q"]) == 0
    with pytest.raises(ClusterClipError, match="stale"):
        load_groups(run)


@pytest.mark.parametrize("mode", ["drop", "group-cap"])
def test_a_group_that_spans_clusters_is_planned_in_its_representatives_cluster(mode):
    """The dedup stage's LSH bands the whole corpus, so a group may hold a copy in another cluster (groups of 3
    here: the representative in cluster 0, a copy in cluster 1). The plan builds, no group exceeds the cap, and
    every per-cluster figure counts the copy in its group's cluster."""
    n = 300
    labels = np.r_[np.zeros(150, np.int64), np.ones(150, np.int64)]
    group = np.arange(n)
    group[150:160] = np.arange(10)  # copies of documents 0..9 sit in cluster 1
    _, group = np.unique(group, return_inverse=True)
    kept = np.array([np.flatnonzero(group == g)[0] for g in range(group.max() + 1)])
    plan = build_grouped_plan(labels, PlanConfig(duplicates=mode, max_repeat=3, budget=700), group, kept)
    order = np.asarray(plan.order)
    per_group = np.bincount(group[order], minlength=kept.size)
    assert per_group.max() <= 3
    if mode == "drop":
        assert not np.isin(order, np.arange(150, 160)).any()
    else:
        assert np.isin(order, np.arange(150, 160)).any()
    home = labels[kept[group]]
    assert np.array_equal(plan.per_cluster["draws"], np.bincount(home[order], minlength=2))
    assert np.array_equal(plan.mixture.sum(axis=0), np.bincount(home[order], minlength=2))
    assert np.array_equal(plan.per_cluster["size"], np.bincount(home, minlength=2))


def _partition(group: np.ndarray) -> np.ndarray:
    """Group ids renumbered by first appearance: equal for equal partitions."""
    _, first, inverse = np.unique(group, return_index=True, return_inverse=True)
    return np.argsort(np.argsort(first))[inverse]


EXTENDED = ("signatures.npy", "word_signatures.npy", "shingle_count.npy", "text_key.npy", "lexical_pairs.npy",
            "byte_signatures.npy", "byte_rows.npy")
"""Arrays ``clusterclip add`` extends that do not depend on the order of the semantic pass."""


def test_add_extends_the_groups_to_the_new_documents(run_dir, tmp_path):
    """`clusterclip add` assigns new near-copies to their originals' groups (hashing only the new texts), keeps
    the older documents' groups, and leaves the stage current: plans with --duplicates need no re-run."""
    n = run_dir[1]
    copy, run = deduped_copy(run_dir, tmp_path)
    before = load_npy(copy / "dedup" / "group.npy")
    texts = dict(zip(read_column(run, "id"), read_column(run, "text"), strict=True))
    rng = np.random.default_rng(7)
    new = [{"id": f"new{j}", "text": texts[f"d{j}"] + " extra words at the end"} for j in (1, 3, 5)]
    new += [{"id": f"fresh{i}", "text": " ".join(rng.choice(WORDS, 60))} for i in range(6)]
    (tmp_path / "new.jsonl").write_text("".join(json.dumps(r) + "\n" for r in new))
    assert main(["add", str(copy), str(tmp_path / "new.jsonl"), "-q"]) == 0
    group, kept = load_groups(run)
    rec = run.record("dedup")
    assert rec["appended_from"] == n and rec["documents"] == n + len(new)
    ids = read_column(run, "id")
    index = {doc: i for i, doc in enumerate(ids)}
    for first in (0, 5, n - 1, n, n + 3, n + len(new)):  # reading from a document, across the add's part
        assert [x for b in iter_corpus(run, ("id",), 7, first=first) for x in b.column(0).to_pylist()] == ids[first:]
    for j in (1, 3, 5):
        assert group[index[f"new{j}"]] == group[index[f"d{j}"]]
        assert kept[group[index[f"d{j}"]]] == index[f"new{j}"]  # the longest member is kept
    assert np.array_equal(_partition(group[:n]), _partition(before))
    assert json.loads((copy / "drift.json").read_text())["dedup"]["extended"]
    assert main(["plan", str(copy), "--strategy", "uniform", "--max-repeat", "2", "--epochs", "1", "--duplicates",
                 "group-cap", "-q"]) == 0
    grown = {name: (copy / "dedup" / name).read_bytes() for name in EXTENDED}
    assert main(["dedup", str(copy), "--force", "-q"]) == 0  # a full recompute finds the same groups here
    assert np.array_equal(_partition(load_groups(run)[0]), _partition(group))
    for name in EXTENDED:  # the add hashed only the new texts, to the arrays a full pass computes
        assert (copy / "dedup" / name).read_bytes() == grown[name], name
    assert load_npy(copy / "dedup" / "word_signatures.npy").shape == (n + len(new), DedupConfig().word_perm)


def test_add_leaves_groups_without_signatures_stale(run_dir, tmp_path):
    """Groups from before the signatures were stored (or damaged pairwise work) are not extended: stale."""
    copy, run = deduped_copy(run_dir, tmp_path)
    (copy / "dedup" / "signatures.npy").unlink()
    (tmp_path / "new.jsonl").write_text(json.dumps({"id": "x", "text": " ".join(WORDS)}) + "\n")
    assert main(["add", str(copy), str(tmp_path / "new.jsonl"), "-q"]) == 0
    assert json.loads((copy / "drift.json").read_text())["dedup"] == {"extended": False}
    with pytest.raises(ClusterClipError, match="predate"):
        load_groups(run)


# --------------------------------------------------------------------------------------------- planning


@hs.composite
def grouped_cases(draw):
    k = draw(hs.integers(1, 6))
    n = draw(hs.integers(1, 60))
    rng = np.random.default_rng(draw(hs.integers(0, 2**16)))
    labels = rng.integers(0, k, n).astype(np.int32)
    sub = rng.integers(0, draw(hs.integers(1, 8)), n)
    tokens = rng.integers(1, 30, n)
    key = labels.astype(np.int64) * 100 + sub
    order = np.argsort(key, kind="stable")
    same = np.flatnonzero(key[order][1:] == key[order][:-1])
    pairs = np.stack([order[same], order[same + 1]], axis=1).astype(np.int64)
    found = derive_groups(np.full(n, -1, np.int64), np.full(n, NONE_SIMILARITY, np.float32), pairs,
                          np.ones(len(pairs), np.float32), tokens, 0.0, 1.0)
    cap = draw(hs.integers(1, 4))
    strategy = draw(hs.sampled_from(["clusterclip", "uniform", "random", "temperature"]))
    groups = found.kept.size
    budget = draw(hs.integers(1, cap * groups))
    mode = draw(hs.sampled_from(["drop", "group-cap"]))
    config = PlanConfig(strategy=strategy, max_repeat=cap, budget=budget, duplicates=mode,
                        order=draw(hs.sampled_from(["equal-rate", "spread"])) if strategy != "random" else "equal-rate",
                        seed=draw(hs.integers(0, 5)))
    return labels, tokens, found.group, found.kept, config, int(labels.max()) + 1


@given(grouped_cases(), hs.integers(1, 50))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_grouped_plans_equal_reference_and_cap_groups(case, chunk):
    labels, tokens, group, kept, config, k = case
    plan = build_grouped_plan(labels, config, group, kept, tokens, chunk_size=chunk, n_clusters=k)
    order = np.asarray(plan.order)
    assert np.array_equal(order, reference_grouped_order(labels, config, group, kept, tokens, k))
    assert order.size == config.budget
    per_group = np.bincount(group[order], minlength=kept.size)
    assert per_group.max() <= config.max_repeat  # the cap holds per group
    if config.duplicates == "drop":
        assert np.isin(order, kept).all()
    draws = np.bincount(labels[order], minlength=k)
    assert np.array_equal(draws, plan.per_cluster["draws"])
    g_c = np.bincount(labels[kept], minlength=k)
    assert np.all(draws <= config.max_repeat * g_c)  # cluster exhaustion counts groups
    if config.strategy == "uniform":
        assert_water_filled(draws, config.max_repeat * g_c, config.budget)
    counts = np.bincount(order, minlength=labels.size)
    assert plan.stats["unique_docs"] == int((counts > 0).sum())
    assert np.array_equal(np.bincount(counts), plan.repeat_hist)


def assert_water_filled(draws, caps, budget):
    """Brute-force oracle of balanced quotas: ``min(lambda, cap_c)`` rounded, for the lambda that meets the budget."""
    lo, hi = 0.0, float(max(caps.max(), 1))
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if np.minimum(mid, caps).sum() < budget else (lo, mid)
    assert np.all(np.abs(draws - np.minimum(hi, caps)) < 1 + 1e-9)


def test_group_cap_uses_every_member_and_none_is_unchanged(tmp_path):
    labels = np.array([0, 0, 0, 1, 1, 1])
    group, kept = np.array([0, 0, 0, 1, 2, 2]), np.array([0, 3, 4])
    capped = build_grouped_plan(labels, PlanConfig(max_repeat=3, budget=9, duplicates="group-cap"), group, kept)
    assert np.array_equal(np.sort(capped.order), [0, 1, 2, 3, 3, 3, 4, 4, 5])
    dropped = build_grouped_plan(labels, PlanConfig(max_repeat=3, budget=9, duplicates="drop"), group, kept)
    assert set(dropped.order.tolist()) == {0, 3, 4} and dropped.stats["max_repeat_observed"] == 3
    on_disk = build_grouped_plan(labels, PlanConfig(max_repeat=3, budget=9, duplicates="group-cap"), group, kept,
                                 out=tmp_path / "p" / "plan.npy", chunk_size=2)
    assert np.array_equal(on_disk.order, capped.order) and on_disk.identity == capped.identity
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == ["plan.npy"]
    plain = PlanConfig(max_repeat=3, budget=9)
    assert np.array_equal(build_grouped_plan(labels, plain, group, kept).order, build_plan(labels, plain).order)
    assert plain.name() == "clusterclip-R3-docs-B9-s0" and "duplicates" not in plain.to_json()
    assert PlanConfig(duplicates="drop").name().endswith("-drop")
    assert PlanConfig.from_json(PlanConfig(duplicates="group-cap").to_json()).duplicates == "group-cap"
    with pytest.raises(InfeasiblePlanError):
        build_grouped_plan(labels, PlanConfig(max_repeat=3, budget=10, duplicates="drop"), group, kept)
    with pytest.raises(ClusterClipError, match="duplicates"):
        build_plan(labels, PlanConfig(duplicates="drop"))
    with pytest.raises(ClusterClipError, match="needs --budget-unit docs"):
        PlanConfig(duplicates="group-cap", budget_unit="tokens")


def test_report_shows_duplicates_per_cluster_with_example_groups(run_dir, tmp_path):
    from clusterclip.report import build_report

    path = tmp_path / "run"
    shutil.copytree(run_dir[0], path, ignore=shutil.ignore_patterns("dedup", "dedup.json"))
    assert "Duplicates" not in build_report(path, progress=False).read_text()  # no dedup yet: no section
    rec = dedup_stage(RunDir(path), DedupConfig()).to_json()
    html = build_report(path, progress=False).read_text()
    assert 'id="duplicates"' in html and f"<td>{rec['removed']}</td>" in html.replace(",", "")
    group, kept = load_groups(RunDir(path))
    labels = load_npy(path / "labels.npy")
    removed = kept[group] != np.arange(group.size)
    worst = int(np.argmax(np.bincount(labels[removed], minlength=labels.max() + 1) / np.bincount(labels)))
    assert f"<td>{worst}</td>" in html
    texts = [json.loads(line)["text"] for line in (run_dir[0].parent / "c.jsonl").open()]
    largest = int(np.argsort(-np.bincount(group), kind="stable")[0])
    first = int(kept[largest])
    assert f"<b>#{first} kept</b>: {' '.join(texts[first].split())[:100]}" in html
    other = int(next(i for i in np.flatnonzero(group == largest) if i != first))
    assert f"<b>#{other} removed</b>" in html
    least = pq.read_table(path / "dedup" / "removed.parquet").to_pandas().query("kept_index == @first")
    pair = least.sort_values(["word_jaccard", "removed_index"]).iloc[0]
    assert f"(least similar member: word-set Jaccard {pair.word_jaccard:.2f}, cosine {pair.cosine:.3f})" in html
    assert "semantic edges refused (unconfirmed)" in html
    assert main(["cluster", str(path), "--k", "4", "-q"]) == 0  # the groups are now stale
    assert "predate the current corpus or clusters" in build_report(path, progress=False).read_text()


@settings(max_examples=30, deadline=None)
@given(hs.integers(0, 40), hs.integers(0, 40), hs.integers(1, 7), hs.floats(0.0, 0.5), hs.integers(0, 2**31))
def test_near_copies_across_two_sets_equal_brute_force(nq: int, nr: int, block: int, eps: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    ref = rng.normal(size=(nr, 4)).astype(np.float32)
    q = rng.normal(size=(nq, 4)).astype(np.float32)
    if nr:
        q[: nq // 2] = ref[rng.integers(0, nr, nq // 2)] + 0.05 * rng.normal(size=(nq // 2, 4))
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    expect = (q @ ref.T >= np.float32(1 - eps)).any(axis=1) if nr else np.zeros(nq, bool)
    assert np.array_equal(has_near_copy(q, ref, eps, block=block), expect)


def test_signatures_of_a_later_slice_equal_those_of_the_whole_corpus():
    """Per part (Ray) or per add, ``first`` keeps empty documents apart exactly as one pass over everything."""
    texts = ["", "w1 w2 w3 w4", "", "w5", "w1 w2 w3 w4 w6", ""]
    whole = signatures([pa.array(texts)], 6, 32, 3, 0)
    parts = np.concatenate([signatures([pa.array(texts[:3])], 3, 32, 3, 0),
                            signatures([pa.array(texts[3:])], 3, 32, 3, 0, first=3)])
    assert np.array_equal(whole, parts)
    assert not np.array_equal(whole[0], whole[2]) and not np.array_equal(whole[2], whole[5])


def test_status_lists_dedup_and_verify_checks_its_files(run_dir, tmp_path, capsys):
    """`status` names the dedup stage; `status --verify` finds a changed dedup/group.npy (exit 1)."""
    path = tmp_path / "run"
    shutil.copytree(run_dir[0], path)
    assert main(["dedup", str(path), "-q"]) == 0
    capsys.readouterr()
    assert main(["status", str(path), "--verify"]) == 0
    assert "dedup" in capsys.readouterr().out
    group = path / "dedup" / "group.npy"
    data = bytearray(group.read_bytes())
    data[-1] ^= 1
    group.write_bytes(bytes(data))
    assert main(["status", str(path), "--verify"]) == 1
    assert "dedup/group.npy" in capsys.readouterr().out


def test_an_infeasible_group_cap_budget_counts_groups_not_documents(run_dir, tmp_path, capsys):
    path = tmp_path / "run"
    shutil.copytree(run_dir[0], path)
    assert main(["dedup", str(path), "-q"]) == 0
    group, kept = load_groups(RunDir(path))
    n = len(group)
    capsys.readouterr()
    assert main(["plan", str(path), "--strategy", "uniform", "--max-repeat", "1", "--budget", str(n),
                 "--duplicates", "group-cap", "-q"]) == 2
    err = capsys.readouterr().err
    assert f"the 'documents' are the {kept.size:,} duplicate groups: each duplicate group counts as one" in err, err
    assert main(["plan", str(path), "--duplicates", "group-cap", "--budget-unit", "tokens", "-q"]) == 2
    assert "needs --budget-unit docs" in capsys.readouterr().err
