"""``clusterclip plan``: one sampling plan from the clusters (or the continuation of one)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from clusterclip.cli.options import add_common, add_plan, command, explicit_plan_settings, plan_configs
from clusterclip.contract.plan_notes import clip_note
from clusterclip.contract.stages import record_paths
from clusterclip.errors import ClusterClipError
from clusterclip.plan.chain import overrides_note
from clusterclip.plan.stage import continuation, plan_stage
from clusterclip.stages import writing
from clusterclip.store import RunDir
from clusterclip.store.lineage import check_record_files
from clusterclip.summary import format_summary


def add_plan_parser(sub: Any) -> argparse.ArgumentParser:
    p = command(sub, "plan", cmd_plan, "build a sampling plan from the clusters",
                "Write plans/<name>/plan.npy (int64 document indices in training order) and its statistics.",
                ("clusterclip plan runs/web --max-repeat 4 --budget 2000000 --budget-unit tokens   # clusterclip",
                 "clusterclip plan runs/web --strategy temperature --tau 0.5",
                 "clusterclip plan runs/web --strategy clusterclip --order spread",
                 "clusterclip plan runs/web --duplicates group-cap          # after `clusterclip dedup`",
                 "clusterclip plan runs/web --continue PLAN --consumed 600064 --max-repeat 3"),
                run_dir="run directory with clusters")
    add_plan(p, multi=False)
    g = p.add_argument_group("continuing a plan mid-training (docs/workflows.md)")
    g.add_argument("--continue", dest="continue_plan", metavar="PLAN", default=None,
                   help="plan name under plans/ to continue: plan the rest of the run under the options given "
                        "here, counting the parent's first --consumed draws against the cap; --budget is the "
                        "continuation's own length (default: what remains of the parent)")
    g.add_argument("--consumed", type=int, default=None, metavar="N",
                   help="positions of the --continue plan already trained on (e.g. step x global batch size)")
    p.add_argument("--json", action="store_true",
                   help="print the plan's path and statistics as JSON (default: a one-line summary; -q: nothing)")
    add_common(p)
    return p


def cmd_plan(a: argparse.Namespace) -> int:
    (cfg,) = plan_configs(a, [a.strategy])
    if (a.continue_plan is None) != (a.consumed is None):
        raise ClusterClipError("--continue PLAN and --consumed N go together: continue PLAN after N positions")
    check_record_files(record_paths(RunDir(a.run_dir)))
    with writing(RunDir(a.run_dir)) as run:
        if a.continue_plan is None:
            rec = plan_stage(run, cfg, force=a.force)
        else:
            cfg, parent = continuation(run, cfg, a.continue_plan, a.consumed, explicit_plan_settings(a))
            rec = plan_stage(run, cfg, force=a.force, continues=parent)
    path = run.path(rec.order_file())
    if a.json:
        print(json.dumps({"plan": str(path), "name": rec.name, "identity": rec.identity, "stats": rec.stats},
                         indent=2, default=str))
    elif not a.quiet:
        stats = {k: v for k, v in rec.stats.items() if v is not None}
        summary = format_summary({"run_dir": str(run.root), "plans": {rec.name: stats}})
        print(f"{summary.splitlines()[1].removeprefix('plan:').strip()} ({path})")
        for note in (clip_note(rec.stats, cfg.budget_unit), overrides_note(rec.stats.get("overrides") or {})):
            if note:
                print(f"  {note}")
    return 0
