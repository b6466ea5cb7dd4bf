"""Tests of the ``subword`` embedder: its tokenizer, determinism, the saved model, what it gives text outside the
fitted vocabulary, and the command line end to end (``run``, ``add``, ``status``)."""

from __future__ import annotations

import json
import pickle
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import sparse

pytest.importorskip("sklearn")

from clusterclip.cli.main import main
from clusterclip.contract.corpus import read_column
from clusterclip.contract.embed import EMBED_STAGE, load_confidence, load_embeddings
from clusterclip.embed.config import EmbedConfig
from clusterclip.embed.load import run_embedder
from clusterclip.embed.lsa import LsaEmbedder
from clusterclip.embed.registry import DEFAULT_EMBEDDER, EMBEDDERS, get_embedder
from clusterclip.embed.stage import embed_stage
from clusterclip.embed.subword import SubwordEmbedder
from clusterclip.embed.subword_tokens import WORD_PATTERN, TokenBatch, row_norms
from clusterclip.errors import ClusterClipError
from clusterclip.store import RunDir
from tests.test_embed import _assert_damaged_model_is_an_error, _make_run

LANGUAGES = {
    "english": "garlic olive pasta simmer sauce onion basil oven bake flour butter salt pepper recipe kitchen",
    "german": "Straße Brücke Fahrrad Bahnhof Zeitung Frühstück Wohnung Gemüse schön grün fährt läuft Mädchen",
    "russian": "город улица река дом книга школа работа время жизнь письмо окно погода красивый быстро",
    "code": "def return import self lambda yield numpy array dtype kwargs isinstance len_of my_var __init__",
}
GEORGIAN = "ქალაქი ქუჩა მდინარე სახლი წიგნი სკოლა სამუშაო დრო ცხოვრება წერილი ფანჯარა ამინდი ლამაზი"
BOX = "+-----+-----+\n|     |     |\n+-----+-----+\n|     |     |\n+-----+-----+"
WAVES = "~~~~ ^^^^ ~~~~ ^^^^\n~~~~ ^^^^ ~~~~ ^^^^\n<<<< >>>> <<<< >>>>\n==== ==== ==== ===="
MIXED = ["Größe STRASSE straße ǅemal İstanbul", "ab_cd 12 x y2 Ωμέγα ωμέγα", "日本語のテキスト ภาษาไทย",
         "x\u0301yz naïve cafe\u0301 ﬁnance ＡＢＣ１２", "foo-bar foo.bar foo_bar __init__ 3.14 a1b2c3",
         "", "   \n\t ", "Привет, мир! Как дела? Ёлка", "\u00a0nbsp\u2028line\u3000ideographic"]


def docs(n: int, seed: int = 0, languages: tuple[str, ...] = tuple(LANGUAGES)) -> tuple[list[str], np.ndarray]:
    """``n`` documents of 30 words, each drawn from one language's (or code's) word list."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(languages), n)
    return [" ".join(rng.choice(LANGUAGES[languages[lab]].split(), size=30)) for lab in labels], labels


def small(**kw: object) -> SubwordEmbedder:
    return SubwordEmbedder(**{"dim": 16, "bits": 10, "min_df": 1, "max_df": 0.9, "progress": False, **kw})


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def batch_counts(texts: list[str]) -> list[Counter]:
    """Each document's words and counts as :class:`TokenBatch` finds them."""
    batch = TokenBatch(texts)
    cps = batch.cp.cps
    words = [cps[a:b].tobytes().decode("utf-32-le") for a, b in zip(batch.starts, batch.ends, strict=True)]
    rows = batch.counts.tocsr()
    return [Counter({words[j]: int(c) for j, c in zip(rows[i].indices, rows[i].data, strict=True)})
            for i in range(len(texts))]


def test_the_tokenizer_finds_what_the_regular_expression_finds() -> None:
    expected = [Counter(re.findall(WORD_PATTERN, t.lower())) for t in MIXED]
    assert batch_counts(MIXED) == expected
    assert expected[0]["straße"] == 1 and expected[4]["__init__"] == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=80), min_size=1, max_size=6))
