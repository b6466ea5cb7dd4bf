"""Does the weight search's predictor earn its keep? The search as it is against the same number of proxy runs
spent on fresh draws from round 0's distribution (``--predictor none``), and against the grid, each choice
checked on split seeds no search saw.

Per corpus, three searches share one tune directory (so a run two of them need, such as random's or round 0's, is
trained once; a reused run still counts against ``--max-runs``, so every search gets the same number of runs):

* ``predictor``: ``--search weights --predictor loglinear`` (the default until this ablation; in its trust region);
* ``random draws``: the same settings with ``--predictor none`` (now the default): every round draws afresh
  around the natural mixture, as round 0 does (the same round 0, the same finals rule);
  both twice, with ``--plan-seed`` 0 and 1 (other draws in every round);
* ``grid``: the fixed plans (``--taus 0.5 --caps 4,6``, both orders), successive halving.

Every search then reruns its finalists (the grid: every candidate) and random on ``--check-split-seeds``: each
choice, and each search's best finalist, is compared with random on unseen pairs (expanded bootstrap, 95 %), and
the predictor's best finalist with the random draws' (paired on the same unseen pairs).

The proxies are CPU-sized (a 1-layer, 64-wide GPT on 600 documents of at most 80 words, 3 passes, K=12: about
6 s a run on an idle core) so that three corpora finish in a few hours on a shared 2-core machine::

    nice -n 10 env OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/python benchmarks/tune/search_ablation.py \\
        --corpus minipile=../shared/data/minipile.jsonl.gz \\
        --corpus polyglot=benchmarks/out/corpora/polyglot.jsonl.gz \\
        --corpus manpages=benchmarks/out/corpora/manpages.jsonl.gz --out benchmarks/out/ablation --jobs 2
    .venv/bin/python benchmarks/tune/search_ablation.py --out benchmarks/out/ablation --table

(``benchmarks/corpora/build_corpora.py --corpus polyglot`` and ``--corpus manpages`` build the two corpora from files on
the machine.) A killed run resumes: every finished proxy run is a record of the tune directory.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from clusterclip.experiment.config import ExperimentConfig, ModelConfig, TrainConfig
from clusterclip.experiment.stats import format_interval, paired_interval
from clusterclip.experiment.tune.config import TuneConfig
from clusterclip.experiment.tune.search_stage import run_tune

PROXY = ExperimentConfig(
    docs=600, max_words=80, k=12, passes=3.0, split_seeds=(0, 1, 2), seeds=(0, 1), curve_docs=32,
    model=ModelConfig(vocab_size=512, context=64, n_layer=1, n_head=2, d_model=64),
    train=TrainConfig(batch_size=8, warmup_steps=20, curve_points=2),
)
CHECK = (10, 11, 12)
WEIGHTS = TuneConfig(search=("weights",), weight_rounds=3, weight_runs=4, weight_pairs=2, max_minutes=None,
                     check_split_seeds=CHECK)
RUNS = 46
"""The weight search's runs at these settings: 3 rounds x 4 mixtures x 2 pairs, random on them, the best third
(4) and random on the 4 other pairs; every search gets this many."""
REPLICATES = (0, 1)
"""Seeds of the weight searches (``--plan-seed``: round 0's draws and every later round's): each is run twice."""
SEARCHES: dict[str, TuneConfig] = {
    **{f"predictor s{r}": replace(WEIGHTS, predictor="loglinear", plan_seed=r) for r in REPLICATES},
    **{f"random draws s{r}": replace(WEIGHTS, predictor="none", plan_seed=r) for r in REPLICATES},
    "grid": TuneConfig(taus=(0.5,), caps=(4, 6), max_minutes=None, check_split_seeds=CHECK),
}


def run_corpus(name: str, path: str, out: Path, jobs: int) -> None:
    """The three searches on one corpus, each result kept as ``out/<name>/<search>.json``."""
    root = out / name
    for search, tune in SEARCHES.items():
        keep = root / f"{search.replace(' ', '-')}.json"
        if keep.exists():
            continue
        t0 = time.perf_counter()
        res = run_tune([path], root / "run", PROXY, replace(tune, max_runs=RUNS, jobs=jobs), write_plan=False)
        res["ablation_seconds"] = round(time.perf_counter() - t0, 1)
        keep.parent.mkdir(parents=True, exist_ok=True)
        keep.write_text(json.dumps(res, indent=1))
        shutil.copy(root / "run" / "tune" / "results.json", keep.with_suffix(".tune.json"))
        print(f"{name} {search}: chose {res['winner']} in {res['ablation_seconds']:.0f}s "
              f"({res['progress']['search_runs']} search runs)", flush=True)


def runs_by_name(tune_dir: Path) -> dict[str, dict[tuple[int, int], dict[str, Any]]]:
    """Every finished proxy run of a tune directory: candidate -> (split, seed) -> metrics."""
    out: dict[str, dict[tuple[int, int], dict[str, Any]]] = {}
    for path in sorted((tune_dir / "runs").glob("*.json")):
        rec = json.loads(path.read_text())
        cfg = rec["config"]
        out.setdefault(cfg["spec"]["name"], {})[(int(cfg["split"]), int(cfg["seed"]))] = rec["metrics"]
    return out


def best_finalist(res: dict[str, Any]) -> str | None:
    """The feasible candidate with the lowest objective on the search's last complete comparison (the weight
    search's finals; the grid's last rung), whatever its verdict."""
    ws = res.get("weight_search")
    final = ws["final"] if ws else (res["trajectory"][-1]["scores"] if res.get("trajectory") else {})
    ok = [n for n, a in final.items() if a["feasible"]]
    return min(ok, key=lambda n: final[n]["objective"]["mean"], default=None)


def _unseen(res: dict[str, Any], name: str | None) -> str:
    if name is None or name == "random":
        return "0 (random)"
    a = (res.get("unseen") or {}).get("candidates", {}).get(name)
    return format_interval(a["objective"]) if a else "–"


def _rounds(res: dict[str, Any]) -> str:
    """Mean measured objective minus random (on the rounds' pairs) of round 0 and of the later rounds."""
    ws = res.get("weight_search")
    if not ws:
        return "–"
    means = []
    for rounds in (ws["rounds"][:1], ws["rounds"][1:]):
        vals = [c["measured"] for r in rounds for c in r["candidates"] if c["measured"] is not None]
        means.append(f"{sum(vals) / len(vals):+.3f} ({len(vals)})" if vals else "–")
    return " / ".join(means)


def head_to_head(root: Path, a: str | None, b: str | None, objective: str) -> str:
    """``a`` minus ``b`` on the unseen pairs both ran (paired), or why not."""
    if a is None or b is None:
        return "–"
    if a == b:
        return "same mixture"
    runs = runs_by_name(root / "run" / "tune")
    pairs = sorted(p for p in runs.get(a, {}) if p[0] in CHECK and p in runs.get(b, {}))
    if not pairs:
        return "–"
    return format_interval(paired_interval([runs[a][p][objective] - runs[b][p][objective] for p in pairs]))


def table(out: Path) -> str:
    """The markdown table of every corpus under ``out``."""
    lines = ["| corpus | search | search runs | minutes | chosen | chosen − random, unseen | best finalist | "
             "best finalist − random, unseen | round 0 / later rounds − random (in search) |",
             "|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for root in sorted(p for p in out.iterdir() if p.is_dir()):
        results = {s: json.loads(f.read_text()) for s in SEARCHES
                   if (f := root / f"{s.replace(' ', '-')}.json").exists()}
        best = {s: best_finalist(r) for s, r in results.items()}
        for s, r in results.items():
            lines.append(f"| {root.name} | {s} | {r['progress']['search_runs']} | {r['ablation_seconds'] / 60:.0f} | "
                         f"{r['winner']} | {_unseen(r, r['winner'])} | {best[s]} | {_unseen(r, best[s])} | "
                         f"{_rounds(r)} |")
        for r in REPLICATES:
            a, b = f"predictor s{r}", f"random draws s{r}"
            if a in results and b in results:
                notes.append(f"* {root.name}, seed {r}: the predictor's best finalist minus the random draws' on the "
                             f"unseen pairs: {head_to_head(root, best[a], best[b], results[a]['objective'])}")
    return "\n".join([*lines, "", *notes]) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", action="append", default=[], metavar="NAME=PATH", help="a corpus to search")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out/ablation"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--table", action="store_true", help="print the table of the finished searches")
    args = ap.parse_args()
    for item in args.corpus:
        name, _, path = item.partition("=")
        run_corpus(name, path, args.out, args.jobs)
    if args.table:
        print(table(args.out))


if __name__ == "__main__":
    main()
