"""Tests of the ``chargram`` embedder: its n-grams against scikit-learn's ``char_wb`` analyzer, the compiled
projection against a direct NumPy computation of the sublinear TF-IDF row, text outside the fitted n-grams,
determinism, the saved model and the embed stage."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("numba")
sklearn_text = pytest.importorskip("sklearn.feature_extraction.text")

from clusterclip.contract.embed import load_embeddings
from clusterclip.embed import ngram_kernels as kernels
from clusterclip.embed.chargram import HASH_SEED, CharGramEmbedder, code_points, quantize_rows
from clusterclip.embed.config import EmbedConfig
from clusterclip.embed.load import run_embedder
from clusterclip.embed.registry import DEFAULT_EMBEDDER, EMBEDDERS
from clusterclip.embed.stage import embed_stage
from clusterclip.errors import ClusterClipError
from tests.test_embed import _make_run

CORPUS = ["The cluster planner samples clusters evenly, capping repeats.",
          "def plan(clusters): return sorted(clusters, key=len)  # plan()",
          "Кластеры документов: выборка равномерна, повторы ограничены.",
          "spherical k-means clusters the embeddings; k-means++ seeds it",
          "the planner's order: clusters, then documents, then repeats",
          "import numpy as np; np.sort(x, kind='stable')\n\tx = a  b\u3000c",
          "文書のクラスタリング 균형 잡힌 샘플링 a I"]
UNSEEN = ["ყველა სიტყვა ახალია", "", "   \n "]


def small(**kw: object) -> CharGramEmbedder:
    return CharGramEmbedder(**{"dim": 8, "min_df": 1, "progress": False, **kw})


def sklearn_counts(text: str) -> Counter:
    analyzer = sklearn_text.TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5)).build_analyzer()
    return Counter(analyzer(text))


def test_registered_opt_in_and_lsa_stays_the_default() -> None:
    assert EMBEDDERS["chargram"] is CharGramEmbedder
    assert DEFAULT_EMBEDDER == "lsa"
    with pytest.raises(ClusterClipError, match="max_ngrams"):
        CharGramEmbedder(max_ngrams=0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from("ab cé\tд文\n.  x"), max_size=40), min_size=1, max_size=5))
def test_ngram_counts_are_scikit_learns_char_wb(texts: list[str]) -> None:
    cps, bounds = code_points(texts)
    indptr, _, counts, _, _ = kernels.list_ngrams(cps, bounds, 3, 5, HASH_SEED, *kernels.new_table())
    for d, text in enumerate(texts):
        expected = sklearn_counts(text)
        got = counts[indptr[d]:indptr[d + 1]]
        assert sorted(got.tolist()) == sorted(expected.values())


def test_distinct_ngrams_get_distinct_tags_and_the_same_ngram_the_same_tag() -> None:
    cps, bounds = code_points(CORPUS)
    _, tags, _, _, _ = kernels.list_ngrams(cps, bounds, 3, 5, HASH_SEED, *kernels.new_table())
    distinct = set().union(*(sklearn_counts(t) for t in CORPUS))
    assert len(np.unique(tags)) == len(distinct)
    assert not np.any(tags & kernels.LOW)


def test_a_long_document_grows_the_count_table() -> None:
    text = " ".join(f"w{i:06d}" for i in range(40_000))
    cps, bounds = code_points([text, "short one"])
    indptr, _, counts, table, _ = kernels.list_ngrams(cps, bounds, 3, 5, HASH_SEED, *kernels.new_table())
    assert len(table) > 1 << 16 and not table.any()
    assert int(counts[:indptr[1]].sum()) == sum(sklearn_counts(text).values())


def direct(emb: CharGramEmbedder, text: str) -> tuple[np.ndarray, float]:
    """The document's sublinear TF-IDF row over the fitted n-grams times the dequantized components, in NumPy."""
    cps, bounds = code_points([text])
    _, tags, counts, _, _ = kernels.list_ngrams(cps, bounds, 3, 5, HASH_SEED, *kernels.new_table())
    where = {int(t): r for r, t in enumerate(emb.tags)}
    rows = np.array([where.get(int(t), -1) for t in tags], dtype=np.int64)
    hit = rows >= 0
    w = (1.0 + np.log(counts[hit].astype(np.float64))) * emb.idf[rows[hit]]
    comps = emb.components.astype(np.float64) * emb.scale[:, None]
    vec = (w[:, None] * comps[rows[hit]]).sum(axis=0) if hit.any() else np.zeros(emb.dim)
    norm = np.sqrt((w ** 2).sum())
    return (vec / norm if norm > 0 else vec), float(counts[hit].sum() / max(1, counts.sum()))


