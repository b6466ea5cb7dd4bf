"""Planner throughput and memory vs two baselines, measured side by side in one process.

    .venv/bin/python benchmarks/plan/bench_plan.py --write
    .venv/bin/python benchmarks/plan/bench_plan.py --baseline-src ../before/src   # A/B against another checkout

Corpus: N documents in K clusters with Zipf-like sizes (n_c ~ 1/rank). Methods:

* ours: ``build_plan`` (clusterclip, cap R) into an in-memory int64 array, in each ``--orders`` order
  (the paper's equal-rate rounds, and ``spread``, which merges draws by per-cluster virtual time);
* torch ``WeightedRandomSampler`` with per-document weights 1/n_c (i.i.d., with replacement), iterated
  as a training loop consumes it; torch.multinomial refuses more than 2^24 categories, so N <= 2^24;
* numpy: pick a cluster uniformly, then a member uniformly (i.i.d., no cap), written in 1M chunks.

Each method runs in a forked child: wall time, and peak memory as the growth of the child's peak RSS
over its RSS at the start (the shared input labels are not counted). With ``--baseline-src`` every
planner run is repeated, alternately, with ``build_plan`` imported from another checkout's ``src``
(each in a fresh interpreter), so a change can be compared under the same load.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from clusterclip.plan import PlanConfig, build_plan

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from memwatch import AnonPeak

RESULTS = Path(__file__).resolve().parents[1] / "RESULTS.md"
START, END = "<!-- bench_plan:start -->", "<!-- bench_plan:end -->"


def zipf_labels(n: int, k: int, seed: int = 0) -> np.ndarray:
    w = 1.0 / np.arange(1, k + 1)
    sizes = np.maximum(1, np.floor(w / w.sum() * n)).astype(np.int64)
    sizes[0] += n - sizes.sum()
    labels = np.repeat(np.arange(k, dtype=np.int32), sizes)
    np.random.default_rng(seed).shuffle(labels)
    return labels


def _rss_bytes() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def measure(fn) -> tuple[float, int]:
    """Run ``fn`` in a forked child: wall seconds and peak RSS growth over the child's start (bytes)."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()

    def child() -> None:
        start = _rss_bytes()
        t = time.perf_counter()
        fn()
        dt = time.perf_counter() - t
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        queue.put((dt, peak - start))

    proc = ctx.Process(target=child)
    proc.start()
    result = queue.get()
    proc.join()
    return result


def numpy_baseline(labels: np.ndarray, budget: int, seed: int = 0) -> np.ndarray:
    k = int(labels.max()) + 1
    sizes = np.bincount(labels, minlength=k)
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    members = np.argsort(labels.astype(np.uint16) if k <= 65536 else labels, kind="stable")
    rng = np.random.default_rng(seed)
    out = np.empty(budget, np.int64)
    for s in range(0, budget, 1 << 20):
        e = min(s + (1 << 20), budget)
        c = rng.integers(0, k, e - s)
        out[s:e] = members[offsets[c] + (rng.random(e - s) * sizes[c]).astype(np.int64)]
    return out


def wrs_baseline(labels: np.ndarray, budget: int) -> np.ndarray:
    import torch

    sizes = np.bincount(labels)
    weights = torch.from_numpy(1.0 / sizes[labels])
    sampler = torch.utils.data.WeightedRandomSampler(weights, budget, replacement=True)
    return np.fromiter(iter(sampler), dtype=np.int64, count=budget)


