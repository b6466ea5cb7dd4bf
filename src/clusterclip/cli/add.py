"""``clusterclip add``: append new documents to a finished run."""

from __future__ import annotations

import argparse
from typing import Any

from clusterclip.add import READ_FIELDS, AddConfig, add_documents, format_drift
from clusterclip.cli.options import add_common, add_engine, command, writing
from clusterclip.corpus import ReadOptions
from clusterclip.settings import add_arguments, from_args
from clusterclip.store import RunDir
from clusterclip.store import layout as A


def add_add_parser(sub: Any) -> argparse.ArgumentParser:
    p = command(sub, "add", cmd_add, "append new documents to a finished run",
                "Append NEW_INPUT documents after the corpus: new corpus parts, embeddings of the new documents "
                "only, assignment to the existing (frozen) centroids, and a drift report (drift.json) that "
                "recommends `cluster --refit` when many new documents are far from every centroid. Killed, "
                "re-run it to finish; re-run after it finished, it changes nothing.",
                run_dir="finished run directory (corpus, embed and cluster stages)")
    p.add_argument("new_inputs", nargs="+", metavar="NEW_INPUT", help="files or folders to add (formats as for run)")
    g = p.add_argument_group("reader options (default: those the corpus stage recorded)")
    add_arguments(g, ReadOptions, READ_FIELDS, unset=True)
    add_arguments(p, AddConfig)
    add_engine(p.add_argument_group("engine"))
    add_common(p, force=False)
    return p


def cmd_add(a: argparse.Namespace) -> int:
    with writing(RunDir(a.run_dir)) as run:
        recorded = run.require(A.CORPUS_STAGE, verify=False)["config"]
        read = from_args(ReadOptions, a, READ_FIELDS, base=ReadOptions(**{f: recorded[f] for f in READ_FIELDS}))
        report = add_documents(run, a.new_inputs, read, from_args(AddConfig, a), progress=not a.quiet,
                               engine=a.engine)
    print(format_drift(report, run))
    return 0
