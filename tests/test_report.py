"""The HTML report: keyword extraction, metrics, every chart, and the page built from a fake run directory.

The fake run directory is written here with the run-directory helpers (not by the real stages), so the
report is tested against the artifact contract alone.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip.errors import ClusterClipError
from clusterclip.report import build_report, charts
from clusterclip.report.centroid_map import centroid_projection, plot_centroid_map
from clusterclip.report.experiment import experiment_curves
from clusterclip.report.keywords import CTfidf, english_stopwords, example_indices, scan_corpus, snippet, tokenize
from clusterclip.report.load import load_run
from clusterclip.report.metrics import (
    contingency_table,
    effective_number,
    nmi,
    nmi_from_table,
    purity,
    purity_from_table,
    top_share,
)
from clusterclip.store import RunDir, save_json, save_npy
from tests.records import write_record

SECTIONS = [
    "summary",
    "sizes",
    "clusters",
    "plans",
    "mixture",
    "repetition",
    "effective-clusters",
    "centroid-map",
    "ground-truth",
]
SIZES = [120, 60, 40, 30, 20, 15, 10, 5]
GROUPS = ["news", "code", "math", "legal"]
HOSTILE = "<script>alert('x')</script> & friends"


def cluster_words(c: int) -> list[str]:
    """A vocabulary of its own for planted cluster ``c`` (letters only, so the tokenizer keeps them)."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    stem = letters[c // 26 % 26] + letters[c % 26]
    return [f"{stem}{letters[j]}word" for j in range(6)]


def write_fake_run(
    root: Path,
    sizes: list[int] = SIZES,
    with_groups: bool = True,
    with_plans: bool = True,
    with_experiment: bool = False,
    dim: int = 16,
    seed: int = 0,
    parts: int = 2,
) -> Path:
    """All artifacts of a finished run (corpus, embed, cluster, two plans) for ``sum(sizes)`` documents."""
    rng = np.random.default_rng(seed)
    k = len(sizes)
    n = int(sum(sizes))
    labels = np.repeat(np.arange(k, dtype=np.int32), sizes)
    rng.shuffle(labels)
    shared = ["the", "of", "and", "data", "result", "value", "people", "time"]
    texts, groups = [], []
    for i, c in enumerate(labels):
        words = list(rng.choice(cluster_words(int(c)), size=12)) + list(rng.choice(shared, size=10))
        rng.shuffle(words)
        text = " ".join(words)
        if i == 0:
            text = HOSTILE + " " + text
        texts.append(text)
        g = GROUPS[int(c) % len(GROUPS)] if rng.random() > 0.1 else GROUPS[int(rng.integers(len(GROUPS)))]
        groups.append(g if with_groups else None)
    tokens = np.array([len(t.split()) for t in texts], dtype=np.int64)
    bounds = np.linspace(0, n, parts + 1).astype(int)
    (root / "corpus").mkdir(parents=True, exist_ok=True)
    for p in range(parts):
        lo, hi = bounds[p], bounds[p + 1]
        table = pa.table(
            {
                "index": pa.array(np.arange(lo, hi), pa.int64()),
                "id": pa.array([f"doc-{i}" for i in range(lo, hi)], pa.string()),
                "text": pa.array(texts[lo:hi], pa.string()),
                "n_tokens": pa.array(tokens[lo:hi], pa.int64()),
                "group": pa.array(groups[lo:hi], pa.string()),
            }
        )
        pq.write_table(table, root / "corpus" / f"part-{p:05d}.parquet")
    save_npy(root / "tokens.npy", tokens)
    run = RunDir(root)
    parts = [f"corpus/part-{p:05d}.parquet" for p in range(parts)]
    write_record(run, "corpus", {"inputs": ["fake.jsonl"]}, "fake", [*parts, "tokens.npy"], 1.5, count=n,
                 tokens=int(tokens.sum()), skipped=2)
    write_record(run, "embed", {"embedder": {"name": "hashing", "dim": dim}}, run.output_hash("corpus"), [], 3.25,
                 embedder="hashing", model="hashing-16", dim=dim, count=n)
    centroids = rng.normal(size=(k, dim)).astype(np.float32)
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    save_npy(root / "centroids.npy", centroids)
    save_npy(root / "labels.npy", labels)
    scores = rng.uniform(0.2, 0.95, size=n).astype(np.float32)
    scores[0] = 0.99
    save_npy(root / "scores.npy", scores)
    save_npy(root / "sizes.npy", np.bincount(labels, minlength=k).astype(np.int64))
    write_record(run, "cluster", {"k": k, "seed": 0}, run.output_hash("embed"),
                 ["centroids.npy", "labels.npy", "scores.npy", "sizes.npy"], 0.75, k=k, objective=0.61, sample_size=n)
    if with_plans:
        write_plan(root / "plans" / "random", rng.permutation(n), labels, "random", None)
        write_plan(root / "plans" / "clusterclip-r2", clusterclip_order(labels, n, 2, rng), labels, "clusterclip", 2)
    if with_experiment:
        save_json(
            root / "experiment" / "results.json",
            {
                "summary": {
                    "random": {"runs": 2, "val_loss": 3.21, "tokens": 100000},
                    "clusterclip": {"runs": 2, "val_loss": 3.05, "tokens": 100000},
                },
                "curves": {
                    "random": {"step": [0, 10, 20, 30], "val_loss": [5.0, 4.1, 3.5, 3.21], "train": [None, 4, 3, 2]},
                    "clusterclip": {"step": [0, 10, 20, 30], "val_loss": [5.0, 4.0, 3.3, 3.05]},
                },
            },
        )
    return root


