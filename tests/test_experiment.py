"""Tests of the training experiment: data layout, batches read through ``ClusterClipSampler`` (the same as
the former packing of the plan), metrics, model, config, and the whole path on a small generated corpus
(``--quick``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tokenizers")

from clusterclip.cli.experiment import add_experiment_parser
from clusterclip.cli.options import experiment_config, experiment_flag
from clusterclip.errors import ClusterClipError
from clusterclip.experiment.batches import PlanBatches
from clusterclip.experiment.config import (
    RUNTIME_FIELDS,
    ExperimentConfig,
    quick_config,
)
from clusterclip.experiment.data import (
    TokenizedDocs,
    choose_subset,
    cut_words,
    encode_docs,
    eval_windows,
    gather_stream,
    stratified_split,
    train_tokenizer,
)
from clusterclip.experiment.evaluate import (
    group_losses,
    mixture,
    small_shares,
    summarize_losses,
    unigram_doc_losses,
    worst_fraction,
)
from clusterclip.experiment.model import GPT, ModelConfig, token_losses
from clusterclip.experiment.proxy_runs import run_experiment
from clusterclip.experiment.train import TrainConfig, lr_at, train_model
from clusterclip.plan.build import build_plan
from clusterclip.plan.config import PlanConfig
from clusterclip.settings import SettingsError

MINIPILE_1K = Path(__file__).resolve().parents[2] / "shared" / "data" / "minipile-1k.jsonl"


def _docs(lengths: list[int], eos: int = 0, seed: int = 0) -> TokenizedDocs:
    rng = np.random.default_rng(seed)
    parts = [np.append(rng.integers(1, 50, size=n - 1), eos) for n in lengths]
    return TokenizedDocs(np.concatenate(parts).astype(np.int32),
                         np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), eos)


def _doc(d: TokenizedDocs, i: int) -> np.ndarray:
    return d.flat[d.offsets[i]:d.offsets[i + 1]]


# ------------------------------------------------------------------------------------------- data


def test_cut_words_keeps_formatting_and_counts_words() -> None:
    text = "one  two\nthree\tfour five"
    assert cut_words(text, 3) == "one  two\nthree"
    assert cut_words(text, 0) == text
    assert cut_words(text, 99) == text


def test_choose_subset_is_seeded_sorted_and_distinct() -> None:
    a = choose_subset(1000, 100, seed=3)
    assert a.size == 100 and np.all(np.diff(a) > 0)
    assert np.array_equal(a, choose_subset(1000, 100, seed=3))
    assert not np.array_equal(a, choose_subset(1000, 100, seed=4))
    assert choose_subset(10, None, 0).tolist() == list(range(10))


def test_stratified_split_holds_out_the_fraction_of_every_stratum() -> None:
    strata = np.repeat(np.arange(5), [400, 200, 100, 50, 10])
    held = stratified_split(strata, 0.2, seed=1)
    for s, n in zip(range(5), [400, 200, 100, 50, 10], strict=True):
        assert abs(held[strata == s].sum() - 0.2 * n) <= 1
    assert np.array_equal(held, stratified_split(strata, 0.2, seed=1))
    singles = stratified_split(np.arange(5000), 0.2, seed=0)
    assert 0.17 < singles.mean() < 0.23
    with pytest.raises(ClusterClipError):
        stratified_split(strata, 1.0, 0)


@dataclass
class _Packed:
    """The former packing's result (test-only reference): ``inputs``/``targets`` ``[n_seq, context]``."""

    inputs: np.ndarray
    targets: np.ndarray
    stream_tokens: int
    wrapped_tokens: int


def _reference_pack(docs: TokenizedDocs, order: np.ndarray, n_seq: int, context: int) -> _Packed:
    """How the experiment packed a plan before it read it through ``ClusterClipSampler``: the plan's token
    stream cut into ``n_seq`` consecutive sequences, continued from its start when too short."""
    stream = gather_stream(docs, order)
    need = n_seq * context + 1
    wrapped = max(0, need - stream.size)
    if wrapped:
        stream = np.resize(stream, need)
    inputs = stream[: n_seq * context].reshape(n_seq, context)
    targets = stream[1:need].reshape(n_seq, context)
    return _Packed(inputs, targets, int(min(stream.size, need)), int(wrapped))


