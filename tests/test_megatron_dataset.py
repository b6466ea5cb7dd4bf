"""PlanOrderGPTDataset: megatron's own builder reads a clusterclip export in plan order, one pass at most.

Every fixture document is ``text of doc {i} ünï`` + EOS, whose fourth token is ``6 + i`` and unique to
corpus document ``i``: counting those tokens in the samples counts how often each document was read.
The recipe of docs/export.md is ``plan_order_train_dataset`` below, verbatim (``test_docs_show_this_recipe``).
"""

from __future__ import annotations

import inspect
import json
import shutil
import subprocess
import sys
import types
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("megatron.core")

from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

from clusterclip.errors import ClusterClipError
from clusterclip.export.megatron_dataset import PlanOrderGPTDataset
from clusterclip.export.stage import export_plan
from tests.test_export import _run
from tests.test_export_formats import _ids, _plan, _tokenizer

DOCS = Path(__file__).resolve().parent.parent / "docs" / "export.md"
SEQ = 8
PACKED = 7


# -- the recipe (docs/export.md shows this function as it is)

def plan_order_train_dataset(prefix, tokenizer_path, train_samples, seq_length, seed=1234):
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDatasetConfig
    from megatron.core.tokenizers import MegatronTokenizer

    from clusterclip.export.megatron_dataset import PlanOrderGPTDataset

    tokenizer = MegatronTokenizer.from_pretrained(   # the export's tokenizer (export.json names it)
        tokenizer_path, metadata_path={"library": "huggingface", "model_type": "gpt"})
    config = GPTDatasetConfig(
        random_seed=seed, sequence_length=seq_length, tokenizer=tokenizer,
        blend=[[prefix], None], split="100,0,0",          # the whole export trains, in plan order
        reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False)
    train, _, _ = BlendedMegatronDatasetBuilder(
        PlanOrderGPTDataset, [train_samples, None, None], lambda: True, config).build()
    return train                                          # train[i]["tokens"]: sample i, in plan order


def test_docs_show_this_recipe():
    assert inspect.getsource(plan_order_train_dataset) in DOCS.read_text(encoding="utf-8"), \
        "docs/export.md does not show plan_order_train_dataset as tested"


# -- one run, a per-document export and a packed one, shared by the tests

@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("meg")
    run, cfg, _ = _run(tmp)
    tok = _tokenizer(tmp)
    for out, seq_len in (("meg", None), ("packed", PACKED)):
        export_plan(run, cfg.name(), tmp / out, fmt="megatron", tokenizer=tok, append_eos=True, seq_len=seq_len)
    plan = _plan(run, cfg)
    record = json.loads(run.path("plans", cfg.name(), "plan.json").read_text())
    flat = [t for i in plan for t in _ids(int(i), eos=True)]
    return types.SimpleNamespace(tmp=tmp, tok=tok, plan=plan, cap=record["config"]["max_repeat"], flat=flat,
                                 meg=str(tmp / "meg" / "data"), packed=str(tmp / "packed" / "data"))


class _Tokenizer:
    """What GPTDatasetConfig and GPTDataset use of a Megatron tokenizer; eod = the fixture's ``</s>``."""

    def __init__(self, eod=1):
        self.vocab_size, self.eod = 106, eod
        self.unique_identifiers = {"class": "stub", "eod": eod}


def _config(prefixes, split="100,0,0", seq=SEQ, tokenizer=None, **kw):
    blend = {"blend": [prefixes, None], "split": split} if prefixes is not None else {}
    return GPTDatasetConfig(random_seed=7, sequence_length=seq, tokenizer=tokenizer or _Tokenizer(),
                            reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False, **blend, **kw)


def _build(cls, config, sizes):
    return BlendedMegatronDatasetBuilder(cls, sizes, lambda: True, config).build()


def _tokens(ds, n):
    return [t for i in range(n) for t in ds[i]["tokens"].tolist()]


def _reads(tokens):
    """How often each corpus document was read (its own token, ``6 + i``, counted)."""
    return Counter(t - 6 for t in tokens if t >= 6)


def _available(n_tokens, seq=SEQ):
    return (n_tokens - 1) // seq  # GPTDataset's count: each sample reads one token more (its last label)


# -- plan order, one pass