def clusterclip_order(labels: np.ndarray, budget: int, cap: int, rng: np.random.Generator) -> np.ndarray:
    """A simple balanced-with-cap order: round robin over clusters until each is used ``cap`` times over."""
    queues = {}
    for c in np.unique(labels):
        docs = np.flatnonzero(labels == c)
        queues[int(c)] = list(np.concatenate([rng.permutation(docs) for _ in range(cap)]))
    order: list[int] = []
    while len(order) < budget:
        for c in list(queues):
            if not queues[c]:
                del queues[c]
                continue
            order.append(int(queues[c].pop()))
            if len(order) == budget:
                break
    return np.asarray(order, dtype=np.int64)


def write_plan(folder: Path, order: np.ndarray, labels: np.ndarray, strategy: str, cap: int | None) -> None:
    """Write a plan and the per-cluster statistics the planner records, computed from ``order``."""
    k = int(labels.max()) + 1
    window = 30
    lab = labels[order]
    draws = np.bincount(lab, minlength=k)
    counts = np.bincount(order, minlength=len(labels))
    exhausted = np.full(k, -1, dtype=np.int64)
    if cap:
        for c in range(k):
            capacity = cap * int((labels == c).sum())
            pos = np.flatnonzero(lab == c)
            if len(pos) >= capacity:
                exhausted[c] = int(pos[capacity - 1]) + 1
    win = np.arange(len(order)) // window
    mixture = np.zeros((int(win[-1]) + 1, k), dtype=np.int64)
    np.add.at(mixture, (win, lab), 1)
    folder.mkdir(parents=True, exist_ok=True)
    save_npy(folder / "plan.npy", order)
    save_npy(folder / "cluster_draws.npy", draws)
    save_npy(folder / "cluster_unique.npy", np.bincount(labels[counts > 0], minlength=k))
    save_npy(folder / "cluster_max_repeat.npy", np.array([counts[labels == c].max() for c in range(k)]))
    save_npy(folder / "cluster_exhausted_at.npy", exhausted)
    save_npy(folder / "mixture.npy", mixture)
    save_npy(folder / "repeat_hist.npy", np.bincount(counts))
    run, name = RunDir(folder.parent.parent), folder.name
    config = {"strategy": strategy, "budget": len(order), "budget_unit": "docs", "max_repeat": cap, "tau": None,
              "weights": None, "seed": 0, "window": window}
    # only the order is listed: the statistics beside it are read as they are (the report notes a bad one)
    write_record(run, f"plans/{name}/plan", config, run.output_hash("cluster"), [f"plans/{name}/plan.npy"], 0.1,
                 name=name,
                 stats={"draws": len(order), "unique": int((counts > 0).sum()), "max_repeat": int(counts.max())},
                 upstream={"cluster": run.output_hash("cluster")})