def _reference_batches(packed: _Packed, steps: int, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The former training loop's batches: slices of the whole packed plan as one int64 tensor."""
    inputs = torch.from_numpy(packed.inputs[: steps * batch].astype(np.int64))
    targets = torch.from_numpy(packed.targets[: steps * batch].astype(np.int64))
    return [(inputs[lo:lo + batch], targets[lo:lo + batch]) for lo in range(0, steps * batch, batch)]


def _reference_used(docs: TokenizedDocs, order: np.ndarray, packed: _Packed) -> np.ndarray:
    return order[: np.searchsorted(np.cumsum(docs.lengths[order]), packed.stream_tokens) + 1]


def test_batches_follow_the_plan_order_through_the_sampler() -> None:
    d = _docs([3, 5, 2, 4])
    order = np.array([2, 0, 2, 3, 1])
    expected = np.concatenate([_doc(d, i) for i in order])
    assert np.array_equal(gather_stream(d, order), expected)
    batches = PlanBatches(d, order, batch_size=3, context=4)
    x, y = next(iter(batches))
    assert x.dtype == torch.int64 and x.shape == (3, 4)
    assert np.array_equal(x.numpy().ravel(), expected[:12]) and np.array_equal(y.numpy().ravel(), expected[1:13])
    assert batches.wrapped_tokens == 0 and batches.consumed == [2, 0, 2, 3, 1]  # the 13th token is document 1's
    assert batches.state()["epoch"] == 0 and batches.state()["consumed"] == order.size  # the whole plan
    few = PlanBatches(d, order, batch_size=1, context=4)
    firsts = [x.numpy().ravel().tolist() for _, (x, _) in zip(range(2), few, strict=False)]
    assert firsts == [expected[:4].tolist(), expected[4:8].tolist()]
    assert few.consumed == [2, 0, 2, 3] and few.state()["consumed"] == 4  # only what the two batches needed
    short = PlanBatches(d, np.array([0]), batch_size=2, context=4)
    x, y = next(iter(short))
    assert short.wrapped_tokens == 9 - 3 and short.consumed == [0, 0, 0]
    assert np.array_equal(x.numpy().ravel(), np.resize(_doc(d, 0), 8))
    assert short.state()["epoch"] == 2 and short.state()["consumed"] == 1
    with pytest.raises(ClusterClipError):
        PlanBatches(d, np.array([7]), batch_size=2, context=4)


@pytest.mark.parametrize("wrap", [False, True])
def test_proxy_training_through_the_sampler_equals_the_former_packing(wrap: bool) -> None:
    """A tiny proxy trained on the batches ``ClusterClipSampler`` delivers sees the plan's documents in plan
    order and the former packing's tokens, and ends with the same losses and weights, bit for bit."""
    lengths = np.random.default_rng(5).integers(3, 30, size=40)
    d = _docs(lengths.tolist(), seed=5)
    labels = np.arange(40) % 4
    budget = 150 if wrap else 600
    plan = build_plan(labels, PlanConfig(strategy="clusterclip", budget=budget, budget_unit="tokens", max_repeat=3,
                                                 seed=2),
                      tokens=d.lengths, n_clusters=4)
    order = np.asarray(plan.order, dtype=np.int64)
    model_cfg = ModelConfig(vocab_size=50, context=8, n_layer=1, n_head=2, d_model=16)
    cfg = TrainConfig(batch_size=4, lr=1e-2, warmup_steps=3, curve_points=3)
    steps = 14
    ref = _reference_pack(d, order, steps * cfg.batch_size, model_cfg.context)
    assert (ref.wrapped_tokens > 0) == wrap
    old_model, old_curve = train_model(model_cfg, cfg, _reference_batches(ref, steps, cfg.batch_size), steps, seed=3)
    batches = PlanBatches(d, plan, cfg.batch_size, model_cfg.context)
    new_model, new_curve = train_model(model_cfg, cfg, batches, steps, seed=3)
    assert [p["train_loss"] for p in new_curve] == [p["train_loss"] for p in old_curve]
    for a, b in zip(old_model.state_dict().values(), new_model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    reads = np.asarray(batches.consumed)
    assert np.array_equal(reads, np.resize(order, reads.size))  # the loop consumed the plan, in plan order
    assert np.array_equal(batches.used(), _reference_used(d, order, ref))
    assert batches.wrapped_tokens == ref.wrapped_tokens and batches.batches == steps
    state = batches.state()
    assert state["plan_identity"] == plan.identity and state["plan_length"] == order.size
    assert state["epoch"] * order.size + state["consumed"] == reads.size
    assert (state["epoch"] > 0) == wrap  # a wrapped plan was consumed whole, then replayed from its start


def test_eval_windows_score_every_token_once_after_an_eos() -> None:
    d = _docs([3, 9, 4, 1])
    ids = np.array([1, 3, 0])
    w = eval_windows(d, ids, context=4)
    for i in ids:
        rows = w.doc == i
        targets = w.targets[rows].ravel()
        assert np.array_equal(targets[targets >= 0], _doc(d, i))
        first = w.inputs[np.flatnonzero(rows)[0]]
        assert first[0] == d.eos
        assert np.array_equal(first[1:min(4, len(_doc(d, i)))], _doc(d, i)[:min(3, len(_doc(d, i)) - 1)])
    assert w.doc.tolist() == [1, 1, 1, 3, 0]


def test_tokenizer_round_trip_and_eos_layout(tmp_path: Path) -> None:
    texts = ["the cat sat on the mat", "dogs bark loudly at night", "ünïcödé survives"] * 5
    tok = train_tokenizer(texts, 300, tmp_path / "tok.json")
    docs = encode_docs(tok, texts)
    assert len(docs) == len(texts)
    assert (docs.flat[docs.offsets[1:] - 1] == docs.eos).all()
    assert (docs.flat != docs.eos).sum() == docs.flat.size - len(texts)
    assert tok.decode(_doc(docs, 2)[:-1].tolist()) == texts[2]


# ---------------------------------------------------------------------------------------- metrics


def test_group_macro_and_micro_weigh_groups_differently() -> None:
    sums = np.array([10.0, 10.0, 30.0])
    counts = np.array([10.0, 10.0, 10.0])
    clusters = np.array([0, 0, 1])
    m = summarize_losses(sums, counts, clusters, np.array(["a", "b", "b"]))
    assert m["per_cluster"] == {"0": 1.0, "1": 3.0}
    assert m["macro_cluster"] == pytest.approx(2.0)
    assert m["micro"] == pytest.approx(50 / 30)
    assert m["macro_domain"] == pytest.approx((1.0 + 2.0) / 2)
    assert worst_fraction([1, 5, 3, 2], 0.1) == 5
    assert worst_fraction([1, 5, 3, 2], 0.5) == 4
    assert group_losses(np.array([1.0]), np.array([0.0]), np.array([7])) == {}


def test_unigram_loss_matches_a_direct_computation() -> None:
    train = _docs([4, 6], seed=1)
    held = _docs([5], seed=2)
    sums, counts = unigram_doc_losses(train, held, vocab_size=50)
    p = (np.bincount(train.flat, minlength=50) + 1.0) / (train.flat.size + 50)
    assert sums[0] == pytest.approx(-np.log(p[held.flat]).sum())
    assert counts[0] == 5


def test_mixture_effective_number_is_exp_entropy() -> None:
    labels = np.array([0, 0, 1, 2])
    lengths = np.array([1, 1, 2, 2])
    m = mixture(np.array([0, 1, 2, 3]), lengths, labels)
    assert m["effective"] == pytest.approx(3.0)
    skew = mixture(np.array([0, 0, 0, 3]), lengths, labels)
    assert skew["shares"]["1"] == 0 and skew["groups_seen"] == 2 and skew["effective"] < 2


# ------------------------------------------------------------------------------------------ model


def test_model_is_causal() -> None:
    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=30, context=8, n_layer=1, n_head=2, d_model=16)).eval()
    x = torch.randint(0, 30, (1, 8))
    y = x.clone()
    y[0, 5:] = (y[0, 5:] + 1) % 30
    with torch.no_grad():
        assert torch.allclose(model(x)[0, :5], model(y)[0, :5], atol=1e-6)
        assert not torch.allclose(model(x)[0, 5:], model(y)[0, 5:])


