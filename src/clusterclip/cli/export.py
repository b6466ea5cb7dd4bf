"""``clusterclip export``: the planned stream in a trainer's format."""

from __future__ import annotations

import argparse
from typing import Any

from clusterclip.cli.options import Renamed, add_common, add_engine, command, engine_config
from clusterclip.export.stage import ExportConfig, export_plan
from clusterclip.settings import add_arguments, from_args
from clusterclip.store import RunDir


def add_export_parser(sub: Any) -> argparse.ArgumentParser:
    p = command(sub, "export", cmd_export, "write the planned stream for a trainer (JSONL, Parquet, hf, litdata, "
                "Megatron, MDS), or per-cluster sources and their blend (--blend)",
                "Write the documents in plan order (repeats expanded) in a trainer's format, or with --blend one "
                "Megatron source per cluster and the plan's token mixture as blend files for Megatron-LM and "
                "OLMo-core; see docs/export.md. --tokenizer takes a tokenizer.json or a folder holding one, or a "
                "Hugging Face name (gpt2) found in the local cache: fetching a name needs the network and "
                "HF_HUB_OFFLINE=0 (the command line runs offline by default).",
                ("clusterclip export runs/web --format parquet --dest shards/",
                 "clusterclip export runs/web --format megatron --tokenizer t.json --append-eos --dest meg/",
                 "clusterclip export runs/web --format litdata --tokenizer gpt2 --seq-len 2048 --dest lit/",
                 "clusterclip export runs/web --plan NAME --blend --format megatron --tokenizer t.json --dest b/",
                 "clusterclip export runs/chat --plan NAME --format hf --dest sft/   # the chat records, kept",
                 "clusterclip export runs/chat --format litdata --tokenizer tok/ --assistant-only-loss --dest l/"),
                run_dir="run directory with at least one plan")
    p.add_argument("--plan", default=None, help="plan name under plans/ (default: the only plan)")
    p.add_argument("--dest", "--out", action=Renamed, old=("--out",), required=True, metavar="DIR",
                   help="output folder: missing, empty, or this plan's own earlier export")
    flags = {"action": "store_true"}
    add_arguments(p, ExportConfig, overrides={"append_eos": flags, "blend": flags, "assistant_only_loss": flags,
                                              "keep_record": {"action": argparse.BooleanOptionalAction}})
    add_engine(p.add_argument_group("engine (the one-pass export of a corpus over --memory-mb)"))
    add_common(p)
    return p


def cmd_export(a: argparse.Namespace) -> int:
    written = export_plan(RunDir(a.run_dir), a.plan, a.dest, from_args(ExportConfig, a), force=a.force,
                          engine=engine_config(a))
    for path in written:
        print(path)
    return 0