@pytest.fixture
def fake_run(tmp_path) -> Path:
    return write_fake_run(tmp_path / "run")


def png_ok(path: Path) -> None:
    """The PNG exists, decodes, and is not a blank canvas."""
    assert path.exists() and path.stat().st_size > 2000
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
    assert float(img[..., :3].std()) > 0.02


def labelled(chart: charts.Chart) -> None:
    assert chart.title
    assert chart.labels, "chart has no axis labels"
    for x, y in chart.labels:
        assert x and y


# ------------------------------------------------------------------------------------------- keywords


def test_tokenize_and_snippet():
    assert tokenize("Hello, WORLD! x1 ab abc-def 42 naïve") == ["hello", "world", "abc", "def", "naïve"]
    text = "word " * 100
    s = snippet(text, 50)
    assert len(s) <= 51 and s.endswith("…") and "  " not in s
    assert snippet("  short\n\ntext  ") == "short text"


def test_ctfidf_finds_planted_vocabularies():
    rng = np.random.default_rng(1)
    k = 5
    texts, clusters = [], []
    common = ["the", "model", "result", "report", "data", "value"]
    for c in range(k):
        for _ in range(20 + 10 * c):
            words = list(rng.choice(cluster_words(c), 8)) + list(rng.choice(common, 8))
            texts.append(" ".join(words))
            clusters.append(c)
    ctf = CTfidf(k)
    for lo in range(0, len(texts), 17):
        ctf.add(texts[lo : lo + 17], clusters[lo : lo + 17])
    top = ctf.top(6)
    for c in range(k):
        assert {w for w, _ in top[c]} == set(cluster_words(c))
        scores = [s for _, s in top[c]]
        assert scores == sorted(scores, reverse=True) and scores[0] > 0
    assert all("the" not in {w for w, _ in t} for t in top)


def test_ctfidf_batching_does_not_change_scores():
    texts = ["alpha beta gamma", "beta beta delta", "gamma epsilon zeta", "alpha alpha zeta"]
    clusters = [0, 0, 1, 1]
    one = CTfidf(2)
    one.add(texts, clusters)
    many = CTfidf(2, consolidate_every=1)
    for t, c in zip(texts, clusters, strict=True):
        many.add([t], [c])
    assert one.top(5, min_count=1) == many.top(5, min_count=1)


def test_ctfidf_prunes_rare_terms_past_the_cap_and_keeps_the_keywords():
    """Every document holds its cluster's frequent word and unseen one-off words: past ``max_terms`` the one-offs
    are pruned, the frequent words keep their counts and ranks, and the counts say they were pruned."""
    rng = np.random.default_rng(0)
    topics = ["apple", "banana", "cherry"]
    letters = np.array(list("bdfghjklmnpqrstvwxz"))
    texts = [f"{topics[i % 3]} {topics[i % 3]} " + " ".join("".join(rng.choice(letters, 9)) for _ in range(5))
             for i in range(300)]
    clusters = [i % 3 for i in range(300)]
    exact, capped = CTfidf(3, stopwords=()), CTfidf(3, stopwords=(), consolidate_every=1, max_terms=40)
    for a in range(0, 300, 10):
        exact.add(texts[a:a + 10], clusters[a:a + 10])
        capped.add(texts[a:a + 10], clusters[a:a + 10])
    top_exact, top_capped = exact.top(1), capped.top(1)
    assert [t[0][0] for t in top_capped] == topics == [t[0][0] for t in top_exact]
    assert [t[0][1] for t in top_capped] == pytest.approx([t[0][1] for t in top_exact])  # exact: never pruned
    assert exact.pruned == 0 and capped.pruned > 1000 and len(capped._vocab) <= 40 + 5 * 10 * 3
    keys, counts = capped._consolidate()
    assert len(keys) <= 40 + 5 * 10 * 3 and counts.min() >= 1