def test_the_tokenizer_equals_the_regular_expression_on_any_text(texts: list[str]) -> None:
    assert batch_counts(texts) == [Counter(re.findall(WORD_PATTERN, t.lower())) for t in texts]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.sampled_from([0.0, 0.0, 1.5, -2.0, 3.0]), min_size=4, max_size=4), min_size=1,
                max_size=8))
def test_row_norms_equal_dense_norms_with_empty_rows_anywhere(rows: list[list[float]]) -> None:
    dense = np.array(rows, dtype=np.float32)
    np.testing.assert_allclose(row_norms(sparse.csr_matrix(dense)), np.linalg.norm(dense, axis=1), rtol=1e-6)


def test_registered_opt_in_with_the_measured_default() -> None:
    assert list(EMBEDDERS)[:3] == ["lsa", "subword", "subword-fast"] and DEFAULT_EMBEDDER == "lsa"
    emb = get_embedder("subword", seed=4, progress=False)
    assert isinstance(emb, SubwordEmbedder) and emb.char_weight == 0.15 and emb.seed == 4 and emb.dim == 256
    with pytest.raises(ClusterClipError, match="not fitted"):
        small().encode(["some text"])
    with pytest.raises(ClusterClipError, match="char_weight"):
        SubwordEmbedder(char_weight=1.5)
    with pytest.raises(ClusterClipError, match="nothing to save"):
        small().save("unused")


def test_same_seed_same_bytes_other_seed_differs_and_reload_is_identical(tmp_path: Path) -> None:
    texts, _ = docs(120)
    probe = [*texts[:20], GEORGIAN, BOX, ""]
    saved, vectors = {}, {}
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        emb = small(seed=seed).fit(texts)
        emb.save(tmp_path / name)
        saved[name] = {f: (tmp_path / name / f).read_bytes() for f in SubwordEmbedder.MODEL_FILES}
        vectors[name] = emb.encode_with_confidence(probe)
    assert saved["a"] == saved["b"]
    assert saved["a"]["components_ngrams.npy"] != saved["c"]["components_ngrams.npy"]
    for got, want in zip(vectors["a"], vectors["b"], strict=True):
        assert got.tobytes() == want.tobytes()
    reloaded = SubwordEmbedder.load(tmp_path / "a", batch_size=5, progress=False)
    assert reloaded.config() == small(seed=3).config()
    shipped = pickle.loads(pickle.dumps(reloaded))  # as Ray actors receive it
    for emb in (reloaded, shipped):
        for got, want in zip(emb.encode_with_confidence(probe), vectors["a"], strict=True):
            np.testing.assert_array_equal(got, want)


def test_the_stage_stores_the_model_and_a_damaged_one_is_a_clear_error(tmp_path: Path) -> None:
    run = _make_run(tmp_path / "run", docs(40)[0])
    extra = {"dim": 8, "bits": 10, "sample_size": 30, "min_df": 1, "max_df": 0.9}
    rec = embed_stage(run, EmbedConfig(embedder="subword", shard_size=15, extra=extra), progress=False)
    rels = [f"{SubwordEmbedder.MODEL_DIR}/{f}" for f in SubwordEmbedder.MODEL_FILES]
    assert set(rels) <= set(rec.artifacts) and rec.embedder_config == run_embedder(run).config()
    np.testing.assert_array_equal(load_embeddings(run, np.float16),
                                  run_embedder(run).encode(docs(40)[0]).astype(np.float16))
    comps = run.path(rels[-1])
    saved = comps.read_bytes()
    arr = np.load(comps)
    arr[0, 0] += 1
    np.save(comps, arr)
    _assert_damaged_model_is_an_error(run, SubwordEmbedder, comps, saved)