def test_training_learns_a_repeated_sequence_and_masks_padding() -> None:
    cfg = ModelConfig(vocab_size=20, context=16, n_layer=1, n_head=2, d_model=32)
    seq = np.tile(np.arange(1, 18), 40)[: 40 * 17]
    inputs = np.stack([seq[i:i + 16] for i in range(0, 600, 15)][:40])
    targets = np.stack([seq[i + 1:i + 17] for i in range(0, 600, 15)][:40])
    batches = [(torch.from_numpy(inputs[lo:lo + 4].astype(np.int64)),
                torch.from_numpy(targets[lo:lo + 4].astype(np.int64))) for lo in range(0, 40, 4)]
    model, curve = train_model(cfg, TrainConfig(batch_size=4, lr=1e-2, warmup_steps=5, curve_points=2),
                               batches, steps=10, seed=0)
    with pytest.raises(ValueError, match="ran out after 10 of 11 steps"):
        train_model(cfg, TrainConfig(batch_size=4, curve_points=2), batches, steps=11, seed=0)
    assert len(curve) == 2 and curve[-1]["train_loss"] < curve[0]["train_loss"] < np.log(20) + 0.5
    t = torch.from_numpy(targets[:1].astype(np.int64)).clone()
    t[0, 8:] = -1
    losses = token_losses(model, torch.from_numpy(inputs[:1].astype(np.int64)), t)
    assert (losses[0, 8:] == 0).all() and (losses[0, :8] > 0).all()