def test_ctfidf_ranks_one_off_words_last_and_handles_empty_clusters():
    ctf = CTfidf(3)
    ctf.add(["apple apple apple typoz", "apple banana banana", ""], [0, 0, 1])
    top = ctf.top(3)
    assert [w for w, _ in top[0]][:2] == ["apple", "banana"] and top[0][-1][0] == "typoz"
    assert top[1] == [] and top[2] == []


def test_ctfidf_matches_the_formula():
    ctf = CTfidf(2, stopwords=())
    ctf.add(["aaa aaa bbb", "bbb ccc"], [0, 1])
    got = {w: s for w, s in ctf.top(3, min_count=1)[0]}
    mean_words = (3 + 2) / 2
    assert got["aaa"] == pytest.approx(2 / 3 * np.log(1 + mean_words / 2))
    assert got["bbb"] == pytest.approx(1 / 3 * np.log(1 + mean_words / 2))


def test_example_indices_are_closest_to_centroid():
    labels = np.array([0, 0, 0, 1, 1, 0])
    scores = np.array([0.1, 0.9, 0.5, 0.3, 0.8, 0.7])
    chosen = example_indices(labels, scores, 3, 2)
    assert chosen == {1: 0, 5: 0, 4: 1, 3: 1}


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(-1, 4), min_size=0, max_size=60), st.integers(1, 4), st.integers(1, 9),
       st.booleans(), st.randoms(use_true_random=False))
def test_example_indices_in_chunks_equal_one_sort_of_the_whole_corpus(labels, per_cluster, chunk, with_scores, rnd):
    """Ties (scores from a few values), unlabelled (-1) and out-of-range (4 >= K) documents: chunked, the
    choice is the one a lexsort of every document makes; the per-cluster sums agree with ``np.bincount``."""
    from clusterclip.contract.cluster import cluster_totals

    lab = np.array(labels, np.int32)
    scores = np.array([rnd.choice([0.2, 0.5, 0.9]) for _ in labels], np.float32) if with_scores else None
    key = -scores.astype(np.float64) if with_scores else np.zeros(lab.size)
    order = np.lexsort((np.arange(lab.size), key, lab))
    want = {}
    for c in range(4):
        for i in order[lab[order] == c][:per_cluster]:
            want[int(i)] = c
    got = example_indices(lab, scores, 4, per_cluster, chunk=chunk)
    assert got == want and list(got) == list(want)
    ok = (lab >= 0) & (lab < 4)
    assert cluster_totals(lab, 4).tolist() == np.bincount(lab[ok], minlength=4).tolist()
    if with_scores:
        np.testing.assert_allclose(cluster_totals(lab, 4, scores),
                                   np.bincount(lab[ok], weights=scores[ok].astype(np.float64), minlength=4))


def test_scan_corpus_on_fake_run(fake_run):
    labels = np.load(fake_run / "labels.npy")
    scores = np.load(fake_run / "scores.npy")
    parts = sorted((fake_run / "corpus").glob("part-*.parquet"))
    scan = scan_corpus(parts, labels, len(SIZES), scores=scores, progress=False)
    assert scan.rows == sum(SIZES)
    for c in range(len(SIZES)):
        assert {w for w, _ in scan.keywords[c][:6]} == set(cluster_words(c))
        assert 1 <= len(scan.examples[c]) <= 3
    assert scan.contingency is not None and scan.contingency.sum() == sum(SIZES)
    assert sorted(scan.groups) == sorted(GROUPS)
    assert np.array_equal(scan.contingency.sum(axis=1), SIZES)
    texts = [t for part in parts for t in pq.read_table(part)["text"].to_pylist()]
    for c in range(len(SIZES)):
        members = np.flatnonzero(labels == c)
        ranked = members[np.argsort(-scores[members], kind="stable")]
        assert scan.examples[c] == [snippet(texts[i]) for i in ranked[:3]]


