"""Lineage sweep: seeded sequences of run / add / refit / plan / continue / killed add / re-run on a small
run directory, checking after every step that no document was lost or doubled and that every cap holds
over the whole chain of a continuation.

A *model* follows each sequence: the set of texts the run must hold (the base corpus, then every add's new
texts: a document whose text is already in the run is skipped, an input whose bytes are is refused) and
the order of every plan built (by identity), so a continuation's draws are summed over every ancestor's
consumed prefix from what was built, not from files that may have been re-planned since.

``python benchmarks/hostile/lineage_sweep.py`` prints one line per sequence; ``tests/test_tamper_sweep.py`` runs it
and asserts every check passed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tamper_sweep as tamper

from clusterclip.contract.stages import audit

OPS = ("add", "add-dup-file", "add-overlap", "refit", "plan", "continue", "kill-add-finish", "kill-add-abort",
       "rerun-subset", "rerun-all")
CAP = 2


@dataclass
class Model:
    """What the run must hold: its texts, inputs, and the orders of its plans by identity."""

    texts: set[str]
    inputs: list[Path]
    orders: dict[str, np.ndarray] = field(default_factory=dict)
    files: int = 0


def _texts(path: Path) -> list[str]:
    return [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines()]


def _new_input(root: Path, model: Model, rng: np.random.Generator, overlap: bool) -> Path:
    """A new JSONL input: fresh documents (unique ids), with known texts under new ids when ``overlap``."""
    model.files += 1
    fresh = tamper._corpus(root / f"fresh-{model.files}.jsonl", seed=1000 + model.files)
    rows = [json.loads(line) for line in fresh.read_text().splitlines()][: int(rng.integers(5, 40))]
    if overlap:
        known = sorted(model.texts)[: int(rng.integers(1, 20))]
        rows += [{"id": f"known-{i}", "text": t, "domain": "x"} for i, t in enumerate(known)]
    path = root / f"new-{model.files}.jsonl"
    path.write_text("".join(json.dumps({**r, "id": f"n{model.files}-{r['id']}"}) + "\n" for r in rows))
    fresh.unlink()
    return path


def _add(run: Any, path: Path, model: Model) -> None:
    from clusterclip.add.workflow import add_documents

    with run.lock():
        add_documents(run, [path], progress=False)
    model.texts |= set(_texts(path))
    model.inputs.append(path)


def _killed_add(run: Any, path: Path, model: Model, finish: bool) -> None:
    """An add that dies after its journal, then finished (its input rewritten with the same bytes) or aborted."""
    import clusterclip.add.workflow as workflow
    from clusterclip.add.lineage import abort_add

    real = workflow.embed_new
    workflow.embed_new = _die
    try:
        with run.lock():
            workflow.add_documents(run, [path], progress=False)
    except RuntimeError:
        pass
    finally:
        workflow.embed_new = real
    if finish:
        path.write_bytes(path.read_bytes())
        _add(run, path, model)
    else:
        with run.lock():
            abort_add(run)


def _die(*args: object, **kwargs: object) -> None:
    raise RuntimeError("killed")


def _plan(run: Any, model: Model, rng: np.random.Generator, cont: bool) -> None:
    from clusterclip.contract.plan import list_plans
    from clusterclip.errors import ClusterClipError
    from clusterclip.plan import PlanConfig
    from clusterclip.plan.stage import continuation, plan_stage

    cfg = PlanConfig(strategy="clusterclip", max_repeat=CAP, seed=int(rng.integers(0, 3)))
    with run.lock():
        names = [n for n in list_plans(run) if (run.record(f"plans/{n}/plan") or {}).get("identity") in model.orders]
        if cont and names:
            parent = names[int(rng.integers(0, len(names)))]
            length = int(run.record(f"plans/{parent}/plan")["stats"]["length"])
            try:
                cfg, info = continuation(run, cfg, parent, int(rng.integers(0, length + 1)))
                rec = plan_stage(run, cfg, continues=info).to_json()
            except ClusterClipError as exc:  # an infeasible budget is a one-line refusal, not a wrong plan
                assert "budget" in str(exc) or "left" in str(exc), exc
                return
        else:
            rec = plan_stage(run, cfg).to_json()
        model.orders[rec["identity"]] = np.load(run.path(f"plans/{rec['name']}/plan.npy"))


def _refit(run: Any) -> None:
    from clusterclip.cli.main import main

    assert main(["cluster", str(run.root), "--k", "4", "--refit", "--force", "-q"]) == 0


def _rerun(run: Any, model: Model, subset: bool) -> None:
    """``embed`` with only the original input must refuse; with every input it must change nothing."""
    from clusterclip.cli.main import main

    before = run.record_path("corpus").read_bytes()
    inputs = model.inputs[:1] if subset else model.inputs
    code = main(["embed", *map(str, inputs), "--out", str(run.root), "--embedder", "hashing", "-q"])
    added = len(model.inputs) > 1
    assert code == (2 if subset and added else 0), (code, subset, added)
    assert run.record_path("corpus").read_bytes() == before


def check(run: Any, model: Model) -> None:
    """No document lost or doubled; every plan's cap holds over its chain; the run verifies."""
    from clusterclip.contract.corpus import read_column
    from clusterclip.contract.plan import list_plans

    texts = read_column(run, "text")
    assert len(texts) == len(set(texts)), "a document was doubled"
    assert set(texts) == model.texts, "a document was lost or appeared"
    for name in list_plans(run):
        rec = run.record(f"plans/{name}/plan")
        if rec.get("identity") not in model.orders:
            continue
        drawn = np.bincount(model.orders[rec["identity"]], minlength=len(texts))
        for anc in rec.get("ancestors", []):
            prefix = model.orders[anc["identity"]][: anc["consumed"]]
            drawn[: np.bincount(prefix).size] += np.bincount(prefix)
        assert drawn.max(initial=0) <= CAP, f"{name}: a document drawn {drawn.max()} times over the chain"
    assert not run.path("add-journal.json").exists()
    assert not any(found for stage, found in audit(run).items()), audit(run)


