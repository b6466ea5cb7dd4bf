"""The hostile sweep's cases for online mixing (issue 42): what a hostile or careless user does to an online chain, a
mixer's state and a trainer run past the end of its plan. Run by ``benchmarks/hostile/hostile_sweep.py`` with the other
families of ``benchmarks/hostile/hostile_cases.py``.

Families:

* ``online-state`` (mixer states): a checkpoint's ``OnlineMixer.state_dict()`` with one field missing, unknown,
  of the wrong type or out of range, a plan outside the root's chain, another root, another run's identity,
  explicit constructor settings other than the checkpoint's; every constructor argument out of range; ``report``
  and ``maybe_switch`` given what they cannot use. All must be one line (exit 2); the state as saved resumes.
* ``online-chain`` (online chains): ``online.json`` edited, copied or without its ``mixer.json``, read by
  ``online_record``, ``status --verify`` and the report (which must leave it out); the run changed under a live
  mixer (``add``, ``cluster --refit``, ``cluster --k``) at the next update and on resume.
* ``trainer`` (past the end of a plan): ``PlanTrainer`` on a plan, an export and an online chain with ``max_steps``
  beyond their end: ``at_end="stop"`` trains up to the end and no further (checked), ``at_end="raise"`` refuses,
  and a resume at the end has nothing left.
* ``continuations`` (chains from roots of every duplicate mode): in ``benchmarks/hostile/hostile_chains.py``.

Each case is a Python snippet run in the case's folder: a ``ClusterClipError`` is its one-line refusal (exit 2);
a case that must succeed writes ``result.json`` (``{"ok": ..., "why": ...}``), which its check reads.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

from hostile_cases import ONE_LINE, Case

PRELUDE = '''\
import json, shutil, numpy as np
from pathlib import Path
from clusterclip.torch.mixer import OnlineMixer, online_record
from clusterclip.contract.plan import list_plans
RUN, NEW, CASE = "{run}", "{new}", "{case}"
ROOT = next(p for p in list_plans(__import__("clusterclip.store").store.RunDir(RUN)) if p.startswith("clusterclip"))
LABELS = np.load(RUN + "/labels.npy")

def steer(mixer, positions, batch=10, seen=None):
    """Train ``positions`` positions of the chain with losses by cluster, switching at every update (the
    documents trained, in order, appended to ``seen``)."""
    sampler, step, done = mixer.sampler(rank=0, world_size=1), 0, 0
    it = iter(sampler)
    while done < positions:
        ids = [next(it) for _ in range(batch)]
        step, done = step + 1, done + batch
        if seen is not None:
            seen.extend(ids)
        mixer.report(LABELS[ids], (1.0 + LABELS[ids]) / 4)
        new = mixer.maybe_switch(sampler.state_dict(consumed_batches=step, batch_size=batch), rank=0, world_size=1)
        if new is not None:
            sampler, it, step = new, iter(new), 0
    return mixer

def result(ok, why=""):
    Path(CASE, "result.json").write_text(json.dumps({"ok": bool(ok), "why": why}))
'''


def _snippet(body: str) -> str:
    """The prelude and ``body`` inside the sweep's one-line refusal (a ClusterClipError exits 2 on one line)."""
    return ONE_LINE.format(body=textwrap.indent(PRELUDE + textwrap.dedent(body), "    "))


def _result(case: Path) -> str | None:
    path = case / "result.json"
    if not path.exists():
        return "the snippet wrote no result.json"
    found = json.loads(path.read_text())
    return None if found.get("ok") else f"wrong: {found.get('why')}"


STATE_EDITS = {
    "missing plan": "s.pop('plan')",
    "unknown field": "s['surprise'] = 1",
    "every 0": "s['every'] = 0",
    "every text": "s['every'] = '60'",
    "start -1": "s['start'] = -1",
    "start off its chain": "s['start'] += 10",
    "start past the end": "s['start'] = 10**6",
    "sums too short": "s['sums'] = s['sums'][:1]",
    "counts negative": "s['counts'][0] = -1.0",
    "counts nan": "s['counts'][0] = float('nan')",
    "steps text": "s['steps'] = 'x'",
    "weights negative": "s['controller']['weights'][0] = -1.0",
    "weights not summing to 1": "s['controller']['weights'][0] += 0.5",
    "controller without weights": "del s['controller']['weights']",
    "controller unknown field": "s['controller']['temperature'] = 1",
    "controller seed -1": "s['controller']['seed'] = -1",
    "controller rule unknown": "s['controller']['rule'] = 'exp3'",
    "controller not a dict": "s['controller'] = 'bandit'",
    "format 3": "s['format'] = 3",
    "format missing": "s.pop('format')",
    "not a dict": "s = [1, 2]",
    "plan not in the run": "s['plan'] = 'gone'",
    "plan of another root": "s['plan'] = OTHER",
    "another root": "s['root'] = OTHER",
    "run K": "s['run']['k'] += 1",
    "run labels": "s['run']['labels'] = '0' * 64",
    "run documents": "s['run']['documents'] += 5",
    "run missing": "s.pop('run')",
}
EXPLICIT = {"every": "every=70", "rule": "rule='gradient'", "floor": "floor=0.2", "seed": "seed=9",
            "explore": "explore='odm'"}