# -------------------------------------------------------------------------------------------- metrics


@pytest.mark.parametrize("seed", range(6))
def test_nmi_and_purity_match_sklearn(seed):
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 400))
    a = rng.integers(0, int(rng.integers(1, 6)), n)
    b = np.where(rng.random(n) < 0.5, a, rng.integers(0, int(rng.integers(1, 9)), n))
    assert nmi(a, b) == pytest.approx(metrics.normalized_mutual_info_score(a, b), abs=1e-10)
    cm = metrics.cluster.contingency_matrix(a, b)
    assert purity(a, b) == pytest.approx(cm.max(axis=0).sum() / n)


def test_nmi_and_purity_edge_cases():
    assert nmi([0, 0, 1, 1], [5, 5, 7, 7]) == pytest.approx(1.0)
    assert nmi(["x", "y", "x", "y"], [0, 0, 1, 1]) == pytest.approx(0.0)
    assert nmi([1, 1, 1], [2, 2, 2]) == 1.0
    assert purity([0, 1, 0, 1], [0, 0, 0, 0]) == 0.5
    t = contingency_table(np.array([0, 0, 1]), np.array(["a", "b", "b"]))
    assert t.tolist() == [[1, 1], [0, 1]]
    assert nmi_from_table(np.zeros((2, 2))) == 0.0 and purity_from_table(np.zeros((2, 2))) == 0.0


def test_effective_number_and_top_share():
    assert effective_number(np.ones(7)) == pytest.approx(7)
    assert effective_number(np.array([5, 0, 0])) == pytest.approx(1)
    rows = effective_number(np.array([[1, 1, 0, 0], [0, 0, 0, 0], [2, 2, 2, 2]]), axis=1)
    assert rows.tolist() == pytest.approx([2, 0, 4])
    assert top_share(np.array([70, 10, 10, 10]), 0.01) == (1, pytest.approx(0.7))
    assert top_share(np.arange(1, 21), 0.10) == (2, pytest.approx(39 / 210))
    assert top_share(np.array([]), 0.1) == (0, 0.0)


# --------------------------------------------------------------------------------------------- charts


def test_plot_sizes(tmp_path):
    c = charts.plot_sizes(np.array(SIZES), tmp_path / "s.png")
    png_ok(c.path)
    labelled(c)
    assert "log" in c.labels[0][1]


def test_plot_mixture_with_other_and_exhaustion(tmp_path):
    rng = np.random.default_rng(0)
    mixture = rng.integers(0, 20, size=(15, 12))
    c = charts.plot_mixture(
        mixture,
        np.arange(12, 0, -1) * 10,
        100,
        tmp_path / "m.png",
        "clip",
        top=8,
        exhausted_at=np.array([-1, 300, 900] + [-1] * 9),
    )
    png_ok(c.path)
    labelled(c)
    assert "clip" in c.title


def test_plot_mixture_single_window_and_few_clusters(tmp_path):
    c = charts.plot_mixture(np.array([[3, 1]]), np.array([10, 5]), 4, tmp_path / "m.png", "tiny")
    png_ok(c.path)
    labelled(c)


def test_plot_repeats(tmp_path):
    c = charts.plot_repeats(np.array([50, 200, 30, 4, 1]), tmp_path / "r.png", "p")
    png_ok(c.path)
    labelled(c)