def test_the_projection_is_the_direct_sublinear_tfidf_projection() -> None:
    emb = small().fit(CORPUS)
    vecs, conf = emb.encode_with_confidence(CORPUS + UNSEEN + ["clusters, clusters, clusters of planners"])
    for i, text in enumerate(CORPUS + UNSEEN + ["clusters, clusters, clusters of planners"]):
        expected, coverage = direct(emb, text)
        assert conf[i, 1] == pytest.approx(np.linalg.norm(expected), abs=1e-5)
        assert conf[i, 0] == pytest.approx(coverage, abs=1e-6)
        if np.linalg.norm(expected) > 0:
            np.testing.assert_allclose(vecs[i], expected / np.linalg.norm(expected), atol=1e-5)


def test_the_log_applies_per_ngram_not_per_word() -> None:
    emb = small().fit(CORPUS)
    once, twice = emb.encode_with_confidence(["cluster plan", "cluster cluster plan"])[0]
    assert not np.allclose(once, twice)
    expected, _ = direct(emb, "cluster cluster plan")
    np.testing.assert_allclose(twice, expected / np.linalg.norm(expected), atol=1e-5)


def test_text_outside_the_fitted_ngrams() -> None:
    emb = small().fit(CORPUS)
    vecs, conf = emb.encode_with_confidence(UNSEEN)
    assert np.all(conf[:, 0] == 0) and np.all(conf[:, 1] == 0)
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-6)
    partly = emb.encode_with_confidence(["ყველა clusters"])[1]
    assert 0 < partly[0, 0] < 1


def test_quantized_rows_are_within_half_a_step() -> None:
    x = np.random.default_rng(0).standard_normal((50, 16)).astype(np.float32)
    x[3] = 0
    q, scale = quantize_rows(x)
    assert q.dtype == np.int8 and scale[3] == 0
    assert np.all(np.abs(q * scale[:, None] - x) <= scale[:, None] / 2 + 1e-7)


def test_max_ngrams_keeps_the_most_frequent() -> None:
    emb = small(max_ngrams=10).fit(CORPUS)
    full = small().fit(CORPUS)
    assert len(emb.tags) == 10
    cps, bounds = code_points(CORPUS)
    _, tags, _, _, _ = kernels.list_ngrams(cps, bounds, 3, 5, HASH_SEED, *kernels.new_table())
    df = Counter(tags.tolist())
    assert min(df[int(t)] for t in emb.tags) >= sorted(df.values(), reverse=True)[9]
    assert set(emb.tags.tolist()) <= set(full.tags.tolist())


def test_fit_and_encode_are_deterministic_and_the_model_round_trips(tmp_path: Path) -> None:
    a, b = small(seed=3).fit(CORPUS), small(seed=3).fit(CORPUS)
    va, vb = a.encode(CORPUS + UNSEEN), b.encode(CORPUS + UNSEEN)
    assert va.tobytes() == vb.tobytes()
    a.save(tmp_path / "m")
    loaded = CharGramEmbedder.load(tmp_path / "m", progress=False)
    assert loaded.config() == a.config()
    assert loaded.encode(CORPUS + UNSEEN).tobytes() == va.tobytes()
    np.save(tmp_path / "m" / "scale.npy", a.scale[:-1])
    with pytest.raises(ClusterClipError, match="do not fit together"):
        CharGramEmbedder.load(tmp_path / "m", progress=False)


def test_the_embed_stage_stores_the_model_and_run_embedder_gives_the_same_vectors(tmp_path: Path) -> None:
    texts = [f"{t} {i}" for i in range(6) for t in CORPUS]
    run = _make_run(tmp_path / "run", texts)
    extra = {"dim": 8, "sample_size": 30, "min_df": 1}
    rec = embed_stage(run, EmbedConfig(embedder="chargram", shard_size=15, extra=extra), progress=False)
    rels = [f"{CharGramEmbedder.MODEL_DIR}/{f}" for f in CharGramEmbedder.MODEL_FILES]
    assert rec.embedder == "chargram" and set(rels) <= set(rec.artifacts)
    emb = run_embedder(run)
    assert isinstance(emb, CharGramEmbedder) and rec.embedder_config == emb.config()
    np.testing.assert_array_equal(load_embeddings(run, np.float16), emb.encode(texts).astype(np.float16))
