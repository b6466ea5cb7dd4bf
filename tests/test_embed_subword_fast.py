"""Tests of the ``subword-fast`` embedder, the default: its identity, the vocabulary it counts, what it gives text
outside the fitted vocabulary, determinism and the saved model, and the cheaper SVD against the exact one."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sklearn")

from clusterclip.contract.embed import load_embeddings
from clusterclip.embed.config import EmbedConfig
from clusterclip.embed.load import run_embedder
from clusterclip.embed.lsa import LsaEmbedder
from clusterclip.embed.registry import DEFAULT_EMBEDDER, EMBEDDERS, encode_texts, get_embedder
from clusterclip.embed.stage import embed_stage
from clusterclip.embed.subword import SubwordEmbedder
from clusterclip.embed.subword_fast import FastSubwordEmbedder
from clusterclip.embed.subword_tokens import CodePoints
from clusterclip.errors import ClusterClipError
from tests.test_embed import _assert_damaged_model_is_an_error, _make_run
from tests.test_embed_subword import BOX, GEORGIAN, MIXED, WAVES, cosine, docs

EXACT = {"svd_docs": 10**6, "ngram_min_df": 1, "n_iter": 5, "range_bits": 10}
"""Options that make the fit ``subword``'s: every document and word in the SVD, no folding, 5 iterations."""


def small(**kw: object) -> FastSubwordEmbedder:
    return FastSubwordEmbedder(**{"dim": 16, "bits": 10, "range_bits": 8, "min_df": 1, "max_df": 0.9,
                                  "progress": False, **kw})


def test_registered_opt_in_with_its_measured_options() -> None:
    assert DEFAULT_EMBEDDER == "lsa" == EmbedConfig().embedder and "subword-fast" in EMBEDDERS
    emb = get_embedder("subword-fast", seed=3, progress=False)
    assert type(emb) is FastSubwordEmbedder and emb.MODEL_DIR == "embeddings/subword-fast"
    config = emb.config()
    assert {k: config[k] for k in ("name", "dim", "seed", "sample_size", "bits", "ngram_range", "char_weight",
                                   "svd", "svd_docs", "ngram_min_df", "range_bits", "max_features", "recipe")} == {
        "name": "subword-fast", "dim": 256, "seed": 3, "sample_size": 20_000, "bits": 16, "ngram_range": [3, 5],
        "char_weight": 0.15, "svd": "randomized, n_iter 2", "svd_docs": 8000, "ngram_min_df": 2, "range_bits": 12,
        "max_features": 32_768, "recipe": 1}
    with pytest.raises(ClusterClipError, match="svd_docs"):
        FastSubwordEmbedder(svd_docs=1)


def test_the_counted_vocabulary_and_idf_are_lsas() -> None:
    texts, _ = docs(200)
    texts = [*texts, *MIXED]
    fast = small(min_df=2, max_df=0.5).fit(texts)
    lsa = LsaEmbedder(dim=16, min_df=2, max_df=0.5, progress=False).fit(texts)
    assert fast.vocabulary == lsa.vocabulary
    np.testing.assert_allclose(fast.idf_words, lsa.idf, rtol=1e-6)
    few = small(min_df=1, max_features=10).fit(texts)
    counts = {w: sum(t.lower().split().count(w) for t in texts) for w in lsa.vocabulary}
    chosen = [counts[w] for w in few.vocabulary]
    assert len(chosen) == 10 and min(chosen) >= max(c for w, c in counts.items() if w not in few.vocabulary)


def test_words_outside_the_vocabulary_still_count() -> None:
    texts, labels = docs(300, languages=("english", "russian"))
    emb = small().fit(texts)
    english = emb.encode([t for t, lab in zip(texts, labels, strict=True) if lab == 0][:20]).mean(axis=0)
    russian = emb.encode([t for t, lab in zip(texts, labels, strict=True) if lab == 1][:20]).mean(axis=0)
    unseen = ["garlicky pastas simmering sauces onions baked flours peppered recipes kitchens",
              "города улицами реками домами книгами школами работами письмами окнами погодой"]
    x, conf = emb.encode_with_confidence(unseen)
    assert (conf[:, 0] == 0).all(), "none of their words is in the vocabulary"
    assert cosine(x[0], english) > cosine(x[0], russian) + 0.2
    assert cosine(x[1], russian) > cosine(x[1], english) + 0.2
    lsa = LsaEmbedder(dim=16, min_df=1, max_df=0.9, progress=False).fit(texts)
    y = lsa.encode(unseen)
    assert cosine(y[0], y[1]) == pytest.approx(1.0, abs=1e-6), "lsa gives both the constant vector"


def test_unseen_scripts_and_symbol_art_get_their_own_unit_vectors() -> None:
    emb = small().fit(docs(150, languages=("english", "german"))[0])
    x, conf = emb.encode_with_confidence([GEORGIAN, "ქალაქი სახლი წიგნი სკოლა დრო", BOX, WAVES, BOX, ""])
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    assert (conf[:, 0] == 0).all() and (conf[:5, 1] > 0).all() and conf[5, 1] == 0
    constant = np.full(16, 1 / np.sqrt(16), np.float32)
    assert all(cosine(v, constant) < 0.99 for v in x[:5]) and cosine(x[5], constant) == pytest.approx(1.0)
    assert cosine(x[2], x[4]) == pytest.approx(1.0, abs=1e-6) and cosine(x[2], x[3]) < 0.8