def test_expected_random_effective():
    assert charts.expected_random_effective(np.full(10, 1000), 100_000) == pytest.approx(10)
    assert charts.expected_random_effective(np.full(10, 1000), 1) == pytest.approx(1)
    small = charts.expected_random_effective(np.full(100, 50), 100)
    assert 50 < small < 100
    assert charts.expected_random_effective(np.full(100, 50), 100) == small
    assert charts.expected_random_effective(np.zeros(3), 10) == 0.0


def test_plot_effective_clusters(tmp_path):
    rng = np.random.default_rng(0)
    plans = {"a": (rng.integers(1, 9, (20, 6)), 50), "b": (rng.integers(0, 3, (10, 6)), 100)}
    c = charts.plot_effective_clusters(plans, np.array([40, 30, 10, 10, 5, 5]), tmp_path / "e.png")
    png_ok(c.path)
    labelled(c)


@pytest.mark.parametrize("groups", [None, ["a", "b", None, "a", "c", "b", "a", "b"]])
def test_plot_centroid_map(tmp_path, groups):
    rng = np.random.default_rng(0)
    c = plot_centroid_map(rng.normal(size=(8, 5)), np.array(SIZES), tmp_path / "c.png", groups=groups)
    png_ok(c.path)
    labelled(c)
    assert "PC 1" in c.labels[0][0]


def test_centroid_projection_keeps_the_main_axis():
    pts = np.zeros((4, 3))
    pts[:, 0] = [-3, -1, 1, 3]
    pts[:, 1] = [0.1, -0.1, 0.1, -0.1]
    coords, ratio = centroid_projection(pts)
    assert np.allclose(np.abs(coords[:, 0]), [3, 1, 1, 3], atol=0.01)
    assert ratio[0] > 0.99 and ratio.sum() == pytest.approx(1)
    coords, ratio = centroid_projection(np.ones((1, 4)))
    assert coords.shape == (1, 2) and ratio.tolist() == [0, 0]


def test_plot_curves(tmp_path):
    c = charts.plot_curves({"x": ([0, 1, 2], [3, 2, 1.5])}, tmp_path / "l.png", "loss", "step", "loss")
    png_ok(c.path)
    assert c.labels == [("step", "loss")]


def test_experiment_curves_accepts_common_shapes():
    res = {
        "curves": {
            "a": [3.0, 2.0, 1.0],
            "b": [[0, 3.0], [5, 2.5]],
            "c": {"step": [0, 1], "loss": [2.0, 1.0], "acc": [0.1, 0.2], "note": "x"},
        }
    }
    got = experiment_curves(res)
    assert set(got) == {"loss", "acc"}
    assert got["loss"][0] == "step" and set(got["loss"][1]) == {"a", "b", "c"}
    assert got["loss"][1]["b"][0].tolist() == [0, 5]
    assert experiment_curves({"curves": "nonsense"}) == {} and experiment_curves({}) == {}
    gappy = experiment_curves({"curves": {"r": {"step": [0, 5, 10], "train_loss": [None, 3.0, 2.5], "x": [None]}}})
    assert gappy["train_loss"][0] == "step" and np.isnan(gappy["train_loss"][1]["r"][1][0])
    assert "x" not in gappy
    listed = experiment_curves({"curves": [{"strategy": "s", "tokens": [1, 2], "loss": [4.0, 3.0]}]})
    assert listed["loss"][0] == "tokens" and "s" in listed["loss"][1]


# ----------------------------------------------------------------------------------------- end to end


def section_ids(text: str) -> list[str]:
    return re.findall(r'<section id="([^"]+)">', text)