@pytest.mark.parametrize("packed", [False, True])
def test_samples_follow_the_plan_and_keep_its_cap(exported, packed):
    flat = exported.flat[:len(exported.flat) // PACKED * PACKED] if packed else exported.flat
    n = _available(len(flat))
    train, valid, test = _build(PlanOrderGPTDataset, _config([exported.packed if packed else exported.meg]),
                                [n, None, None])
    assert valid is None and test is None and len(train) == n
    # (a) sample i is the export's token stream from i * SEQ, labels shifted by one: the steps follow the plan
    assert _tokens(train, n) == flat[:n * SEQ]
    assert all(train[i]["labels"].tolist() == flat[i * SEQ + 1:(i + 1) * SEQ + 1] for i in range(n))
    documents = [d for i in range(n) for d in train._query_document_sample_shuffle_indices(i)[1].tolist()]
    assert documents == sorted(documents) and documents[0] == 0
    # (b) no corpus document is read more often than the plan draws it, nor past the plan's cap
    planned = Counter(exported.plan.tolist())
    reads = _reads(_tokens(train, n))
    assert all(reads[d] <= planned[d] <= exported.cap for d in reads) and max(reads.values()) == exported.cap


@pytest.mark.parametrize("extra", [True, False])
def test_cut_exactly_as_gpt_dataset_without_its_shuffles(exported, tmp_path, monkeypatch, extra):
    """GPTDataset with its two shuffles replaced by the identity builds the same samples, index for index."""
    from megatron.core.datasets import gpt_dataset

    monkeypatch.setattr(gpt_dataset, "_build_document_index",
                        lambda docs, epochs, rng, separate: np.tile(docs, epochs).astype(np.int32))
    monkeypatch.setattr(gpt_dataset, "_build_shuffle_index", lambda n, total, rng: np.arange(total, dtype=np.uint32))
    config = {"path_to_cache": str(tmp_path), "add_extra_token_to_sequence": extra}
    plain, _, _ = _build(GPTDataset, _config([exported.meg], **config), [None, None, None])
    ours, _, _ = _build(PlanOrderGPTDataset, _config([exported.meg], **config), [None, None, None])
    assert len(ours) == len(plain) and np.array_equal(ours.sample_index, plain.sample_index)
    assert all(ours[i]["tokens"].tolist() == plain[i]["tokens"].tolist() and
               ours[i]["labels"].tolist() == plain[i]["labels"].tolist() for i in range(len(ours)))


def test_more_samples_than_one_pass_holds_are_refused(exported):
    n = _available(len(exported.flat))
    for asked in (n + 1, int(1.3 * n)):
        with pytest.raises(ClusterClipError, match=rf"{asked} samples of {SEQ} tokens asked for, but one pass over "
                                                   rf"this export holds {n} .*--budget") as err:
            _build(PlanOrderGPTDataset, _config([exported.meg]), [asked, None, None])
        assert "\n" not in str(err.value)
    assert len(_build(PlanOrderGPTDataset, _config([exported.meg]), [None, None, None])[0]) == n


def test_plain_gpt_dataset_shuffles_and_repeats_past_the_cap(exported, tmp_path):
    """The contrast: megatron's GPTDataset on the same export shuffles, and at 1.3 passes breaks the cap."""
    n = _available(len(exported.flat))
    plain, _, _ = _build(GPTDataset, _config([exported.meg], path_to_cache=str(tmp_path)), [n, None, None])
    got = _tokens(plain, n)
    planned = Counter(exported.plan.tolist())
    assert got != exported.flat[:n * SEQ] and all(c <= planned[d] for d, c in _reads(got).items())  # one pass
    firsts = [int(plain._query_document_sample_shuffle_indices(i)[1][0]) for i in range(n)]
    assert firsts != sorted(firsts)
    more = int(1.3 * n)
    plain, _, _ = _build(GPTDataset, _config([exported.meg], path_to_cache=str(tmp_path)), [more, None, None])
    reads = _reads(_tokens(plain, more))
    assert max(reads.values()) > exported.cap


def test_no_cache_is_read_or_written(exported, tmp_path):
    """A shuffled index GPTDataset cached in the same folder is never picked up; nothing is written."""
    n = _available(len(exported.flat))
    _build(GPTDataset, _config([exported.meg], path_to_cache=str(tmp_path)), [n, None, None])
    cached = sorted(p.name for p in tmp_path.rglob("*"))
    export_dir = sorted(p.name for p in Path(exported.meg).parent.iterdir())
    train, _, _ = _build(PlanOrderGPTDataset, _config([exported.meg], path_to_cache=str(tmp_path)), [n, None, None])
    assert _tokens(train, n) == exported.flat[:n * SEQ]
    assert sorted(p.name for p in tmp_path.rglob("*")) == cached and any("GPTDataset-train" in c for c in cached)
    assert sorted(p.name for p in Path(exported.meg).parent.iterdir()) == export_dir


def test_validation_comes_from_an_export_of_its_own(exported):
    """blend_per_split: train and valid each read a whole export in order; valid may take several passes."""
    n, n_valid = _available(len(exported.flat)), _available(len(exported.flat) // PACKED * PACKED)
    config = _config(None, blend_per_split=[[[exported.meg], None], [[exported.packed], None], None])
    train, valid, test = _build(PlanOrderGPTDataset, config, [n, 3 * n_valid, None])
    assert test is None and _tokens(train, n) == exported.flat[:n * SEQ]
    stream = exported.flat[:len(exported.flat) // PACKED * PACKED]
    assert _tokens(valid, 3 * n_valid)[:len(stream)] == stream and len(valid) >= 3 * n_valid


# -- refusals: one line each, naming the way out

def test_refuses_a_split_other_than_all_train_and_a_blend(exported):
    with pytest.raises(ClusterClipError, match=r"split '99,1,0' cuts validation/test .* use split '100,0,0'"):
        _build(PlanOrderGPTDataset, _config([exported.meg], split="99,1,0"), [10, 1, None])
    with pytest.raises(ClusterClipError, match="the train blend names 2 datasets"):
        _build(PlanOrderGPTDataset, _config([exported.meg, exported.packed]), [None, None, None])
    with pytest.raises(Exception, match="failed to build as a mock") as err:  # megatron wraps what mock raises
        _build(PlanOrderGPTDataset, _config(None), [10, None, None])
    assert isinstance(err.value.__cause__, ClusterClipError) and "no dataset prefix given" in str(err.value.__cause__)


def test_refuses_a_dataset_that_is_not_the_export(exported, tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    for name in ("data.bin", "data.idx"):
        shutil.copy(Path(exported.meg).parent / name, foreign / name)
    with pytest.raises(ClusterClipError, match=r"no .*foreign/export\.json: it reads a clusterclip export only"):
        _build(PlanOrderGPTDataset, _config([str(foreign / "data")]), [None, None, None])
    record = json.loads((Path(exported.meg).parent / "export.json").read_text())
    record["identity"]["format"] = "parquet"
    (foreign / "export.json").write_text(json.dumps(record))
    with pytest.raises(ClusterClipError, match="not the record of a clusterclip --format megatron export"):
        _build(PlanOrderGPTDataset, _config([str(foreign / "data")]), [None, None, None])
    record["identity"]["format"], record["rows"] = "megatron", record["rows"] + 1
    (foreign / "export.json").write_text(json.dumps(record))
    with pytest.raises(ClusterClipError, match=r"export\.json: its rows, identity or files were changed"):
        _build(PlanOrderGPTDataset, _config([str(foreign / "data")]), [None, None, None])
    del record["content_hash"]  # as an export written before content_hash: the index still betrays the rows
    (foreign / "export.json").write_text(json.dumps(record))
    with pytest.raises(ClusterClipError, match=r"data\.idx holds 130 documents, export\.json records 131 rows"):
        _build(PlanOrderGPTDataset, _config([str(foreign / "data")]), [None, None, None])
    shutil.copy(Path(exported.packed).parent / "data.idx", foreign / "data.idx")
    with pytest.raises(ClusterClipError, match=r"data\.idx has \d+ bytes, export\.json records \d+: it changed"):
        _build(PlanOrderGPTDataset, _config([str(foreign / "data")]), [None, None, None])
    (foreign / "export.json").write_text(json.dumps({**record, "rows": "131", "surplus": 1}))
    with pytest.raises(ClusterClipError, match=r"export\.json: unknown field\(s\) surplus: not a export record"):
        _build(PlanOrderGPTDataset, _config([str(foreign / "data")]), [None, None, None])
    (foreign / "export.json").write_text(json.dumps({**record, "rows": "131"}))
    with pytest.raises(ClusterClipError, match=r"field 'rows' is str '131', not int; export again"):
        _build(PlanOrderGPTDataset, _config([str(foreign / "data")]), [None, None, None])
    (foreign / "export.json").write_text("{not json")
    with pytest.raises(ClusterClipError, match="does not parse"):
        _build(PlanOrderGPTDataset, _config([str(foreign / "data")]), [None, None, None])


def test_refuses_a_tokenizer_with_another_eod(exported):
    with pytest.raises(ClusterClipError, match=r"EOS id 1 .* but the config's tokenizer has eod 2"):
        _build(PlanOrderGPTDataset, _config([exported.meg], tokenizer=_Tokenizer(eod=2)), [None, None, None])


# -- the recipe, the import boundary

def test_the_docs_recipe_reads_the_plan_in_order(exported):
    (Path(exported.tok) / "tokenizer_config.json").write_text('{"eos_token": "</s>"}')  # as a saved HF tokenizer has
    n = _available(len(exported.flat))
    train = plan_order_train_dataset(exported.meg, exported.tok, n, SEQ)
    assert _tokens(train, n) == exported.flat[:n * SEQ]
    with pytest.raises(ClusterClipError, match=f"holds {n} "):
        plan_order_train_dataset(exported.meg, exported.tok, n + 1, SEQ)


def test_clusterclip_export_does_not_import_megatron():
    code = ("import sys\nimport clusterclip.export\n"
            "assert not [m for m in sys.modules if m.startswith('megatron')]\n"
            "sys.modules['megatron'] = None\n"
            "from clusterclip.errors import ClusterClipError\n"
            "try:\n    import clusterclip.export.megatron_dataset\n"
            "except ClusterClipError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'clusterclip[export]'" in out.stdout, out.stderr
