"""The hostile sweep's ``continuations`` family (issue 42): chains from roots of every duplicate mode.

For each mode (``none``, ``drop``, ``group-cap``, ``rehydrate``) a root is planned with ``--max-repeat 2`` on the
sweep's base run (its duplicate groups are the 25 copied documents), then continued as a careless user would:
``plan --continue`` with a strategy whose own default cap is none (``random``), a continuation of that
continuation, an online mixer steering a chain from the root, an explicit override (which must be named), a
budget beyond what the root's caps leave, and the duplicate groups changed by ``dedup --force`` between the root
and its continuation. Every chain that is written is checked position by position (the parent's prefix up to
each switch, then the last plan whole) against what its root promised: the per-document cap (``none``), the cap
per duplicate group (``group-cap``; ``rehydrate``: the curve of the group's size, capped by ``--max-repeat``) and
no dropped copy drawn (``drop``). A chain that breaks a promise is ``silent``. Then the refusals: ``--consumed``
out of range, a parent that is not there, ``--epochs`` with ``--continue``.

``plan`` runs in the snippet's process (``clusterclip.cli.main.main``): its refusal is its own one line, exit 2.
"""

from __future__ import annotations

from collections.abc import Iterator

from hostile_cases import Case
from hostile_online import _result, _snippet

MODES = ("none", "drop", "group-cap", "rehydrate")

CHAINS = '''\
import contextlib, io, sys
from clusterclip.cli.main import main
from clusterclip.contract.dedup import load_groups
from clusterclip.contract.plan import PlanRecord, plan_stage_name
from clusterclip.plan.config import PlanConfig
from clusterclip.store import RunDir
GROUPS = load_groups(RunDir(RUN))

def cli(*argv):
    """``clusterclip *argv`` in this process, its stdout; a refusal ends the case with its own line (exit 2)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main([str(a) for a in argv])
    if rc:
        sys.exit(rc)
    return out.getvalue()

def new_plan(*argv):
    """The name of the plan ``clusterclip plan RUN *argv`` wrote, and what it printed."""
    before = set(list_plans(RunDir(RUN)))
    out = cli("plan", RUN, *argv)
    (name,) = set(list_plans(RunDir(RUN))) - before
    return name, out

def root(mode, budget=150):
    return new_plan("--strategy", "clusterclip", "--duplicates", mode, "--max-repeat", 2, "--budget", budget, "-q")[0]

def order(name):
    """A plan's order as written (read directly: the checks must see a root that a later command made stale)."""
    return np.load(Path(RUN, "plans", name, "plan.npy"))

def config(name):
    return PlanConfig.from_json(PlanRecord.require(RunDir(RUN), plan_stage_name(name), verify=False).config)

def broken(root_name, chain, groups=None):
    """What ``chain`` (every position of a chain from ``root_name``) breaks of what the root promised, under the
    duplicate groups the root was planned on (``groups``; default: the run's), or None."""
    cfg, chain = config(root_name), np.asarray(chain, np.int64)
    group, kept = GROUPS if groups is None else groups
    mode, cap = cfg.duplicates, cfg.effective_max_repeat
    if mode == "none":
        units, limit, what = chain, np.full(group.size, cap, np.float64), "a document"
    else:
        units, limit, what = group[chain], np.full(kept.size, cap, np.float64), "a duplicate group"
        if mode == "rehydrate":
            from clusterclip.plan.strata_spec import parse_curve
            curve = parse_curve(cfg.rehydrate_curve)
            bounds, times = np.array([s for s, _ in curve]), np.array([t for _, t in curve], np.float64)
            sizes = np.bincount(group, minlength=kept.size)
            limit = np.minimum(times[np.searchsorted(bounds, sizes, side="right") - 1], cap)
    counts = np.bincount(units, minlength=limit.size)
    if (counts > limit).any():
        i = int(np.argmax(counts - limit))
        return f"{what} drawn {counts[i]} times under a cap of {limit[i]:g} ({mode})"
    if mode == "drop" and not np.isin(chain, kept).all():
        return f"{int((~np.isin(chain, kept)).sum())} draws of copies a drop root leaves out"
    return None

def check(root_name, chain, last, groups=None, out=""):
    """The case's result: the chain keeps its root's promise, ``last`` kept the root's duplicate policy and
    the output named no override."""
    wrong = broken(root_name, chain, groups)
    if wrong is None and config(last).duplicates != config(root_name).duplicates:
        wrong = f"{last} has duplicates {config(last).duplicates!r}, its root {config(root_name).duplicates!r}"
    if wrong is None and "overrides" in out:
        wrong = "an override named where none was given"
    result(wrong is None, wrong or "")
'''