def memmap_check(labels: np.ndarray, draws: int, tmp: Path) -> None:
    """Stream a huge plan to disk; report time and peak anonymous RSS (file pages are page cache)."""
    watch = AnonPeak(0.2)
    cap = -(-draws // labels.size) + 10
    out = tmp / "bench-plan-memmap.npy"
    try:
        t = time.perf_counter()
        plan = build_plan(labels, PlanConfig(strategy="clusterclip", budget=draws, max_repeat=cap), out=out)
        dt = time.perf_counter() - t
        print(f"{draws:,} draws (clusterclip R={cap}) streamed to a memory-mapped .npy of "
              f"{out.stat().st_size / (1 << 30):.2f} GiB in {dt:.1f} s ({draws / dt / 1e6:.1f} M draws/s); "
              f"peak anonymous RSS {watch.read() / (1 << 20):.2f} GiB; length {plan.order.shape[0]:,}")
    finally:
        out.unlink(missing_ok=True)


def child_run(spec: str) -> None:
    """``--child``: build one plan and print its wall time and peak RSS growth as JSON."""
    o = json.loads(spec)
    labels = zipf_labels(o["n"], o["k"])
    start = _rss_bytes()
    t = time.perf_counter()
    build_plan(labels, PlanConfig(**o["config"]))
    dt = time.perf_counter() - t
    print(json.dumps([dt, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - start]))


def measure_src(src: str, n: int, k: int, config: dict) -> tuple[float, int]:
    """Time ``build_plan`` imported from ``src`` (a checkout's ``src`` folder) in a fresh interpreter."""
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
    spec = json.dumps({"n": n, "k": k, "config": config})
    out = subprocess.run([sys.executable, __file__, "--child", spec], env=env, check=True,
                         capture_output=True, text=True).stdout
    dt, peak = json.loads(out.strip().splitlines()[-1])
    return dt, peak


def ab_rows(a: argparse.Namespace, configs: list[tuple[str, dict]]) -> list[str]:
    """Alternate ours and the baseline checkout for every planner config, ``--repeats`` times each."""
    ours_src = str(Path(__file__).resolve().parents[2] / "src")
    lines = ["| plan | draws | ours s (min) | baseline s (min) | ours / baseline |", "|---|---|---|---|---|"]
    for name, cfg in configs:
        times: dict[str, list[float]] = {"ours": [], "base": []}
        for _ in range(a.repeats):
            for who, src in (("ours", ours_src), ("base", a.baseline_src)):
                times[who].append(measure_src(src, a.n, a.k, cfg)[0])
        o, b = min(times["ours"]), min(times["base"])
        lines.append(f"| {name} | {cfg['budget']:,} | {o:.2f} | {b:.2f} | {o / b:.2f} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--k", type=int, default=10_000)
    ap.add_argument("--budget", type=int, default=100_000_000)
    ap.add_argument("--wrs-budget", type=int, default=10_000_000, help="WRS is slow: measured on a sub-budget")
    ap.add_argument("--orders", nargs="+", default=["equal-rate", "spread"], help="plan orders to measure")
    ap.add_argument("--write", action="store_true", help=f"write the results into {RESULTS.name}")
    ap.add_argument("--memmap-draws", type=int, default=0,
                    help="instead: stream a plan of this many draws into a memory-mapped .npy in --tmp")
    ap.add_argument("--tmp", default="/tmp", help="folder for --memmap-draws (the file is deleted after)")
    ap.add_argument("--baseline-src", help="instead: A/B the planner against this checkout's src folder")
    ap.add_argument("--repeats", type=int, default=2, help="with --baseline-src: runs per side (min is kept)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child_run(a.child)
        return
    runs = [(4, min(a.budget, 4 * a.n)), (max(4, -(-a.budget // a.n) + 6), a.budget)]
    configs = [(f"clusterclip R={cap}, {order}", {"strategy": "clusterclip", "budget": budget, "max_repeat": cap,
                                                  "order": order})
               for order in a.orders for cap, budget in runs]
    configs.append(("random", {"strategy": "random", "budget": a.budget}))
    if a.baseline_src:
        print("\n".join(ab_rows(a, configs)))
        print(f"N={a.n:,}, K={a.k:,}; load average at end {os.getloadavg()[0]:.1f}")
        return
    labels = zipf_labels(a.n, a.k)
    if a.memmap_draws:
        memmap_check(labels, a.memmap_draws, Path(a.tmp))
        return
    gb = 1 << 30
    rows = []
    for name, cfg in configs:
        dt, peak = measure(lambda cfg=cfg: build_plan(labels, PlanConfig(**cfg)))
        rows.append((f"ours {name}", cfg["budget"], dt, peak, 8 * cfg["budget"] + 16 * a.n))
    wrs_name, np_name = "torch WeightedRandomSampler (1/n_c per doc)", "numpy uniform cluster then member"
    dt, peak = measure(lambda: wrs_baseline(labels, a.wrs_budget))
    rows.append((wrs_name, a.wrs_budget, dt, peak, None))
    dt, peak = measure(lambda: numpy_baseline(labels, a.budget))
    rows.append((np_name, a.budget, dt, peak, None))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20)
    rate = {name: budget / dt for name, budget, dt, _, _ in rows}
    wrs_rate = rate[wrs_name]
    np_rate = rate[np_name]
    lines = [
        "| method | draws | seconds | M draws/s | x WRS | x numpy | peak RSS growth GiB "
        "| allowance GiB (8 B/draw + 16 B/doc) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, budget, dt, peak, allowance in rows:
        r = budget / dt
        lines.append(f"| {name} | {budget:,} | {dt:.2f} | {r / 1e6:.2f} | {r / wrs_rate:.1f} | {r / np_rate:.2f} | "
                     f"{peak / gb:.2f} | {'' if allowance is None else f'{allowance / gb:.2f}'} |")
    load = os.getloadavg()
    header = (f"N={a.n:,} documents, K={a.k:,} Zipf-like clusters (largest {np.bincount(labels).max():,}, "
              f"smallest {np.bincount(labels).min():,}); parent peak RSS {rss:.2f} GiB; "
              f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, numpy {np.__version__}, "
              f"load average at end {load[0]:.1f}.")
    text = "\n".join([header, "", *lines])
    print(text)
    if a.write:
        cmd = "    " + " ".join([".venv/bin/python", *sys.argv])
        note = ("R=4 runs at the largest feasible budget (4 N); 100 M draws needs R >= 10 under the cap. "
                "The spread order merges each chunk's draws by virtual time (a sort per chunk), where the "
                "equal-rate order of equal weights writes whole rounds. "
                "WRS and numpy are i.i.d. with replacement (no passes, no cap), so they do less work. "
                "The machine is shared (load 3-5 on 2 cores): rates move by 2x between runs, compare "
                "ratios within one run. Peak RSS growth includes the output array (8 B/draw).")
        heading = "### Sampling plan: `benchmarks/plan/bench_plan.py`"
        section = "\n".join([START, heading, "", cmd, "", text, "", note, "", END])
        _write_section(section, START, END)


def _write_section(section: str, start: str, end: str) -> None:
    """Replace this benchmark's marked section of RESULTS.md (or append it), keeping the others."""
    old = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    if start in old and end in old:
        new = old[: old.index(start)] + section + old[old.index(end) + len(end):]
    else:
        new = old.rstrip("\n") + "\n\n" + section + "\n"
    RESULTS.write_text(new)


if __name__ == "__main__":
    main()
