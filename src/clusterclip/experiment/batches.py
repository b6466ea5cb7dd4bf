"""The proxy's training batches, read through ``ClusterClipSampler``: the sampler a training job uses.

The plan the experiment built is replayed by :class:`~clusterclip.torch.ClusterClipSampler` (rank 0 of 1)
feeding a ``DataLoader`` over the training documents, one document per item; :class:`PlanBatches` lays the
documents it yields back to back and cuts that token stream into batches of consecutive ``context``-token
sequences. Sequence ``j`` predicts stream tokens ``j*context+1 .. (j+1)*context`` from the ones before, so
the batches follow the plan order exactly; a target outside the documents' ``mask`` (the prompts, under
``--objective sft``) is ``-1``, no target. A plan whose stream is shorter than the steps need (token plans
end on a document boundary) continues with its next epoch, the plan again from its start;
``wrapped_tokens`` counts those tokens. Documents are read only as the batches need them, so the sampler's
state after training says how far the loop got, and an online run (:mod:`clusterclip.experiment.online`) can
:meth:`~PlanBatches.switch` to a continuation at the next document and learn each target token's cluster
(``last_clusters``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
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
    (every epoch); :meth:`state` is the sampler's state after them. With ``labels`` (each document's cluster),
    ``last_clusters`` holds the cluster of every target token of the last batch; ``on_step``, when set, is the
    training loop's hook after every step (``train_model`` calls it).
    """

    def __init__(self, docs: TokenizedDocs, plan: Any, batch_size: int, context: int,
                 plan_name: str | None = None, labels: np.ndarray | None = None) -> None:
        self.docs = docs
        self._open(plan, plan_name)
        self.batch_size, self.context = int(batch_size), int(context)
        self.labels = None if labels is None else np.asarray(labels, np.int64)
        self.last_clusters: np.ndarray | None = None
        self.on_step: Callable[[int, torch.Tensor], None] | None = None
        self.consumed: list[int] = []
        self.batches = 0
        self._plan_start = 0
        self._first_pass: int | None = None
        self._switched = False
        self._read_in_pass = 0
        self._first_epoch_tokens = 0

    def _open(self, plan: Any, plan_name: str | None = None) -> None:
        self.sampler = ClusterClipSampler(plan, rank=0, world_size=1, plan_name=plan_name, n_docs=len(self.docs))
        if self.sampler.total == 0:
            raise ClusterClipError("empty plan: nothing to train on")
        self.loader = DataLoader(DocTokens(self.docs), batch_size=None, sampler=self.sampler, collate_fn=_as_is,
                                 generator=torch.Generator())  # its own seed draw: the global RNG stays untouched

    def switch(self, plan: Any) -> int | None:
        """Read the documents after those read so far from ``plan`` (a continuation of the current plan from
        here); returns the position reached in the current plan, or None (nothing switched) once its first
        pass has ended."""
        if self._first_pass is not None:
            return None
        position = len(self.consumed) - self._plan_start
        self._open(plan)
        self._plan_start, self._switched = len(self.consumed), True
        return position

    def _documents(self) -> Iterator[tuple[int, np.ndarray]]:
        """Every document the loader yields, epoch after epoch, from the plan current when it is read."""
        while True:
            self._switched, self._read_in_pass = False, 0
            for index, tokens in self.loader:
                self.consumed.append(index)
                self._read_in_pass += 1
                if self._first_pass is None:
                    self._first_epoch_tokens += tokens.size
                yield index, tokens
                if self._switched:
                    break
            else:
                if self._first_pass is None:
                    self._first_pass = len(self.consumed)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        size = self.batch_size * self.context
        pending: list[np.ndarray] = []
        clusters: list[np.ndarray] = []
        masks: list[np.ndarray] = []
        held = 0
        for index, tokens in self._documents():
            pending.append(tokens)
            if self.labels is not None:
                clusters.append(np.full(tokens.size, self.labels[index], np.int64))
            if self.docs.mask is not None:
                masks.append(self.docs.mask[self.docs.offsets[index]:self.docs.offsets[index + 1]])
            held += tokens.size
            while held > size:
                stream = np.concatenate(pending)
                x = stream[:size].reshape(self.batch_size, self.context)
                y = stream[1:size + 1].reshape(self.batch_size, self.context)
                if masks:  # a token outside the mask (a prompt's, --objective sft) is no target: -1
                    scored = np.concatenate(masks)
                    y = np.where(scored[1:size + 1].reshape(y.shape), y, -1)
                    masks = [scored[size:]]
                pending, held = [stream[size:]], held - size
                if self.labels is not None:
                    ids = np.concatenate(clusters)
                    self.last_clusters = ids[1:size + 1].reshape(self.batch_size, self.context)
                    clusters = [ids[size:]]
                self.batches += 1
                yield torch.from_numpy(x.astype(np.int64)), torch.from_numpy(y.astype(np.int64))

    @property
    def trained_tokens(self) -> int:
        """Stream tokens the batches handed out cover (inputs and the last target)."""
        return self.batches * self.batch_size * self.context + 1 if self.batches else 0

    @property
    def wrapped_tokens(self) -> int:
        """Tokens of those taken from a second pass over the plan (the stream continued from its start)."""
        if self._first_pass is None or len(self.consumed) <= self._first_pass:
            return 0
        return max(0, self.trained_tokens - self._first_epoch_tokens)

    def used(self) -> np.ndarray:
        """The plan's documents the batches read in its first pass (a repeated pass adds none); after switches,
        those of every plan of the chain, each up to its switch."""
        return np.asarray(self.consumed[: self._first_pass], dtype=np.int64)

    def state(self) -> dict[str, Any]:
        """The sampler's state after the documents read (``ClusterClipSampler.state_dict``), checked against
        them: its epoch and position count exactly the documents the loop consumed from the current plan."""
        read = len(self.consumed) - self._plan_start
        state = self.sampler.state_dict(consumed_batches=self._read_in_pass, batch_size=1)
        if state["epoch"] * self.sampler.total + state["consumed"] != read:
            raise ClusterClipError(f"sampler state at epoch {state['epoch']} position {state['consumed']} of "
                                   f"{self.sampler.total}, but the loop read {read} documents of the current plan")
        return state