CONSTRUCTOR = ("seed=-1", "seed='x'", "seed=2**64", "every=0", "every=True", "every=2.5", "every=None", "floor=2",
               "alpha=float('nan')", "eta=-1", "explore=0", "explore='fast'", "horizon=0", "florr=1", "rule='exp3'",
               "smoothing='x'")


def state_cases() -> Iterator[Case]:
    setup_other = ("from clusterclip.plan import PlanConfig\nfrom clusterclip.plan.stage import plan_stage\n"
                   "from clusterclip.store import RunDir\n"
                   "OTHER = plan_stage(RunDir(RUN), PlanConfig(strategy='uniform', budget=300)).name\n")
    for name, edit in STATE_EDITS.items():
        body = setup_other + ("m = steer(OnlineMixer(RUN, ROOT, every=60), 150)\n"
                              "s = json.loads(json.dumps(m.state_dict()))\n"
                              f"{edit}\nOnlineMixer(RUN, ROOT, every=60).load_state_dict(s)\n")
        yield Case("online-state", f"state {name}", code=_snippet(body), expect="error", timeout=150)
    for name, option in EXPLICIT.items():
        body = ("m = steer(OnlineMixer(RUN, ROOT, every=60), 150)\n"
                f"OnlineMixer(RUN, ROOT, **{{'every': 60, **dict({option})}}).load_state_dict(m.state_dict())\n")
        yield Case("online-state", f"explicit {name} differs from the checkpoint", code=_snippet(body),
                   expect="error", timeout=150)
    body = ("m = steer(OnlineMixer(RUN, ROOT, every=60), 150)\ns = json.loads(json.dumps(m.state_dict()))\n"
            "again = OnlineMixer(RUN, ROOT, every=60)\nagain.load_state_dict(s)\n"
            "result(again.state_dict() == s and again.plan != ROOT, 'the state as saved did not resume as saved')\n")
    yield Case("online-state", "state as saved resumes", code=_snippet(body), expect="ok", check=_result,
               timeout=150)
    for option in CONSTRUCTOR:
        body = f"OnlineMixer(RUN, ROOT, **{{'every': 60, **dict({option})}})\n"
        yield Case("online-state", f"constructor {option}", code=_snippet(body), expect="error", timeout=150)
    for name, call in {"missing root plan": "OnlineMixer(RUN, 'nope', every=60)",
                       "root plan None": "OnlineMixer(RUN, None, every=60)",
                       "run dir missing": "OnlineMixer(CASE + '/none', ROOT, every=60)",
                       "report float ids": "OnlineMixer(RUN, ROOT, every=60).report([1.5, 2.0], [1.0, 1.0])",
                       "report text ids": "OnlineMixer(RUN, ROOT, every=60).report(['a'], [1.0])",
                       "report id out of range": "OnlineMixer(RUN, ROOT, every=60).report([99], [1.0])",
                       "report lengths differ": "OnlineMixer(RUN, ROOT, every=60).report([1, 2], [1.0])",
                       "maybe_switch without consumed":
                           "OnlineMixer(RUN, ROOT, every=60).maybe_switch({'plan': ROOT})",
                       "maybe_switch not a state": "OnlineMixer(RUN, ROOT, every=60).maybe_switch('x')",
                       "maybe_switch other plan": "OnlineMixer(RUN, ROOT, every=60).maybe_switch("
                                                  "{'plan': 'x', 'consumed': 60})"}.items():
        yield Case("online-state", name, code=_snippet(call + "\n"), expect="error", timeout=150)


CHAIN_TAMPERS = {
    "weights edited": "r = json.loads(p.read_text()); r['controller']['weights'][0] += 0.01; "
                      "p.write_text(json.dumps(r))",
    "not json": "p.write_text('{not json')",
    "mixer.json deleted": "(p.parent / 'mixer.json').unlink()",
    "copied from another plan": "shutil.copy(Path(RUN, 'plans', FIRST, 'online.json'), p)",
    "mixer.json of another plan": "shutil.copy(Path(RUN, 'plans', FIRST, 'mixer.json'), p.parent / 'mixer.json')",
}
READERS = {
    "online_record": "online_record(RUN, m.plan)\n",
    "status --verify": "from clusterclip.cli.main import main\nfrom clusterclip.errors import ClusterClipError\n"
                       "if main(['status', RUN, '--verify']) == 1:\n"
                       "    raise ClusterClipError('status --verify: problems')\n",
    "report": "from clusterclip.report import build_report\n"
              "text = build_report(RUN, progress=False).read_text()\n"
              "result('left out of online mixing' in text, 'the report drew an online.json that does not match')\n",
}
CHANGES = {"add": "['add', RUN, NEW, '-q']", "cluster --refit": "['cluster', RUN, '--refit', '--force', '-q']",
           "cluster --k 5": "['cluster', RUN, '--k', '5', '--force', '-q']"}