def run_sequence(base: Path, work: Path, seed: int, steps: int) -> list[str]:
    """One seeded sequence of ``steps`` operations on a copy of ``base``; the operations done."""
    from clusterclip.store import RunDir

    rng = np.random.default_rng(seed)
    shutil.copytree(base / "run", work / "run")
    run = RunDir(work / "run")
    model = Model(set(_texts(base / "corpus.jsonl")), [base / "corpus.jsonl"])
    done = []
    for _ in range(steps):
        op = OPS[int(rng.integers(0, len(OPS)))]
        if op in ("add", "add-overlap"):
            _add(run, _new_input(work, model, rng, op == "add-overlap"), model)
        elif op == "add-dup-file":
            _dup_file(run, work, model)
        elif op.startswith("kill-add"):
            _killed_add(run, _new_input(work, model, rng, True), model, op == "kill-add-finish")
        elif op == "refit":
            _refit(run)
        elif op in ("plan", "continue"):
            _plan(run, model, rng, op == "continue")
        else:
            _rerun(run, model, op == "rerun-subset")
        check(run, model)
        done.append(op)
    return done


def _dup_file(run: Any, work: Path, model: Model) -> None:
    """A renamed copy of an input already in the run: refused (or, for a copy of an add's input, recognised
    as that add, already done); nothing changes."""
    from clusterclip.add.workflow import add_documents
    from clusterclip.errors import ClusterClipError

    src = model.inputs[int(len(model.inputs) > 1)]
    copy = Path(shutil.copy(src, work / f"copy-{model.files}.jsonl"))
    model.files += 1
    with run.lock():
        try:
            done = add_documents(run, [copy], progress=False)
        except ClusterClipError as exc:
            assert "same bytes" in str(exc), exc
            return
    assert done.get("already_added"), "a copy of an input was added again"


def build_base(root: Path) -> Path:
    """A finished small run (corpus, hashing embeddings, 4 clusters, one capped plan) and its input."""
    from clusterclip.cli.main import main

    root.mkdir(parents=True, exist_ok=True)
    corpus = tamper._corpus(root / "corpus.jsonl")
    assert main(["run", str(corpus), "--out", str(root / "run"), "--k", "4", "--embedder", "hashing",
                 "--strategies", "clusterclip", "--max-repeat", str(CAP), "-q"]) == 0
    return root


def sweep(root: Path, sequences: int = 20, steps: int = 10) -> list[tuple[int, list[str], float]]:
    """Run ``sequences`` seeded sequences; ``(seed, operations, seconds)`` each (a failed check raises)."""
    base = build_base(root / "base")
    out = []
    for seed in range(sequences):
        t0 = time.perf_counter()
        (root / f"s{seed}").mkdir()
        out.append((seed, run_sequence(base, root / f"s{seed}", seed, steps), time.perf_counter() - t0))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sequences", type=int, default=20)
    p.add_argument("--steps", type=int, default=10)
    a = p.parse_args()
    counts: dict[str, int] = {}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "base").mkdir()
        for seed, ops, seconds in sweep(Path(tmp), a.sequences, a.steps):
            print(f"seed {seed}: {' '.join(ops)}  ({seconds:.1f}s) ok")
            for op in ops:
                counts[op] = counts.get(op, 0) + 1
    print("\n| operation | steps checked |\n|---|---:|")
    for op, n in sorted(counts.items()):
        print(f"| {op} | {n} |")
    print(f"| **all** | {sum(counts.values())} |\n\n{a.sequences} sequences of {a.steps} steps, "
          f"{time.perf_counter() - t0:.0f} s, every check passed (a failing check stops the sweep); after every "
          "step: no document lost or doubled, every cap held over the whole continuation chain, no add journal "
          "left, the run audits clean")


if __name__ == "__main__":
    main()