def test_build_report_end_to_end(fake_run, capsys):
    path = build_report(fake_run, progress=False)
    assert path == fake_run / "report" / "report.html"
    text = path.read_text()
    assert capsys.readouterr().err == ""
    assert section_ids(text) == SECTIONS
    for sid in SECTIONS:
        assert f'href="#{sid}"' in text
    srcs = re.findall(r'<img src="([^"]+)"', text)
    assert len(srcs) == 1 + 2 + 2 + 1 + 1
    for src in srcs:
        assert "/" not in src
        png_ok(path.parent / src)
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), "report must not load anything remote"
    assert "<script>alert" not in text and "&lt;script&gt;alert" in text
    summary = text[text.index('id="summary"') : text.index('id="sizes"')]
    for needle in ("300", "hashing-16", "0.6100", "fake.jsonl", "1.5 s", "3.2 s", "plan random"):
        assert needle in summary, needle
    clusters = text[text.index('id="clusters"') : text.index('id="plans"')]
    assert clusters.count('<tr id="cluster-') == len(SIZES)
    assert "% draws<br><span class=\"plan\">random</span>" in clusters
    assert "% draws<br><span class=\"plan\">clusterclip-r2</span>" in clusters
    first_row = clusters[clusters.index('<tr id="cluster-') :].split("</tr>")[0]
    assert first_row.startswith('<tr id="cluster-0"') and "largest" in first_row
    assert cluster_words(0)[0] in clusters
    assert "smallest" in clusters[clusters.index('<tr id="cluster-7"') :].split("</tr>")[0]
    assert 'data-filter="cluster-table"' in text and 'class="sortable"' in text
    plans = text[text.index('id="plans"') : text.index('id="mixture"')]
    for needle in ("clusterclip-r2", "<b>max_repeat</b>", "<b>clusters exhausted</b>", "<b>unique</b>"):
        assert needle in plans, needle
    gt = text[text.index('id="ground-truth"') :]
    assert "NMI" in gt and "purity" in gt and 'id="notes"' not in text


def test_report_numbers_match_the_artifacts(fake_run):
    text = build_report(fake_run, progress=False).read_text()
    row7 = text[text.index('<tr id="cluster-7"') :].split("</tr>")[0]
    draws = np.load(fake_run / "plans" / "clusterclip-r2" / "cluster_draws.npy")
    share = draws[7] / draws.sum()
    assert f'data-v="{share!r}"' in row7 or f"{100 * share:.2f}" in row7
    assert f"{100 * SIZES[7] / sum(SIZES):.2f}" in row7


def test_missing_optional_pieces_do_not_crash(tmp_path):
    run = write_fake_run(tmp_path / "bare", with_groups=False, with_plans=False)
    text = build_report(run, progress=False).read_text()
    assert section_ids(text) == SECTIONS
    for sid, phrase in (("plans", "No plans"), ("mixture", "No plan"), ("ground-truth", "no ground-truth")):
        part = text[text.index(f'id="{sid}"') :].split("</section>")[0]
        assert phrase in part, sid
    assert 'id="experiment"' not in text


def test_report_of_a_corpus_only_run(tmp_path):
    run = write_fake_run(tmp_path / "r")
    for name in ("labels.npy", "scores.npy", "sizes.npy", "centroids.npy", "cluster.json", "embed.json"):
        (run / name).unlink()
    shutil.rmtree(run / "plans")
    text = build_report(run, progress=False).read_text()
    assert section_ids(text) == SECTIONS
    assert "Stages not finished" in text and "embed, cluster" in text


def test_not_a_run_directory(tmp_path):
    with pytest.raises(ClusterClipError, match="does not exist"):
        build_report(tmp_path / "nope", progress=False)


def test_mixture_window_is_the_recorded_one(fake_run):
    folder = fake_run / "plans" / "random"
    rec = json.loads((folder / "plan.json").read_text())
    rec["config"]["window"] = None
    rec["stats"]["window"] = 30
    (folder / "plan.json").write_text(json.dumps(rec))
    assert next(p for p in load_run(fake_run).plans if p.name == "random").window == 30
    del rec["stats"]["window"]
    (folder / "plan.json").write_text(json.dumps(rec))
    assert next(p for p in load_run(fake_run).plans if p.name == "random").window == 30  # 300 draws in 10 rows
    (folder / "mixture.npy").unlink()
    run = load_run(fake_run)
    plan = next(p for p in run.plans if p.name == "random")
    assert plan.mixture is None and plan.window is None and plan.repeat_hist is not None
    assert any("random" in n and "window" in n for n in run.notes)
    text = build_report(fake_run, progress=False).read_text()
    assert "mixture-random.png" not in text and "repeats-random.png" in text


