"""Resume a 2-rank training loop at 1 and 3 ranks with another batch size, mid-epoch and in a later epoch.

The loops are the recipes of docs/sampling.md, verbatim (``test_docs_show_these_recipes``): a plain
``DataLoader`` with prefetching workers saving ``state_dict(consumed_batches=, batch_size=)``, and torchdata's
``StatefulDataLoader`` saving its own state. Ranks are processes in a gloo group; what each rank trained is
logged, and per epoch the ranks' batches, interleaved, must be the plan in order plus the stated pad.
"""

from __future__ import annotations

import inspect
import json
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist
from torch.utils.data import DataLoader

from clusterclip.torch import ClusterClipSampler, load_plan, sampler_state

PLAN = "clusterclip-R4-docs-Bepoch-s0"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "sampling.md"
README = DOCS.parent.parent / "README.md"


# -- the recipes (docs/sampling.md shows these functions as they are)

def plain_loop(run_dir, plan_name, dataset, batch_size, epochs, checkpoint, train_step):
    sampler = ClusterClipSampler(run_dir, plan_name=plan_name)  # rank and world size from torch.distributed
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=2)
    if checkpoint is not None:
        sampler.load_state_dict(checkpoint["sampler"])   # exact at any world size and batch size
    for epoch in range(sampler.epoch, epochs):           # continue in the saved epoch
        sampler.set_epoch(epoch)
        for step, batch in enumerate(loader):
            train_step(batch)
            # save what was *trained*: this epoch's batches so far, per rank (the loader fetched more)
            yield {"sampler": sampler.state_dict(consumed_batches=step + 1, batch_size=batch_size)}


def stateful_loop(run_dir, plan_name, dataset, batch_size, epochs, checkpoint, train_step):
    from torchdata.stateful_dataloader import StatefulDataLoader

    sampler = ClusterClipSampler(run_dir, plan_name=plan_name)
    if checkpoint is not None:                            # any world size, batch size, number of workers
        sampler.load_state_dict(sampler_state(checkpoint["loader"]))
    loader = StatefulDataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=2)
    for epoch in range(sampler.epoch, epochs):
        sampler.set_epoch(epoch)
        for batch in loader:
            train_step(batch)
            yield {"loader": loader.state_dict()}        # the sampler's state as of this batch


RECIPES = {"plain": plain_loop, "stateful": stateful_loop}


def test_docs_show_these_recipes():
    text = DOCS.read_text(encoding="utf-8")
    for recipe in RECIPES.values():
        assert inspect.getsource(recipe) in text, f"docs/sampling.md does not show {recipe.__name__} as tested"
    assert inspect.getsource(plain_loop) in README.read_text(encoding="utf-8"), "README shows plain_loop as tested"


# -- running a recipe on ranks and logging what each trained

def _state_of(ckpt: dict[str, Any]) -> dict[str, Any]:
    return ckpt["sampler"] if "sampler" in ckpt else sampler_state(ckpt["loader"])


def log_until_stop(loop: Any, trained: list[Any], state_of: Callable[[Any], dict[str, Any]], job: dict[str, Any],
                   rank: int) -> None:
    """Run ``loop`` until ``job["stop"]`` checkpoints (or the end), log every trained batch (the last of
    ``trained``) and its state, save rank 0's checkpoint at the stop and write this rank's log."""
    log = []
    for i, ckpt in enumerate(loop):
        log.append({"batch": trained[-1], "state": state_of(ckpt)})
        if i + 1 == job.get("stop"):
            if rank == 0:
                torch.save(ckpt, job["out"] + ".ckpt")
            break
    loop.close()
    Path(f"{job['out']}.rank{rank}.json").write_text(json.dumps(log))


def _record(job: dict[str, Any], rank: int) -> None:
    """Run the recipe of ``job["loader"]`` on this rank and log what it trained."""
    checkpoint = torch.load(job["resume"], weights_only=False) if job["resume"] else None
    trained: list[Any] = []
    documents = range(job["n_docs"])  # row i is document i
    loop = RECIPES[job["loader"]](job["run"], PLAN, documents, job["batch"], job["epochs"], checkpoint,
                                  lambda batch: trained.append(batch.tolist()))
    log_until_stop(loop, trained, _state_of, job, rank)


def _rank_main(rank: int, world_size: int, job: dict[str, Any], record: Callable[[dict[str, Any], int], None]) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(job["port"]))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        record(job, rank)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_ranks(world_size: int, record: Callable[[dict[str, Any], int], None] = _record,
              **job: Any) -> list[list[dict[str, Any]]]:
    """``record`` (default: this module's recipes) on ``world_size`` ranks (processes in a gloo group; one rank
    runs here); each rank's log."""
    job = {"resume": None, "port": _free_port(), **job}
    if world_size == 1:
        record(job, 0)
    else:
        torch.multiprocessing.start_processes(_rank_main, args=(world_size, job, record), nprocs=world_size,
                                              start_method="fork")
    return [json.loads(Path(f"{job['out']}.rank{r}.json").read_text()) for r in range(world_size)]


