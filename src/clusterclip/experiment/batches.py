"""The proxy's training batches, read through ``ClusterClipSampler``: the sampler a training job uses.

The plan the experiment built is replayed by :class:`~clusterclip.torch.ClusterClipSampler` (rank 0 of 1)
feeding a ``DataLoader`` over the training documents, one document per item; :class:`PlanBatches` lays the
documents it yields back to back and cuts that token stream into batches of consecutive ``context``-token
sequences. Sequence ``j`` predicts stream tokens ``j*context+1 .. (j+1)*context`` from the ones before, so
the batches follow the plan order exactly. A plan whose stream is shorter than the steps need (token plans
end on a document boundary) continues with its next epoch, the plan again from its start;
``wrapped_tokens`` counts those tokens. Documents are read only as the batches need them, so the sampler's
state after training says how far the loop got.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from clusterclip.errors import ClusterClipError
from clusterclip.experiment.data import TokenizedDocs
from clusterclip.torch.sampler import ClusterClipSampler

__all__ = ["DocTokens", "PlanBatches"]


class DocTokens(Dataset):
    """Map-style tokenized documents: item ``i`` is ``(i, tokens of document i)``, its EOS included."""

    def __init__(self, docs: TokenizedDocs) -> None:
        self.docs = docs

    def __len__(self) -> int:
        return len(self.docs)

    def __getitem__(self, index: int) -> tuple[int, np.ndarray]:
        lo, hi = self.docs.offsets[index], self.docs.offsets[index + 1]
        return int(index), self.docs.flat[lo:hi]


def _as_is(item: tuple[int, np.ndarray]) -> tuple[int, np.ndarray]:
    """The loader's collate function: one document as the dataset returns it (no tensor conversion)."""
    return item


class PlanBatches:
    """``(inputs, targets)`` batches ``[batch_size, context]`` (int64) of the plan's token stream, in plan order.

    ``plan`` is anything ``ClusterClipSampler`` takes (a ``Plan``, an index array, a ``plan.npy`` path or a
    run directory with ``plan_name``). ``consumed`` lists the documents the batches read, in the order read
    (every epoch); :meth:`state` is the sampler's state after them.
    """

    def __init__(self, docs: TokenizedDocs, plan: Any, batch_size: int, context: int,
                 plan_name: str | None = None) -> None:
        self.sampler = ClusterClipSampler(plan, rank=0, world_size=1, plan_name=plan_name, n_docs=len(docs))
        if self.sampler.total == 0:
            raise ClusterClipError("empty plan: nothing to train on")
        self.loader = DataLoader(DocTokens(docs), batch_size=None, sampler=self.sampler, collate_fn=_as_is,
                                 generator=torch.Generator())  # its own seed draw: the global RNG stays untouched
        self.batch_size, self.context = int(batch_size), int(context)
        self.consumed: list[int] = []
        self.batches = 0
        self._read_in_pass = 0
        self._first_epoch_tokens = 0

    def _documents(self) -> Iterator[np.ndarray]:
        """The tokens of every document the loader yields, epoch after epoch."""
        while True:
            self._read_in_pass = 0
            for index, tokens in self.loader:
                self.consumed.append(index)
                self._read_in_pass += 1
                if len(self.consumed) <= self.sampler.total:
                    self._first_epoch_tokens += tokens.size
                yield tokens

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        size = self.batch_size * self.context
        pending: list[np.ndarray] = []
        held = 0
        for tokens in self._documents():
            pending.append(tokens)
            held += tokens.size
            while held > size:
                stream = np.concatenate(pending)
                x = stream[:size].reshape(self.batch_size, self.context)
                y = stream[1:size + 1].reshape(self.batch_size, self.context)
                pending, held = [stream[size:]], held - size
                self.batches += 1
                yield torch.from_numpy(x.astype(np.int64)), torch.from_numpy(y.astype(np.int64))

    @property
    def trained_tokens(self) -> int:
        """Stream tokens the batches handed out cover (inputs and the last target)."""
        return self.batches * self.batch_size * self.context + 1 if self.batches else 0

    @property
    def wrapped_tokens(self) -> int:
        """Tokens of those taken from a second pass over the plan (the stream continued from its start)."""
        if len(self.consumed) <= self.sampler.total:
            return 0
        return max(0, self.trained_tokens - self._first_epoch_tokens)

    def used(self) -> np.ndarray:
        """The plan's documents the batches read in its first pass (a repeated pass adds none)."""
        return np.asarray(self.consumed[: self.sampler.total], dtype=np.int64)

    def state(self) -> dict[str, Any]:
        """The sampler's state after the documents read (``ClusterClipSampler.state_dict``), checked against
        them: its epoch and position count exactly the documents the loop consumed."""
        state = self.sampler.state_dict(consumed_batches=self._read_in_pass, batch_size=1)
        if state["epoch"] * self.sampler.total + state["consumed"] != len(self.consumed):
            raise ClusterClipError(f"sampler state at epoch {state['epoch']} position {state['consumed']} of "
                                   f"{self.sampler.total}, but the loop read {len(self.consumed)} documents")
        return state