def test_unseen_scripts_and_symbol_art_get_their_own_unit_vectors(tmp_path: Path) -> None:
    texts, _ = docs(150, languages=("english", "german"))
    lsa = LsaEmbedder(dim=16, min_df=1, max_df=0.9, progress=False).fit(texts)
    emb = small().fit(texts)
    new = [GEORGIAN, "ქალაქი სახლი წიგნი სკოლა დრო", BOX, WAVES, BOX]
    x, conf = emb.encode_with_confidence(new)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    assert (conf[:, 0] == 0).all() and (conf[:, 1] > 0).all()
    constant = np.full(16, 1 / np.sqrt(16), np.float32)
    assert all(cosine(v, constant) < 0.99 for v in x)
    _, lsa_conf = lsa.encode_with_confidence(new)
    assert (lsa_conf == 0).all(), "lsa represents none of them: its vectors are the constant one"
    assert cosine(x[2], x[4]) == pytest.approx(1.0, abs=1e-6)
    assert cosine(x[2], x[3]) < 0.8 and cosine(x[0], x[1]) > cosine(x[0], x[2])


def test_batch_size_does_not_change_vectors() -> None:
    texts, _ = docs(80)
    emb = small().fit(texts)
    probe = [*texts[:30], *MIXED, GEORGIAN, BOX]
    whole = emb.encode(probe)
    emb.batch_size = 7
    np.testing.assert_array_equal(emb.encode(probe), whole)


ALPHABETS = {"english": "abcdefghijklmnopqrstuvwxyz", "german": "abcdefghijklmnopqrstuvwxyzäöüß",
             "russian": "абвгдеёжзийклмнопрстуфхцчшщъыьэюя", "code": "abcdefghijklmnopqrstuvwxyz_0123456789"}


def corpus_file(path: Path, n: int, seed: int, extra: list[str] = ()) -> Path:
    """``n`` documents of :func:`docs`, each with five made-up words in its language's alphabet (so the fit sees
    n-grams in most of the hash buckets, as on a real corpus), then the ``extra`` texts."""
    texts, labels = docs(n, seed)
    names = list(LANGUAGES)
    rng = np.random.default_rng(seed)
    made_up = [" ".join("".join(rng.choice(list(ALPHABETS[names[lab]]), size=int(rng.integers(5, 10))))
                        for _ in range(5)) for lab in labels]
    rows = [{"id": f"{path.stem}-{i}", "text": f"{t} {m}", "domain": names[lab]}
            for i, (t, m, lab) in enumerate(zip(texts, made_up, labels, strict=True))]
    rows += [{"id": f"{path.stem}-x{i}", "text": t, "domain": "unseen"} for i, t in enumerate(extra)]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def test_cli_run_add_status_with_the_subword_embedder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    old = corpus_file(tmp_path / "old.jsonl", 300, seed=0)
    assert main(["run", str(old), "--out", str(out), "--embedder", "subword", "--k", "4", "--id-field", "id",
                 "--quiet"]) == 0
    run = RunDir(out)
    folder = run.path(SubwordEmbedder.MODEL_DIR)
    model = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert sorted(model) == sorted(SubwordEmbedder.MODEL_FILES)
    new = corpus_file(tmp_path / "new.jsonl", 10, seed=1, extra=[GEORGIAN, BOX])
    assert main(["add", str(out), str(new), "-q"]) == 0
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == model, "add reuses the fitted model"
    fitted = SubwordEmbedder.load(folder, progress=False)
    added = read_column(run, "text")[300:]
    assert len(added) == 12
    np.testing.assert_array_equal(load_embeddings(run, np.float16)[300:], fitted.encode(added).astype(np.float16))
    conf = load_confidence(run)
    assert conf is not None and (conf[-2:, 0] == 0).all() and (conf[-2:, 1] > 0).all()
    assert (conf[:300, 0] > 0.8).all() and (conf[:300, 1] > 0.5).all()
    run.verify(EMBED_STAGE)
    capsys.readouterr()
    assert main(["status", str(out), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert "subword" in json.dumps(status)
    assert main(["status", str(out)]) == 0