def by_epoch(logs: list[list[dict[str, Any]]]) -> dict[int, tuple[list[int], int]]:
    """Per epoch: the global order the ranks trained (step by step, element by element, rank by rank) and
    the pad its states state. A state at position 0 of epoch ``e + 1`` is the end of epoch ``e``."""
    out: dict[int, tuple[list[int], int]] = {}
    assert len({len(log) for log in logs}) == 1, "every rank trains as many batches"
    for step in range(len(logs[0])):
        state = logs[0][step]["state"]
        epoch = state["epoch"] - 1 if state["consumed"] == 0 else state["epoch"]
        batches = [log[step]["batch"] for log in logs]
        order, pad = out.get(epoch, ([], 0))
        order.extend(b[i] for i in range(len(batches[0])) for b in batches)
        out[epoch] = (order, pad if state["consumed"] == 0 else state["pad"])
    return out


def make_run_dir(tmp: Path) -> Path:
    """A run of 101 documents (odd, so every world size pads) with three plans, built by the CLI."""
    from clusterclip.cli.main import main
    from tests.test_cli import make_corpus

    corpus = make_corpus(tmp / "c.jsonl", {"cooking": 45, "astronomy": 30, "finance": 16, "sailing": 10})
    assert main(["run", str(corpus), "--out", str(tmp / "run"), "--embedder", "hashing", "--k", "4", "--epochs", "1",
                 "--budget-unit", "docs", "-q"]) == 0
    return tmp / "run"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run_dir(tmp_path_factory.mktemp("resume"))


@pytest.mark.slow
@pytest.mark.parametrize("loader", ["plain", "stateful"])
def test_two_ranks_resumed_at_one_and_three_ranks(run_dir, tmp_path, loader):
    if loader == "stateful":
        pytest.importorskip("torchdata.stateful_dataloader")
    plan = load_plan(run_dir, PLAN).tolist()
    total, n_docs = len(plan), int(np.load(run_dir / "labels.npy").shape[0])
    assert total % 2 and total % 3, "an odd plan length, so every world size pads"
    common = {"run": str(run_dir), "n_docs": n_docs, "loader": loader}
    per_epoch_2 = -(-total // 2) // 4 + 1  # batches of 4 per rank in one epoch at 2 ranks
    # one 2-rank run: stopped mid-epoch 0 (after 3 steps) and mid-epoch 1 (3 steps into it)
    first = run_ranks(2, **common, batch=4, epochs=3, stop=3, out=str(tmp_path / "a"))
    later = run_ranks(2, **common, batch=4, epochs=3, stop=per_epoch_2 + 3, out=str(tmp_path / "b"))
    assert [x["batch"] for x in later[0][:3]] == [x["batch"] for x in first[0]], "deterministic"
    resumed3 = run_ranks(3, **common, batch=3, epochs=2, resume=str(tmp_path / "a.ckpt"), out=str(tmp_path / "c"))
    resumed1 = run_ranks(1, **common, batch=7, epochs=3, resume=str(tmp_path / "b.ckpt"), out=str(tmp_path / "d"))
    for before, after, epochs in ((first, resumed3, [0, 1]), (later, resumed1, [1, 2])):
        head, tail = by_epoch(before), by_epoch(after)
        assert sorted(tail) == epochs
        for e in epochs:
            order, pad = tail[e]
            if e == epochs[0]:
                order = head[e][0] + order  # the epoch the run was stopped in: trained before + after
            assert order == plan + plan[:pad], f"epoch {e}: the plan in order, then the stated pad"
            assert pad == (-(total - (len(head[e][0]) if e == epochs[0] else 0))) % len(after)


def test_a_plain_dataloader_cannot_save_what_it_fetched_ahead(run_dir):
    sampler = ClusterClipSampler(run_dir, rank=0, world_size=2, plan_name=PLAN)
    it = iter(DataLoader(range(10_000), batch_size=4, sampler=sampler, num_workers=2, prefetch_factor=4))
    next(it)
    with pytest.raises(ValueError, match="consumed_batches"):
        sampler.state_dict()
    state = sampler.state_dict(consumed_batches=1, batch_size=4)
    assert (state["epoch"], state["consumed"], state["counted"]) == (0, 8, "consumed")
    assert sampler.consumed > 8, "the loader fetched ahead; the saved state did not follow it"
    del it