def test_same_seed_same_bytes_reload_and_batch_size_change_nothing(tmp_path: Path) -> None:
    texts, _ = docs(150)
    probe = [*texts[:20], *MIXED, GEORGIAN, BOX]
    saved, vectors = {}, {}
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        emb = small(seed=seed, svd_docs=100).fit(texts)
        emb.save(tmp_path / name)
        saved[name] = {f: (tmp_path / name / f).read_bytes() for f in FastSubwordEmbedder.MODEL_FILES}
        vectors[name] = emb.encode(probe)
    assert saved["a"] == saved["b"] and saved["a"]["components_ngrams.npy"] != saved["c"]["components_ngrams.npy"]
    assert vectors["a"].tobytes() == vectors["b"].tobytes()
    reloaded = FastSubwordEmbedder.load(tmp_path / "a", batch_size=7, progress=False)
    assert reloaded.config() == small(seed=3, svd_docs=100).config()
    for emb in (reloaded, pickle.loads(pickle.dumps(reloaded))):  # as Ray actors receive it
        np.testing.assert_array_equal(emb.encode(probe), vectors["a"])


def test_the_cheaper_svd_finds_what_the_exact_one_finds() -> None:
    texts = docs(400)[0]
    probe, probe_labels = docs(80, seed=1)
    fast = small(dim=8, svd_docs=200).fit(texts).encode(probe)
    exact = small(dim=8, **EXACT).fit(texts).encode(probe)
    reference = SubwordEmbedder(dim=8, bits=10, min_df=1, max_df=0.9, progress=False).fit(texts).encode(probe)
    sims_fast, sims_exact, sims_ref = fast @ fast.T, exact @ exact.T, reference @ reference.T
    assert np.corrcoef(sims_exact.ravel(), sims_ref.ravel())[0, 1] > 0.97  # one normalisation instead of two
    assert np.corrcoef(sims_fast.ravel(), sims_exact.ravel())[0, 1] > 0.97
    same = probe_labels[:, None] == probe_labels[None, :]
    assert sims_fast[same].mean() > sims_fast[~same].mean() + 0.5


def test_a_sample_without_words_fits_and_encodes() -> None:
    emb = small().fit(["", "!!! ???", "+-+-+"])
    x = emb.encode(["", "+-+-+", "some words"])
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    assert emb.vocabulary == []


def test_the_stage_stores_the_model_and_encode_texts_fits_it(tmp_path: Path) -> None:
    texts = docs(40)[0]
    run = _make_run(tmp_path / "run", texts)
    extra = {"dim": 8, "bits": 10, "range_bits": 8, "sample_size": 30, "min_df": 1, "max_df": 0.9}
    rec = embed_stage(run, EmbedConfig(embedder="subword-fast", shard_size=15, extra=extra), progress=False)
    rels = [f"{FastSubwordEmbedder.MODEL_DIR}/{f}" for f in FastSubwordEmbedder.MODEL_FILES]
    assert rec.embedder == "subword-fast" and set(rels) <= set(rec.artifacts)
    assert rec.embedder_config == run_embedder(run).config()
    np.testing.assert_array_equal(load_embeddings(run, np.float16), run_embedder(run).encode(texts).astype(np.float16))
    comps = run.path(rels[-1])
    saved = comps.read_bytes()
    arr = np.load(comps)
    arr[0, 0] += 1
    np.save(comps, arr)
    _assert_damaged_model_is_an_error(run, FastSubwordEmbedder, comps, saved)
    x = encode_texts("subword-fast", texts, **extra, progress=False)
    assert x.shape == (40, 8)


def test_kana_and_han_make_bigram_words_and_a_lone_one_its_own() -> None:
    cp = CodePoints("日本語テキスト abc 漢 x")
    a, b = cp.runs(cjk=True)
    assert [cp.cps[i:j].tobytes().decode("utf-32-le") for i, j in zip(a, b, strict=True)] == [
        "日本", "本語", "語テ", "テキ", "キス", "スト", "abc", "漢"]
    a, b = cp.runs()
    assert [cp.cps[i:j].tobytes().decode("utf-32-le") for i, j in zip(a, b, strict=True)] == ["日本語テキスト", "abc"]


def test_cjk_phrases_that_share_words_share_vocabulary() -> None:
    """Without spaces a Japanese sentence is one word the vocabulary never sees twice; as bigrams its words are
    counted, so two sentences about one thing are near and one about another is not."""
    texts = ["東京の天気は晴れです", "東京の天気は雨です", "大阪の天気は晴れです", "猫が魚を食べました",
             "犬が魚を食べました", "猫が肉を食べました"] * 4
    on = small().fit(texts)
    assert {"天気", "食べ"} <= set(on.vocabulary or [])
    off = small(cjk_bigrams=False).fit(texts)
    assert "天気" not in set(off.vocabulary or [])
    v = on.encode(["東京の天気は曇りです", "東京の天気は晴れです", "猫が魚を食べました"])
    assert cosine(v[0], v[1]) > cosine(v[0], v[2]) + 0.3
