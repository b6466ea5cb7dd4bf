"""litdata exports in real 2-rank loops: every planned row read once per epoch, resumed exactly.

Two recipes of docs/export.md, verbatim (``test_docs_show_these_recipes``):

- ``litdata_loop``: ``ClusterClipSampler.from_export`` drives a ``DataLoader`` over litdata's
  ``StreamingDataset`` (``ExportRows``), so a 2-rank run stopped mid-epoch or in a later epoch resumes at 1
  and 3 ranks with another batch size: per epoch the ranks' rows, interleaved, are the plan in order plus the
  stated pad.
- ``litdata_native_loop``: litdata's own ``StreamingDataLoader``. It drops rows that do not fill a batch on
  every rank; an export padded with ``--pad-to-multiple`` (ranks x batch size) is read whole, and the loader's
  own state resumes it exactly at the same world size and batch size (only there: measured below).

Rows are tokenized (uint16 ids of different lengths) and batched by ``TokenCollator``; every batch goes
through an ``nn.Embedding``, so a dtype a model rejects fails the test.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("litdata")

from torch.utils.data import DataLoader

from clusterclip.export.stage import export_plan
from clusterclip.torch import ClusterClipSampler, ExportRows, TokenCollator, load_plan
from tests import test_resume_loops as loops
from tests.test_export_formats import _tokenizer
from tests.test_resume_loops import PLAN, by_epoch, log_until_stop, make_run_dir

DOCS = Path(__file__).resolve().parent.parent / "docs" / "export.md"


# -- the recipes (docs/export.md shows these functions as they are)

def litdata_loop(export_dir, batch_size, epochs, checkpoint, train_step):
    from litdata import StreamingDataset

    sampler = ClusterClipSampler.from_export(export_dir)  # checks export.json against litdata's index.json
    rows = ExportRows(StreamingDataset(export_dir, shuffle=False))  # rows[i]: row i of the export
    loader = DataLoader(rows, batch_size=batch_size, sampler=sampler, num_workers=2, collate_fn=TokenCollator())
    if checkpoint is not None:
        sampler.load_state_dict(checkpoint["sampler"])  # any world size and batch size; another plan's is refused
    for epoch in range(sampler.epoch, epochs):
        sampler.set_epoch(epoch)
        for step, batch in enumerate(loader):
            train_step(batch)  # batch["input_ids"]: int64 [batch, longest], padded; batch["labels"]: -100 on pads
            yield {"sampler": sampler.state_dict(consumed_batches=step + 1, batch_size=batch_size)}


def litdata_native_loop(export_dir, batch_size, epochs, checkpoint, train_step):
    from litdata import StreamingDataLoader, StreamingDataset

    dataset = StreamingDataset(export_dir, shuffle=False)
    loader = StreamingDataLoader(dataset, batch_size=batch_size, num_workers=2, collate_fn=TokenCollator())
    if checkpoint is not None:
        loader.load_state_dict(checkpoint["loader"])  # the same world size and batch size only
    for _ in range(epochs):
        for batch in loader:
            train_step(batch)
            yield {"loader": loader.state_dict()}


RECIPES = {"sampler": litdata_loop, "native": litdata_native_loop}


def test_docs_show_these_recipes():
    text = DOCS.read_text(encoding="utf-8")
    for recipe in RECIPES.values():
        assert inspect.getsource(recipe) in text, f"docs/export.md does not show {recipe.__name__} as tested"


# -- running a recipe on ranks and logging what each trained

def _record(job: dict[str, Any], rank: int) -> None:
    """Run the recipe of ``job["loader"]`` on this rank and log the rows (their ``index``) it trained."""
    checkpoint = torch.load(job["resume"], weights_only=False) if job["resume"] else None
    embed = torch.nn.Embedding(job["vocab"], 4)
    trained: list[Any] = []

    def train_step(batch: dict[str, Any]) -> None:
        embed(batch["input_ids"])  # int64: a uint16 tensor would raise here
        trained.append(batch["index"].tolist())

    loop = RECIPES[job["loader"]](job["export"], job["batch"], job["epochs"], checkpoint, train_step)
    log_until_stop(loop, trained, lambda ckpt: ckpt.get("sampler", {"epoch": 0, "consumed": 1, "pad": 0}), job, rank)


def run_ranks(world_size: int, **job: Any) -> list[list[dict[str, Any]]]:
    return loops.run_ranks(world_size, _record, **job)


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("litdata")
    run = make_run_dir(tmp)
    tok = _tokenizer(tmp)
    opts = {"fmt": "litdata", "tokenizer": tok, "append_eos": True}
    export_plan(run, PLAN, tmp / "lit", **opts)
    export_plan(run, PLAN, tmp / "lit8", pad_to_multiple=8, **opts)  # 2 ranks x batch size 4
    return {"plan": load_plan(run, PLAN).tolist(), "lit": str(tmp / "lit"), "lit8": str(tmp / "lit8"), "vocab": 200}


@pytest.mark.slow
def test_two_ranks_resumed_at_one_and_three_ranks_through_the_sampler(exports, tmp_path):
    plan, total = exports["plan"], len(exports["plan"])
    common = {"export": exports["lit"], "vocab": exports["vocab"], "loader": "sampler"}
    per_epoch_2 = -(-total // 2) // 4 + 1
    first = run_ranks(2, **common, batch=4, epochs=3, stop=3, out=str(tmp_path / "a"))
    later = run_ranks(2, **common, batch=4, epochs=3, stop=per_epoch_2 + 3, out=str(tmp_path / "b"))
    resumed3 = run_ranks(3, **common, batch=3, epochs=2, resume=str(tmp_path / "a.ckpt"), out=str(tmp_path / "c"))
    resumed1 = run_ranks(1, **common, batch=7, epochs=3, resume=str(tmp_path / "b.ckpt"), out=str(tmp_path / "d"))
    for before, after, epochs in ((first, resumed3, [0, 1]), (later, resumed1, [1, 2])):
        head, tail = by_epoch(before), by_epoch(after)
        assert sorted(tail) == epochs
        for e in epochs:
            order, pad = tail[e]
            if e == epochs[0]:
                order = head[e][0] + order
            assert order == plan + plan[:pad], f"epoch {e}: the plan in order, then the stated pad"


def _rows(logs: list[list[dict[str, Any]]]) -> list[int]:
    return sorted(x for log in logs for step in log for x in step["batch"])


@pytest.mark.slow
def test_litdata_own_loader_reads_a_padded_export_whole_and_resumes_at_the_same_size(exports, tmp_path):
    plan, total = exports["plan"], len(exports["plan"])
    common = {"vocab": exports["vocab"], "loader": "native", "epochs": 1}
    unpadded = run_ranks(2, **common, export=exports["lit"], batch=4, out=str(tmp_path / "u"))
    assert len(_rows(unpadded)) == total // 8 * 8 < total, "litdata drops rows that do not fill every rank's batch"
    whole = run_ranks(2, **common, export=exports["lit8"], batch=4, out=str(tmp_path / "w"))
    padded = plan + plan[:(-total) % 8]
    assert _rows(whole) == sorted(padded), "every planned row once, plus the export's pad"
    first = run_ranks(2, **common, export=exports["lit8"], batch=4, stop=3, out=str(tmp_path / "a"))
    rest = run_ranks(2, **common, export=exports["lit8"], batch=4, resume=str(tmp_path / "a.ckpt"),
                     out=str(tmp_path / "b"))
    assert sorted(_rows(first) + _rows(rest)) == sorted(padded), "resumed at the same size: nothing lost or repeated"
    other = run_ranks(3, **common, export=exports["lit8"], batch=3, resume=str(tmp_path / "a.ckpt"),
                      out=str(tmp_path / "c"))
    assert len(_rows(first)) + len(_rows(other)) < len(padded), "at another size litdata loses rows (documented)"


def test_sampler_over_a_litdata_export_refuses_another_plans_state(exports):
    sampler = ClusterClipSampler.from_export(exports["lit8"], rank=0, world_size=1)
    other = ClusterClipSampler.from_export(exports["lit"], rank=0, world_size=1)
    with pytest.raises(Exception, match="state is from plan"):
        sampler.load_state_dict(other.state_dict())
    rows = ExportRows(__import__("litdata").StreamingDataset(exports["lit"], shuffle=False))
    batch = TokenCollator(pad_id=0)([rows[0], rows[1], rows[2]])
    assert batch["input_ids"].dtype == torch.int64 and batch["index"].tolist() == exports["plan"][:3]
    lengths = [len(rows[i]["tokens"]) for i in range(3)]
    assert batch["attention_mask"].sum(1).tolist() == lengths
    assert (batch["labels"] == -100).sum().item() == sum(max(lengths) - n for n in lengths)
    assert np.array_equal(batch["input_ids"][0, :lengths[0]].numpy(), rows[0]["tokens"].astype(np.int64))
