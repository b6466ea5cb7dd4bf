"""Tests of the ``lsa`` embedder: fit, transform, the fitted model in the run directory, and reuse."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterclip.contract.embed import EMBED_STAGE, load_embeddings
from clusterclip.embed.config import EmbedConfig
from clusterclip.embed.load import run_embedder
from clusterclip.embed.lsa import LsaEmbedder
from clusterclip.embed.registry import encode_texts
from clusterclip.embed.stage import embed_stage
from clusterclip.errors import ClusterClipError
from clusterclip.store import RunDir
from tests.test_embed import _assert_damaged_model_is_an_error, _make_run

pytest.importorskip("sklearn")

TOPICS = {
    "cooking": "garlic olive oil pasta simmer sauce onion basil oven bake flour butter salt pepper",
    "astronomy": "telescope galaxy orbit planet star nebula comet eclipse moon spectrum redshift",
    "finance": "interest rates bank inflation bond equity market dividend loan credit budget",
    "sailing": "mast rigging sail hull keel harbour anchor tide wind knot starboard crew",
}


def topic_texts(n: int, seed: int = 0) -> tuple[list[str], np.ndarray]:
    """``n`` documents, each 40 words drawn mostly from one topic's vocabulary plus shared filler words."""
    rng = np.random.default_rng(seed)
    names = sorted(TOPICS)
    filler = ["the", "report", "notes", "that", "many", "people", "often", "discuss", "this", "week"]
    labels = rng.integers(0, len(names), n)
    texts = []
    for lab in labels:
        words = TOPICS[names[lab]].split()
        texts.append(" ".join(rng.choice(words + filler, size=40)))
    return texts, labels


def small_lsa(**kw: object) -> LsaEmbedder:
    return LsaEmbedder(**{"dim": 8, "sample_size": 200, "min_df": 1, "max_df": 0.9, "progress": False, **kw})


def test_fit_encode_separates_topics_with_unit_rows() -> None:
    texts, labels = topic_texts(120)
    x = small_lsa().fit(texts).encode(texts)
    assert x.shape == (120, 8) and x.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    sims = x @ x.T
    same = labels[:, None] == labels[None, :]
    assert sims[same].mean() > sims[~same].mean() + 0.3


def test_a_document_without_a_known_word_has_zero_coverage_and_no_warning() -> None:
    """An empty or wordless document (0 of 0 words known) once made every run print numpy's RuntimeWarning."""
    import warnings

    texts, _ = topic_texts(60)
    emb = small_lsa().fit(texts)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        _, conf = emb.encode_with_confidence(["", "!!! ???", texts[0], "qqzx zzqq"], progress=False)
    assert conf[:, 0].tolist()[:2] == [0.0, 0.0] and conf[2, 0] > 0.5 and conf[3, 0] == 0.0


def test_unfitted_encode_is_an_error() -> None:
    with pytest.raises(ClusterClipError, match="not fitted"):
        small_lsa().encode(["some text"])
    with pytest.raises(ClusterClipError, match="dim"):
        LsaEmbedder(dim=0)


def test_same_seed_same_bytes_other_seed_differs(tmp_path: Path) -> None:
    texts, _ = topic_texts(150)
    folders = {}
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        small_lsa(seed=seed).fit(texts).save(tmp_path / name)
        folders[name] = {f: (tmp_path / name / f).read_bytes() for f in LsaEmbedder.MODEL_FILES}
    assert folders["a"] == folders["b"]
    assert folders["a"]["components.npy"] != folders["c"]["components.npy"]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.text(alphabet="abcdefg xyz\n", max_size=60), min_size=1, max_size=12),
       st.integers(1, 5))
def test_batch_size_and_reload_do_not_change_vectors(tmp_path_factory: pytest.TempPathFactory, extra: list[str],
                                                     batch: int) -> None:
    texts, _ = topic_texts(60)
    emb = small_lsa().fit(texts)
    folder = tmp_path_factory.mktemp("lsa")
    emb.save(folder)
    reloaded = LsaEmbedder.load(folder, batch_size=batch, progress=False)
    a, b = emb.encode(extra + texts[:5]), reloaded.encode(extra + texts[:5])
    np.testing.assert_array_equal(a, b)
    assert np.isfinite(a).all()
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)


