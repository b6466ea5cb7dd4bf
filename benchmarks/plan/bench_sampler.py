"""Sampler overhead per rank at 8 simulated ranks: ClusterClipSampler vs torch DistributedSampler.

    .venv/bin/python benchmarks/plan/bench_sampler.py --write

A plan of ``--draws`` indices is memory-mapped from a temporary ``plan.npy``; each of 8 ranks iterates
its share (a) bare, as ``for i in sampler``, and (b) inside a ``DataLoader`` over a dataset that
returns the index (batch 256, num_workers 0), which is what a training loop pays on top of loading.
The baseline is ``DistributedSampler(shuffle=True)`` over a dataset of the same length.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from clusterclip.torch import ClusterClipSampler

sys.path.insert(0, str(Path(__file__).parent))
from bench_plan import _write_section

START, END = "<!-- bench_sampler:start -->", "<!-- bench_sampler:end -->"


class Indices(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


def rate_bare(sampler) -> float:
    t = time.perf_counter()
    count = sum(1 for _ in sampler)
    return count / (time.perf_counter() - t)


def rate_loader(sampler, n: int) -> float:
    loader = DataLoader(Indices(n), batch_size=256, sampler=sampler, num_workers=0)
    t = time.perf_counter()
    count = sum(b.numel() for b in loader)
    return count / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draws", type=int, default=8_000_000)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    n = a.draws // 4
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "plan.npy"
        np.save(path, np.random.default_rng(0).integers(0, n, a.draws).astype(np.int64))
        res = {"ClusterClipSampler (memmap plan)": [], "DistributedSampler (shuffle)": []}
        for r in range(a.ranks):
            ours = ClusterClipSampler(path, rank=r, world_size=a.ranks, n_docs=n)
            base = DistributedSampler(Indices(a.draws), num_replicas=a.ranks, rank=r, shuffle=True, seed=0)
            res["ClusterClipSampler (memmap plan)"].append((rate_bare(ours), rate_loader(ours, n)))
            res["DistributedSampler (shuffle)"].append((rate_bare(base), rate_loader(base, a.draws)))
    lines = ["| sampler | bare M idx/s per rank (mean of ranks) | DataLoader M idx/s per rank |", "|---|---|---|"]
    for name, vals in res.items():
        v = np.array(vals)
        lines.append(f"| {name} | {v[:, 0].mean() / 1e6:.2f} | {v[:, 1].mean() / 1e6:.2f} |")
    text = "\n".join([f"{a.draws:,} planned draws, {a.ranks} simulated ranks ({a.draws // a.ranks:,} each), "
                      f"torch {torch.__version__}, batch 256, num_workers 0.", "", *lines])
    print(text)
    if a.write:
        cmd = "    " + " ".join([".venv/bin/python", *sys.argv])
        heading = "### Sampler overhead: `benchmarks/plan/bench_sampler.py`"
        _write_section("\n".join([START, heading, "", cmd, "", text, "", END]), START, END)


if __name__ == "__main__":
    main()