def test_lr_schedule_warms_up_then_decays_to_the_floor() -> None:
    cfg = TrainConfig(lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(0, 100, cfg) == pytest.approx(0.1)
    assert lr_at(9, 100, cfg) == pytest.approx(1.0)
    assert lr_at(99, 100, cfg) == pytest.approx(0.1, abs=1e-3)


# ----------------------------------------------------------------------------------- config / cli


def test_max_repeat_must_exceed_passes() -> None:
    with pytest.raises(SettingsError, match=r"^max_repeats \[6\] must exceed passes 6"):
        ExperimentConfig(passes=6, max_repeats=(6, 9))
    ExperimentConfig(passes=6, max_repeats=(9,))
    ExperimentConfig(passes=6, max_repeats=(), strategies=("random", "uniform"))
    with pytest.raises(SettingsError, match=r"^strategies item .bogus.: unknown strategy .bogus.; choose from "):
        ExperimentConfig(strategies=("bogus",))


def test_config_errors_name_the_parameter_and_the_cli_its_flag() -> None:
    with pytest.raises(SettingsError, match=r"^d_model 130 is not divisible by n_head 4") as info:
        ModelConfig(d_model=130)
    assert info.value.render(lambda n: experiment_flag(n, info.value.owner)).startswith(
        "--d-model 130 is not divisible by --heads 4")
    with pytest.raises(SettingsError, match=r"^lr must be in \(0, 10\)"):
        TrainConfig(lr=0)
    with pytest.raises(SettingsError, match=r"^model\.vocab_size must be at least 300") as info:
        ExperimentConfig(model=ModelConfig(vocab_size=100))
    assert experiment_flag(info.value.param) == "--vocab-size" and experiment_flag("train.lr") == "--lr"
    assert experiment_flag("max_repeats") == "--max-repeats" and experiment_flag("model.n_layer") == "--layers"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--heads", "3"], "--d-model 128 is not divisible by --heads 3"),
        (["--vocab-size", "100"], "--vocab-size must be at least 300"),
        (["--passes", "6", "--max-repeats", "4,9"], "--max-repeats [4] must exceed --passes 6"),
        (["--lr", "-1"], "--lr must be in (0, 10)"),
        (["--docs", "-5"], "--docs must be an integer >= 1"),
    ],
)
def test_cli_errors_name_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                  message: str) -> None:
    from clusterclip.cli import main as cli

    assert cli.main(["experiment", "--out", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"clusterclip: error: {message}"), err


def _other_value(value: float) -> float:
    """A valid value different from ``value``: every default of the model and the recipe doubles or turns on."""
    if isinstance(value, float):
        return value * 2 or 0.1
    return value * 2 or 1


@pytest.mark.parametrize("section", ["model", "train"])
def test_every_model_and_training_setting_invalidates_finished_runs(section: str) -> None:
    base = ExperimentConfig()
    nested = getattr(base, section)
    for f in dataclasses.fields(nested):
        changed = dataclasses.replace(base, **{section: dataclasses.replace(nested, **{
            f.name: _other_value(getattr(nested, f.name))})})
        assert changed.results_hash() != base.results_hash(), f"{section}.{f.name} is not in the results hash"


def test_only_runtime_settings_leave_the_results_hash_alone() -> None:
    base = ExperimentConfig()
    runtime = dict(seeds=(0, 1, 2, 3), strategies=("random", "clusterclip-spread"), max_repeats=(9, 12, 18),
                   device="cpu", threads=2, split_seeds=(0, 1, 2, 3), duplicates=("none", "group-cap"),
                   online_updates=3, quality_scorer="heuristic")
    assert set(runtime) == set(RUNTIME_FIELDS)
    assert dataclasses.replace(base, **runtime).results_hash() == base.results_hash()
    # a GPU trains in bfloat16 autocast: its runs are kept apart from CPU runs, but not from another GPU's
    gpu = dataclasses.replace(base, device="cuda")
    assert gpu.results_hash() != base.results_hash()
    assert dataclasses.replace(base, **{**runtime, "device": "cuda:1"}).results_hash() == gpu.results_hash()
    changed = dict(docs=500, max_words=60, heldout=0.3, split_seed=1, text_field="body", group_field="source",
                   embedder="hashing", k=12, passes=5.0, tau=0.7, curve_docs=50, small_clusters=0.3,
                   objective="sft")
    top = {f.name for f in dataclasses.fields(ExperimentConfig)} - set(RUNTIME_FIELDS) - {"model", "train"}
    assert set(changed) == top
    for name, value in changed.items():
        assert dataclasses.replace(base, **{name: value}).results_hash() != base.results_hash(), name


def test_strategy_specs_expand_the_cap_sweep() -> None:
    names = [s["name"] for s in ExperimentConfig(max_repeats=(9, 12)).strategy_specs()]
    assert names == ["random", "uniform", "temperature-0.5", "clusterclip-R9", "clusterclip-R12"]
    shuffled = ExperimentConfig(strategies=("clusterclip-shuffled",), max_repeats=(9,)).strategy_specs()
    assert shuffled == [{"name": "clusterclip-shuffled-R9", "strategy": "clusterclip", "max_repeat": 9,
                         "order": "equal-rate", "shuffle": True}]
    spread = ExperimentConfig(strategies=("clusterclip-spread",), max_repeats=(9,)).strategy_specs()
    assert spread == [{"name": "clusterclip-spread-R9", "strategy": "clusterclip", "max_repeat": 9,
                       "order": "spread", "shuffle": False}]


def test_duplicates_sweep_the_clusterclip_strategies_only() -> None:
    cfg = ExperimentConfig(strategies=("random", "clusterclip"), max_repeats=(9,),
                           duplicates=("none", "drop", "group-cap"))
    specs = cfg.strategy_specs()
    assert [s["name"] for s in specs] == ["random", "clusterclip-R9", "clusterclip-R9-drop", "clusterclip-R9-groupcap"]
    assert "duplicates" not in specs[1] and specs[3]["duplicates"] == "group-cap" and cfg.uses_groups()
    assert not ExperimentConfig().uses_groups()
    with pytest.raises(SettingsError, match="applies to the clusterclip strategies"):
        ExperimentConfig(strategies=("random", "uniform"), duplicates=("drop",))
    with pytest.raises(SettingsError, match="must be one of"):
        ExperimentConfig(duplicates=("dedupe",))


def test_small_shares_see_what_the_end_of_training_holds() -> None:
    lengths = np.ones(8, dtype=np.int64)
    is_small = np.array([True, True] + [False] * 6)
    early = small_shares(np.array([0, 1, 0, 1, 2, 3, 4, 5, 6, 7, 2, 3]), lengths, is_small)
    assert early["small_share"] == pytest.approx(4 / 12) and early["small_share_last_quarter"] == 0
    spread = small_shares(np.array([2, 3, 4, 5, 6, 0, 7, 1]), lengths, is_small)
    assert spread["small_share_last_quarter"] == pytest.approx(0.5)


def test_cli_overrides_the_preset() -> None:
    parser = argparse.ArgumentParser()
    add_experiment_parser(parser.add_subparsers())
    a = parser.parse_args(["experiment", "x.jsonl", "--out", "o", "--quick", "--seeds", "0,1", "--k", "5",
                           "--max-repeats", "7,8", "--docs", "0"])
    cfg = experiment_config(a)
    assert cfg.seeds == (0, 1) and cfg.k == 5 and cfg.max_repeats == (7, 8) and cfg.docs is None
    assert cfg.model == quick_config().model and cfg.embedder == "hashing"
    nested = experiment_config(parser.parse_args(["experiment", "--out", "o", "--quick", "--layers", "3",
                                                 "--d-model", "96", "--lr", "0.01", "--weight-decay", "0"]))
    assert nested.model == dataclasses.replace(quick_config().model, n_layer=3, d_model=96)
    assert nested.train == dataclasses.replace(quick_config().train, lr=0.01, weight_decay=0.0)
    default = experiment_config(parser.parse_args(["experiment", "--out", "o"]))
    assert default == ExperimentConfig()


# ------------------------------------------------------------------------------------ whole path


def _toy_corpus(path: Path) -> Path:
    rng = random.Random(0)
    topics = {
        "cooking": ("flour sugar butter oven bake whisk dough salt pepper simmer garlic onion sauce", 180),
        "space": ("orbit rocket planet star galaxy telescope comet moon launch gravity nebula probe", 80),
        "law": ("court judge statute appeal contract plaintiff verdict clause liability tort jury", 40),
        "music": ("melody chord rhythm tempo guitar piano violin chorus verse harmony octave", 20),
    }
    glue = ["the", "a", "of", "and", "to", "is", "in", "it"]
    with open(path, "w", encoding="utf-8") as fh:
        for domain, (words, n) in topics.items():
            vocab = words.split()
            for i in range(n):
                text = " ".join(rng.choice(vocab) if rng.random() < 0.6 else rng.choice(glue)
                                for _ in range(rng.randint(40, 90)))
                fh.write(json.dumps({"id": f"{domain}-{i}", "text": text + ".", "domain": domain}) + "\n")
    return path


def test_quick_experiment_end_to_end_and_resume(tmp_path: Path) -> None:
    corpus = _toy_corpus(tmp_path / "toy.jsonl")
    out = tmp_path / "run"
    cfg = quick_config(strategies=("random", "uniform", "clusterclip", "clusterclip-shuffled", "clusterclip-spread"),
                       max_repeats=(5,))
    res = run_experiment([corpus], out, cfg)
    path = out / "experiment" / "results.json"
    saved = json.loads(path.read_text())
    assert saved["status"] == "complete"
    assert set(saved["runs"]) == {"random/0", "uniform/0", "clusterclip-R5/0", "clusterclip-shuffled-R5/0",
                                  "clusterclip-spread-R5/0"}
    cc, shuffled = saved["runs"]["clusterclip-R5/0"], saved["runs"]["clusterclip-shuffled-R5/0"]
    assert shuffled["plan_stats"]["name"] == cc["plan_stats"]["name"] and shuffled["repeats"]["max"] <= 5
    assert shuffled["small_share"] == pytest.approx(cc["small_share"], abs=0.02)
    spread = saved["runs"]["clusterclip-spread-R5/0"]
    assert spread["plan_stats"]["name"] == cc["plan_stats"]["name"] + "-spread"
    assert spread["small_share"] == pytest.approx(cc["small_share"], abs=0.02) and spread["repeats"]["max"] <= 5
    assert (out / "labels.npy").exists() and (out / "experiment" / "results.md").exists()
    for png in ("loss-curves.png", "per-domain.png", "domain-mixture.png"):
        assert (out / "experiment" / png).stat().st_size > 1000
    data = saved["data"]
    assert data["train_documents"] + data["heldout_documents"] == 320
    assert set(data["domains"]) == {"cooking", "space", "law", "music"}
    assert all(v["heldout_documents"] >= 1 for v in data["domains"].values())
    rnd, uni = saved["runs"]["random/0"], saved["runs"]["uniform/0"]
    assert saved["unigram"]["smallest_margin_micro"] > 0
    for r in (rnd, uni):
        assert r["heldout_macro_cluster"] < saved["unigram"]["macro_cluster"]
        assert len(r["curve"]) == cfg.train.curve_points + 1
        assert set(r["heldout_per_domain"]) == set(data["domains"])
    # uniform balances the clusters: more effective clusters and domains than the natural mixture
    shares = np.array(list(uni["cluster_mixture"]["shares"].values()))
    assert shares.max() < 1.2 * shares.min()
    assert uni["effective_clusters"] > rnd["effective_clusters"]
    assert saved["runs"]["clusterclip-R5/0"]["repeats"]["max"] <= 5
    for r in saved["runs"].values():  # each proxy read its plan through ClusterClipSampler, in one pass
        assert r["sampler"]["epoch"] == 0 and 0 < r["sampler"]["consumed"] <= r["sampler"]["plan_length"]
        assert r["sampler"]["consumed"] >= r["repeats"]["unique_docs"] and r["wrapped_tokens"] == 0
    assert "| clusterclip-R5 | 1 |" in (out / "experiment" / "results.md").read_text()
    assert res["summary"]["uniform"]["heldout_macro_cluster_minus_random"] == pytest.approx(
        uni["heldout_macro_cluster"] - rnd["heldout_macro_cluster"], abs=1e-4)

    # the experiment is a stage of OUT/experiment: its record lists the results; the same settings skip it
    record = json.loads((out / "experiment" / "experiment.json").read_text())
    assert {"results.json", "results.md", "loss-curves.png"} <= set(record["artifacts"])
    assert record["command"][:2] == ["clusterclip", "experiment"] and "--quick" not in record["command"]
    written = path.stat().st_mtime_ns
    assert run_experiment([corpus], out, cfg)["runs"] == saved["runs"] and path.stat().st_mtime_ns == written

    # a restart with one more seed trains only the new run and keeps the finished ones
    more = run_experiment([corpus], out, quick_config(strategies=("random",), seeds=(0, 1)))
    assert more["runs"]["random/0"] == rnd
    assert set(more["runs"]) == {*saved["runs"], "random/1"}
    assert more["stats"]["random"]["heldout_macro_cluster"]["n"] == 2
    assert more["runs"]["random/1"]["heldout_macro_cluster"] != rnd["heldout_macro_cluster"]

    with pytest.raises(ClusterClipError, match="different configuration"):
        run_experiment([corpus], out, quick_config(k=5))
    with pytest.raises(ClusterClipError, match="different configuration"):
        run_experiment([corpus], out, quick_config(train=dataclasses.replace(quick_config().train, grad_clip=0.5)))
    saved = json.loads(path.read_text())
    path.write_text(json.dumps({**saved, "split_hash": "another split"}))
    with pytest.raises(ClusterClipError, match="split drawn now differs"):
        run_experiment([corpus], out, quick_config(strategies=("random",)))
    assert json.loads(path.read_text())["runs"] == saved["runs"]
    fresh = run_experiment([corpus], out, quick_config(strategies=("random",)), force=True)
    assert set(fresh["runs"]) == {"random/0"}
    (backup,) = (out / "experiment").glob("results.discarded-*.json")
    assert json.loads(backup.read_text())["runs"] == saved["runs"]


@pytest.mark.integration
@pytest.mark.skipif(not MINIPILE_1K.exists(), reason=f"{MINIPILE_1K} not found (shared data of the project)")
def test_quick_experiment_on_minipile_1k(tmp_path: Path) -> None:
    res = run_experiment([MINIPILE_1K], tmp_path / "run", quick_config(strategies=("random", "clusterclip")))
    assert res["status"] == "complete" and len(res["data"]["domains"]) == 7
    for r in res["runs"].values():
        assert r["heldout_macro_cluster"] < res["unigram"]["macro_cluster"]


def test_quick_experiment_compares_the_cap_with_duplicate_groups(tmp_path: Path) -> None:
    """A corpus whose cooking documents come with near-copies: ``drop`` and ``group-cap`` plan over the training
    split's dedup groups (the cap holds per group), and held-out documents with a copy in training are set apart."""
    rng = random.Random(1)
    lines = _toy_corpus(tmp_path / "toy.jsonl").read_text().splitlines()
    copies = []
    for line in lines[:30]:
        doc = json.loads(line)
        for c in range(rng.randint(3, 8)):
            copies.append(json.dumps({**doc, "id": f"{doc['id']}-copy{c}", "text": doc["text"] + " Advertisement."}))
    corpus = tmp_path / "dup.jsonl"
    corpus.write_text("\n".join(lines + copies) + "\n")
    out = tmp_path / "run"
    cfg = quick_config(docs=None, strategies=("random", "clusterclip"), max_repeats=(5,),
                       duplicates=("none", "drop", "group-cap"))
    res = run_experiment([corpus], out, cfg)
    runs = res["runs"]
    assert set(runs) == {"random/0", "clusterclip-R5/0", "clusterclip-R5-drop/0", "clusterclip-R5-groupcap/0"}
    assert res["data"]["heldout_near_train"] > 0
    group = np.load(out / "dedup" / "group.npy", allow_pickle=False)
    assert np.unique(group).size < group.size
    none, drop, gcap = (runs[f"clusterclip-R5{s}/0"] for s in ("", "-drop", "-groupcap"))
    assert drop["plan"]["duplicates"] == "drop" and gcap["plan"]["duplicates"] == "group-cap"
    assert gcap["plan"]["budget_unit"] == "docs" and gcap["wrapped_tokens"] == 0
    for r in (drop, gcap):
        assert r["plan_stats"]["max_repeat"] <= 5 and r["repeats"]["max"] <= 5
    # drop never draws a removed member: fewer distinct documents than the per-document cap
    assert drop["repeats"]["unique_docs"] < none["repeats"]["unique_docs"]
    for r in runs.values():
        assert r["heldout_novel_micro"] is not None and r["heldout_novel_micro"] != r["heldout_micro"]
    table = (out / "experiment" / "results.md").read_text()
    assert "near-copy in the training split" in table and "| clusterclip-R5-groupcap |" in table


def test_a_strategy_added_to_the_planners_registry_alone_runs_in_plan_and_in_the_experiment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A toy strategy registered in one place (the planner's registry) builds a plan and is trained by a quick
    experiment, with no list of the experiment's own to extend."""
    from clusterclip.plan import strategies

    class Smallest(strategies.Uniform):
        """Every cluster's weight is the inverse of its size (the smallest first)."""

        name = "smallest"
        SUMMARY = "cluster weights 1 / n_c"

        @classmethod
        def weights(cls, sizes: np.ndarray, options: Any) -> np.ndarray:
            return np.where(sizes > 0, 1.0 / np.maximum(sizes, 1), 0.0)

    monkeypatch.setitem(strategies.STRATEGIES, Smallest.name, Smallest)
    labels = np.repeat([0, 1, 2], [60, 30, 10])
    plan = build_plan(labels, PlanConfig(strategy="smallest", budget=60, max_repeat=3))
    drawn = np.bincount(labels[np.asarray(plan.order)], minlength=3)
    assert drawn[2] > drawn[1] > drawn[0] and drawn.sum() == 60  # uniform draws them equally, random by size
    res = run_experiment([_toy_corpus(tmp_path / "toy.jsonl")], tmp_path / "run",
                         quick_config(strategies=("random", "smallest")))
    trained = {r.split("/")[0].split("-")[0] for r in res["runs"]}
    assert res["status"] == "complete" and trained == {"random", "smallest"}