def _lsa_run(path: Path, n: int = 40) -> tuple[RunDir, dict]:
    run = _make_run(path, topic_texts(n)[0])
    return run, embed_stage(run, EmbedConfig(embedder="lsa", shard_size=15, extra={'dim': 8, 'sample_size': 30,
                                             'min_df': 1, 'max_df': 0.9}), progress=False).to_json()


def test_stage_stores_the_fitted_model_and_run_embedder_reuses_it(tmp_path: Path) -> None:
    run, rec = _lsa_run(tmp_path / "run")
    model = [f"{LsaEmbedder.MODEL_DIR}/{f}" for f in LsaEmbedder.MODEL_FILES]
    assert set(model) <= set(rec["artifacts"]) and rec["embedder"] == "lsa"
    meta = json.loads(run.path(model[0]).read_text())
    assert meta["config"] == rec["config"]["embedder"]
    emb = run_embedder(run)
    texts = topic_texts(40)[0]
    np.testing.assert_array_equal(emb.encode(texts).astype(np.float16).astype(np.float32), load_embeddings(run))
    other, _ = _lsa_run(tmp_path / "other")
    for rel in [*model, *(s["file"] for s in rec["shards"])]:
        assert run.path(rel).read_bytes() == other.path(rel).read_bytes(), rel


def test_missing_or_edited_model_is_a_clear_error(tmp_path: Path) -> None:
    run, _ = _lsa_run(tmp_path / "run")
    comps = run.path(f"{LsaEmbedder.MODEL_DIR}/components.npy")
    saved = comps.read_bytes()
    arr = np.load(comps)
    arr[0, 0] += 1.0
    np.save(comps, arr)
    _assert_damaged_model_is_an_error(run, LsaEmbedder, comps, saved)


def test_resume_reuses_the_model_and_ends_byte_identical(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, ref_rec = _lsa_run(tmp_path / "ref")
    run, _ = _lsa_run(tmp_path / "run")
    run.path("embeddings/shard-00002.npy").unlink()
    run.invalidate(EMBED_STAGE)
    monkeypatch.setattr(LsaEmbedder, "fit", lambda *a: pytest.fail("refitted instead of reusing the model"))
    rec = embed_stage(run, EmbedConfig(embedder="lsa", shard_size=15, extra={'dim': 8, 'sample_size': 30,
                                       'min_df': 1, 'max_df': 0.9}), progress=False).to_json()
    assert {k: v["sha256"] for k, v in rec["artifacts"].items()} == \
        {k: v["sha256"] for k, v in ref_rec["artifacts"].items()}


def test_switching_embedder_removes_the_model(tmp_path: Path) -> None:
    run, _ = _lsa_run(tmp_path / "run")
    rec = embed_stage(run, EmbedConfig(embedder="hashing", shard_size=15, extra={'dim': 8}), progress=False).to_json()
    assert not run.path(LsaEmbedder.MODEL_DIR).exists()
    assert not any(k.startswith(LsaEmbedder.MODEL_DIR) for k in rec["artifacts"])
    assert run_embedder(run).config() == rec["config"]["embedder"]


def test_encode_texts_fits_lsa_on_the_texts_like_the_stage() -> None:
    texts, _ = topic_texts(80)
    opts = {"dim": 8, "sample_size": 50, "min_df": 1, "max_df": 0.9}
    x = encode_texts("lsa", texts, seed=2, progress=False, **opts)
    np.testing.assert_array_equal(x, encode_texts("lsa", texts, seed=2, progress=False, **opts))
    pick = np.sort(np.random.default_rng(2).choice(80, size=50, replace=False))
    expected = LsaEmbedder(seed=2, progress=False, **opts).fit([texts[i] for i in pick]).encode(texts)
    np.testing.assert_array_equal(x, expected)
    assert encode_texts("hashing", texts[:3], progress=False).shape == (3, 256)
