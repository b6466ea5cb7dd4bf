"""Tests of the ``charwb`` embedder: its identity, the per-word fold against a direct computation of the n-gram
TF-IDF (an independent hash and tokenizer in Python), scikit-learn's ``char_wb`` n-grams, text outside the fitted
n-grams, determinism and the saved model."""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sklearn")

from clusterclip.contract.embed import load_embeddings
from clusterclip.embed.charwb import CharWbEmbedder, HashIndex
from clusterclip.embed.config import EmbedConfig
from clusterclip.embed.load import run_embedder
from clusterclip.embed.registry import DEFAULT_EMBEDDER, EMBEDDERS, get_embedder
from clusterclip.embed.stage import embed_stage
from clusterclip.embed.subword_tokens import KeyIndex
from clusterclip.errors import ClusterClipError
from tests.test_embed import _make_run
from tests.test_embed_subword import docs

M64 = (1 << 64) - 1
P = 1099511628211
CORPUS = ["The cluster planner samples clusters evenly, capping repeats.",
          "def plan(clusters): return sorted(clusters, key=len)  # plan()",
          "Кластеры документов: выборка равномерна, повторы ограничены.",
          "spherical k-means clusters the embeddings; k-means++ seeds it",
          "the planner's order: clusters, then documents, then repeats",
          "import numpy as np; np.sort(x, kind='stable')"]
UNSEEN = ["clusterings of planners' documents, repeated (again)", "plan(np) => sorted!!", "",
          "ყველა სიტყვა ახალია"]


def small(**kw: object) -> CharWbEmbedder:
    return CharWbEmbedder(**{"dim": 8, "min_df": 1, "progress": False, **kw})


def _fmix(h: int) -> int:
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & M64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & M64
    return h ^ (h >> 33)


def gram_key(gram: str, seed: int) -> int:
    """The key of a marked n-gram (begin mark chr(2), end mark chr(3)) as the embedder defines it, in Python ints."""
    h = 0
    for ch in gram:
        h = (h * P + ord(ch)) & M64
    n = len(gram)
    h = (h + 0x632BE59BD9B4E019 * (n + 1) + 0x94D049BB133111EB * (seed + 1)) & M64
    key = _fmix(h)
    return key - (1 << 64) if key >> 63 else key


def direct(emb: CharWbEmbedder, texts: list[str]) -> np.ndarray:
    """Unit vectors of ``texts`` computed document by document: Python tokens and n-grams, the TF-IDF row over
    the fitted n-grams, L2-normalised, times the components."""
    column = {int(k): i for i, k in enumerate(emb.ngram_keys)}
    pattern = r"\w+|[^\w\s]+" if emb.split == "pieces" else r"\S+"
    comps = emb.components.astype(np.float64)
    out = np.zeros((len(texts), emb.dim))
    for d, text in enumerate(texts):
        x = np.zeros(len(column))
        for word, count in Counter(re.findall(pattern, text.lower())).items():
            weight = 1 + math.log(count) if emb.tf == "log" else count
            marked = f"\x02{word}\x03"
            for n in range(emb.ngram_range[0], emb.ngram_range[1] + 1):
                for a in range(len(marked) - n + 1):
                    col = column.get(gram_key(marked[a:a + n], emb.seed))
                    if col is not None:
                        x[col] += weight * emb.idf[col]
        if np.linalg.norm(x) > 0:
            out[d] = comps @ (x / np.linalg.norm(x))
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return np.where(norms > 0, out / np.where(norms > 0, norms, 1), 1 / math.sqrt(emb.dim))


def test_registered_opt_in_and_lsa_stays_the_default() -> None:
    assert DEFAULT_EMBEDDER == "lsa" and "charwb" in EMBEDDERS
    emb = get_embedder("charwb", seed=2, progress=False)
    assert type(emb) is CharWbEmbedder and emb.MODEL_DIR == "embeddings/charwb"
    config = emb.config()
    assert {k: config[k] for k in ("name", "dim", "seed", "sample_size", "min_df", "max_ngrams", "ngram_range",
                                   "tf", "split", "n_iter", "cache_words", "component_dtype", "recipe")} == {
        "name": "charwb", "dim": 256, "seed": 2, "sample_size": 6000, "min_df": 2, "max_ngrams": 131_072,
        "ngram_range": [3, 5], "tf": "log", "split": "chunks", "n_iter": 5, "cache_words": 32_768,
        "component_dtype": "float16", "recipe": 1}
    with pytest.raises(ClusterClipError, match="split chunks or pieces"):
        CharWbEmbedder(split="words")
    with pytest.raises(ClusterClipError, match="not fitted"):
        small().encode(["x"])