def test_bad_artifacts_become_notes(fake_run):
    (fake_run / "plans" / "random" / "mixture.npy").write_bytes(b"not an array")
    (fake_run / "plans" / "broken").mkdir()
    (fake_run / "plans" / "broken" / "plan.json").write_text("{")
    text = build_report(fake_run, progress=False).read_text()
    notes = text[text.index('id="notes"') :]
    assert "mixture.npy" in notes and "broken" in notes
    assert "mixture-random.png" not in text  # left out (with the note), the plan's other charts stay
    assert "repeats-random.png" in text and "mixture-clusterclip-r2.png" in text


def test_rebuild_removes_charts_of_deleted_plans(fake_run):
    out = build_report(fake_run, progress=False).parent
    assert (out / "mixture-random.png").exists()
    (out / "mine.png").write_bytes(b"user file")
    shutil.rmtree(fake_run / "plans" / "random")
    build_report(fake_run, progress=False)
    assert not (out / "mixture-random.png").exists() and not (out / "repeats-random.png").exists()
    assert (out / "mixture-clusterclip-r2.png").exists() and (out / "mine.png").exists()


def test_out_dir_and_odd_plan_names(fake_run, tmp_path):
    shutil.rmtree(fake_run / "plans" / "random")
    labels = np.load(fake_run / "labels.npy")
    write_plan(fake_run / "plans" / "my plan <1>", np.random.default_rng(0).permutation(len(labels)), labels, "random",
               None)
    path = build_report(fake_run, out_dir=tmp_path / "elsewhere", progress=False)
    assert path == tmp_path / "elsewhere" / "report.html"
    text = path.read_text()
    assert "my plan &lt;1&gt;" in text and (path.parent / "mixture-my-plan-1.png").exists()


def test_experiment_section(tmp_path):
    run = write_fake_run(tmp_path / "r", with_experiment=True)
    text = build_report(run, progress=False).read_text()
    assert section_ids(text) == [*SECTIONS, "experiment"]
    exp = text[text.index('id="experiment"') :]
    assert "val_loss" in exp and "3.05" in exp and "<td>clusterclip</td>" in exp
    for i in range(2):
        assert f"experiment-{i}.png" in exp
        png_ok(run / "report" / f"experiment-{i}.png")
    (run / "experiment" / "results.json").write_text(json.dumps({"summary": "??"}))
    text = build_report(run, progress=False).read_text()
    assert "no summary rows or curves" in text


def test_progress_goes_to_stderr(fake_run, capsys):
    build_report(fake_run, progress=True)
    assert "report: keywords" in capsys.readouterr().err


@pytest.mark.slow
def test_16k_documents_k100_builds_fast(tmp_path):
    rng = np.random.default_rng(0)
    sizes = list(np.maximum(5, (rng.pareto(1.2, 100) * 60).astype(int)))
    sizes = [int(s * 16000 / sum(sizes)) + 1 for s in sizes]
    run = write_fake_run(tmp_path / "big", sizes=sizes, dim=64, parts=4)
    t0 = time.perf_counter()
    build_report(run, progress=False)
    assert time.perf_counter() - t0 < 60


def test_stopwords_are_sklearns_plus_contraction_stems_and_fillers():
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    words = english_stopwords()
    assert words >= ENGLISH_STOP_WORDS
    assert words >= {"don", "used", "just", "like"}
    ct = CTfidf(2)
    ct.add(["used don recipes bread", "just like bread oven", "rust borrow", "borrow checker"], np.array([0, 0, 1, 1]))
    keywords = ct.top(5)
    assert not {"used", "don", "just", "like"} & {w for row in keywords for w, _ in row}
    assert "bread" in [w for w, _ in keywords[0]]