def chain_cases() -> Iterator[Case]:
    steered = ("m = steer(OnlineMixer(RUN, ROOT, every=60), 200)\n"
               "FIRST = next(a['name'] for a in __import__('clusterclip.contract.plan').contract.plan.PlanRecord"
               ".require(__import__('clusterclip.store').store.RunDir(RUN), 'plans/' + m.plan + '/plan', "
               "verify=False).chain()[1:])\n"
               "p = Path(RUN, 'plans', m.plan, 'online.json')\n")
    for tamper, edit in CHAIN_TAMPERS.items():
        for reader, call in READERS.items():
            yield Case("online-chain", f"online.json {tamper}, {reader}", code=_snippet(steered + edit + "\n" + call),
                       expect="ok" if reader == "report" else "error", check=_result if reader == "report" else None,
                       timeout=200)
    for change, argv in CHANGES.items():
        body = ("from clusterclip.cli.main import main\nm = steer(OnlineMixer(RUN, ROOT, every=60), 100)\n"
                f"assert main({argv}) == 0\nm.maybe_update(m.start + 70)\n")
        yield Case("online-chain", f"{change} under a live mixer, next update", code=_snippet(body), expect="error",
                   timeout=240)
        body = ("from clusterclip.cli.main import main\nm = steer(OnlineMixer(RUN, ROOT, every=60), 100)\n"
                f"state = m.state_dict()\nassert main({argv}) == 0\n"
                "assert main(['plan', RUN, '--strategy', 'clusterclip', '--budget', '300', '--force', '-q']) == 0\n"
                "OnlineMixer(RUN, ROOT, every=60).load_state_dict(state)\n")
        yield Case("online-chain", f"{change} between stop and resume", code=_snippet(body), expect="error",
                   timeout=240)


TRAINER = '''\
import os
os.environ["HF_HUB_OFFLINE"] = "1"
import datasets, torch, transformers
from clusterclip.torch import load_plan
from clusterclip.torch.hf import PlanTrainer

class Logged(transformers.GPT2LMHeadModel):
    def forward(self, input_ids=None, labels=None, **kw):
        if self.training:
            self.trained.extend((input_ids[:, 0] - 1).tolist())
        return super().forward(input_ids=input_ids, labels=labels, **kw)

def trainer(max_steps, at_end="stop", rows=None, resume=None, **options):
    n = len(LABELS) if rows is None else rows
    torch.manual_seed(0)
    model = Logged(transformers.GPT2Config(vocab_size=n + 2, n_positions=8, n_embd=16, n_layer=1, n_head=2))
    model.trained = []
    data = datasets.Dataset.from_dict({"input_ids": [[i + 1] * 4 for i in range(n)],
                                       "labels": [[i + 1] * 4 for i in range(n)]})
    args = transformers.TrainingArguments(output_dir=CASE + "/out", per_device_train_batch_size=8,
                                          max_steps=max_steps, save_steps=1000, use_cpu=True, report_to=[])
    PlanTrainer(model=model, args=args, train_dataset=data, at_end=at_end, **options).train(
        resume_from_checkpoint=resume)
    return model.trained
'''
TRAINER_CASES = {
    "plan past its end, stop": ("ok", "plan = load_plan(RUN, ROOT).tolist()\n"
                                "got = trainer(100, plan=RUN, plan_name=ROOT)\n"
                                "result(got == plan[:len(plan) // 8 * 8], f'{len(got)} positions of a plan of "
                                "{len(plan)}')\n"),
    "plan past its end, raise": ("error", "trainer(100, 'raise', plan=RUN, plan_name=ROOT)\n"),
    "plan resumed at its end": ("error", "trainer(100, plan=RUN, plan_name=ROOT)\n"
                                "last = sorted(Path(CASE, 'out').glob('checkpoint-*'))[-1]\n"
                                "trainer(100, plan=RUN, plan_name=ROOT, resume=str(last))\n"),
    "online chain past its end, stop": (
        "ok", "m = OnlineMixer(RUN, ROOT, every=60)\ngot = trainer(100, online=m)\n"
              "length, cap = load_plan(RUN, ROOT).size, m.config.effective_max_repeat\ncounts = np.bincount(got)\n"
              "result(len(got) == length // 8 * 8 and counts.max() <= cap, f'{len(got)} positions of a chain of "
              "{length}, a document {counts.max()} times under cap {cap}')\n"),
    "online chain past its end, raise": ("error", "trainer(100, 'raise', online=OnlineMixer(RUN, ROOT, every=60))\n"),
    "export past its end, stop": (
        "ok", "rows = datasets.load_from_disk(CASE + '/export').num_rows\n"
              "got = trainer(100, rows=rows, export=CASE + '/export')\n"
              "result(got == list(range(rows // 8 * 8)), f'{len(got)} rows of {rows}')\n"),
}


def trainer_cases() -> Iterator[Case]:
    for name, (expect, body) in TRAINER_CASES.items():
        env = {"EXPORT_FORMAT": "hf"} if "export" in name else {}
        yield Case("trainer", name, code=_snippet(TRAINER + body), expect=expect,
                   check=_result if expect == "ok" else None, env=env, timeout=300)


def online_family_cases() -> list[Case]:
    return [*state_cases(), *chain_cases(), *trainer_cases()]