@pytest.mark.parametrize(("split", "tf"), [("pieces", "log"), ("chunks", "raw"), ("chunks", "log")])
def test_the_per_word_fold_is_the_direct_tfidf_projection(split: str, tf: str) -> None:
    """Fitted and unseen words, the cache on and off: each document's vector is its n-gram TF-IDF row's."""
    emb = small(split=split, tf=tf, component_dtype="float32").fit(CORPUS)
    texts = [*CORPUS, *UNSEEN, "the the the clusters clusters plan"]
    want = direct(emb, texts)
    np.testing.assert_allclose(emb.encode(texts), want, atol=2e-5)
    assert 0 < len(emb.words) < len({w for t in CORPUS for w in t.lower().split()})
    uncached = small(split=split, tf=tf, component_dtype="float32", cache_words=0).fit(CORPUS)
    assert uncached.words == []
    np.testing.assert_allclose(uncached.encode(texts), want, atol=2e-5)


def test_chunks_count_scikit_learns_char_wb_ngrams() -> None:
    from sklearn.feature_extraction.text import TfidfVectorizer

    texts, _ = docs(40)
    texts = [*texts, *CORPUS]
    emb = small(split="chunks", tf="raw").fit(texts)
    ref = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), min_df=1).fit(texts)
    assert len(emb.ngram_keys) == len(ref.vocabulary_)
    np.testing.assert_allclose(np.sort(emb.idf), np.sort(ref.idf_.astype(np.float32)), rtol=1e-6)
    two = small(split="chunks", tf="raw", min_df=2, max_ngrams=50).fit(texts)
    assert len(two.ngram_keys) == 50 and two.idf.max() <= np.sort(ref.idf_)[49] + 1e-6


def test_text_outside_the_fitted_ngrams() -> None:
    emb = small(dim=16).fit(CORPUS * 2)
    vecs, conf = emb.encode_with_confidence(["clusterings planners", "clusters planner", "ყველა სიტყვა ახალია",
                                             "", "() ()"])
    assert 0 < conf[0, 0] < 1 and conf[1, 0] == 1.0
    assert float(vecs[0] @ vecs[1]) > 0.8
    np.testing.assert_allclose(vecs[2:4], np.full((2, 16), 0.25, dtype=np.float32))
    assert conf[2, 0] == 0.0 and conf[2, 1] == 0.0 and conf[3, 0] == 0.0
    assert conf[4, 0] > 0 and np.isfinite(vecs).all()


def test_fit_and_encode_are_deterministic_and_the_model_round_trips(tmp_path: Path) -> None:
    texts, _ = docs(120)
    a, b = small().fit(texts), small().fit(texts)
    assert np.array_equal(a.ngram_keys, b.ngram_keys) and np.array_equal(a.components, b.components)
    assert np.array_equal(a.encode(texts[:30] + UNSEEN), b.encode(texts[:30] + UNSEEN))
    other = small(seed=1).fit(texts)
    assert not np.array_equal(other.ngram_keys, a.ngram_keys)
    paths = a.save(tmp_path / "m")
    assert [p.name for p in paths] == list(CharWbEmbedder.MODEL_FILES)
    back = CharWbEmbedder.load(tmp_path / "m", progress=False)
    assert back.config() == a.config()
    assert np.array_equal(back.encode(texts[:30] + UNSEEN), a.encode(texts[:30] + UNSEEN))
    np.save(tmp_path / "m" / "idf.npy", a.idf[:-1])
    with pytest.raises(ClusterClipError, match="do not fit together"):
        CharWbEmbedder.load(tmp_path / "m")


def test_hash_index_finds_what_a_sorted_index_finds() -> None:
    rng = np.random.default_rng(4)
    keys = np.unique(rng.integers(-(1 << 63), (1 << 63) - 1, 5000, dtype=np.int64))
    probe = np.concatenate([keys[::3], rng.integers(-(1 << 63), (1 << 63) - 1, 2000, dtype=np.int64),
                            keys & 0xFFFF])
    assert np.array_equal(HashIndex(keys).lookup(probe), KeyIndex(keys).lookup(probe))
    assert np.array_equal(HashIndex(keys[:0]).lookup(probe), np.full(len(probe), -1))


def test_the_embed_stage_stores_the_model_and_run_embedder_gives_the_same_vectors(tmp_path: Path) -> None:
    texts = docs(40)[0]
    run = _make_run(tmp_path / "run", texts)
    extra = {"dim": 8, "sample_size": 30, "min_df": 1}
    rec = embed_stage(run, EmbedConfig(embedder="charwb", shard_size=15, extra=extra), progress=False)
    rels = [f"{CharWbEmbedder.MODEL_DIR}/{f}" for f in CharWbEmbedder.MODEL_FILES]
    assert rec.embedder == "charwb" and set(rels) <= set(rec.artifacts)
    assert rec.embedder_config == run_embedder(run).config()
    np.testing.assert_array_equal(load_embeddings(run, np.float16), run_embedder(run).encode(texts).astype(np.float16))