def _mode_cases(mode: str) -> Iterator[Case]:
    begin = f"r = root({mode!r})\n"
    cont = "c, out = new_plan('--continue', r, '--consumed', 100, '--strategy', 'random', '--budget', 100)\n"
    bodies = {
        "plan --continue": cont + "check(r, np.r_[order(r)[:100], order(c)], c, out=out)\n",
        "a continuation of its continuation": cont
        + "c2, out2 = new_plan('--continue', c, '--consumed', 40, '--strategy', 'uniform')\n"
          "check(r, np.r_[order(r)[:100], order(c)[:40], order(c2)], c2, out=out + out2)\n",
        "an online chain": "seen = []\nm = steer(OnlineMixer(RUN, r, every=40), 120, seen=seen)\n"
                           "assert m.plan != r, 'the mixer never switched'\n"
                           "check(r, np.r_[seen[:m.start], order(m.plan)], m.plan)\n",
        "a budget beyond what its caps leave": "c, out = new_plan('--continue', r, '--consumed', 100, '--strategy', "
                                               "'random', '--budget', 10**4)\n"
                                               "check(r, np.r_[order(r)[:100], order(c)], c)\n",
        "its duplicate groups changed by dedup --force": "before = GROUPS\n"
        "cli('dedup', RUN, '--force', '--eps', 0.3, '-q')\n" + cont.replace("100)", "50)")
        + "check(r, np.r_[order(r)[:100], order(c)], c, groups=before, out=out)\n",
        "its duplicate groups split by dedup --force": "cli('dedup', RUN, '--force', '--eps', 0.3, '-q')\n"
        "before = load_groups(RunDir(RUN))\n" + begin.replace(")", ", 120)")
        + "cli('dedup', RUN, '--force', '--eps', 0.05, '-q')\n" + cont.replace("100)", "50)")
        + "check(r, np.r_[order(r)[:100], order(c)], c, groups=before, out=out)\n",
    }
    for name, body in bodies.items():
        expect = "either" if "beyond" in name or "dedup" in name else "ok"
        code = CHAINS + body if "split" in name else CHAINS + begin + body
        yield Case("continuations", f"{mode} root, {name}", code=_snippet(code), expect=expect,
                   check=_result, timeout=240)
    other = "group-cap" if mode == "none" else "none"
    body = (begin + f"c, out = new_plan('--continue', r, '--consumed', 100, '--duplicates', {other!r}, "
            "'--budget', 50)\n"
            f"named = \"overrides what its parent promised: duplicates {mode!r} -> {other!r}\" in out\n"
            "recorded = PlanRecord.require(RunDir(RUN), plan_stage_name(c), verify=False).stats.get('overrides')\n"
            f"result(named and (recorded or {{}}).get('duplicates') == [{mode!r}, {other!r}], "
            "f'output {out!r}, record overrides {recorded}')\n")
    yield Case("continuations", f"{mode} root, --duplicates {other} given explicitly", code=_snippet(CHAINS + body),
               expect="ok", check=_result, timeout=240)


REFUSED = {
    "--consumed past the root's end": "'--continue', r, '--consumed', 151",
    "--consumed -1": "'--continue', r, '--consumed', -1",
    "--consumed the whole root without --budget": "'--continue', r, '--consumed', 150",
    "--continue a plan that is not there": "'--continue', r + '-gone', '--consumed', 10",
    "--continue with --epochs": "'--continue', r, '--consumed', 10, '--epochs', 2",
}


def continuation_cases() -> Iterator[Case]:
    """The ``continuations`` family: every mode's chains, then the refusals (on a ``group-cap`` root)."""
    for mode in MODES:
        yield from _mode_cases(mode)
    for name, argv in REFUSED.items():
        body = f"r = root('group-cap')\nnew_plan({argv})\n"
        yield Case("continuations", name, code=_snippet(CHAINS + body), expect="error", timeout=240)
