"""``clusterclip add``: append new documents to a finished run."""

from __future__ import annotations

import argparse
from typing import Any

from clusterclip.add.drift import format_drift
from clusterclip.add.lineage import abort_add
from clusterclip.add.workflow import READ_FIELDS, AddConfig, add_documents
from clusterclip.cli.options import add_common, add_engine, command
from clusterclip.contract.corpus import CorpusRecord
from clusterclip.contract.stages import record_paths
from clusterclip.corpus.records import ReadOptions
from clusterclip.errors import ClusterClipError
from clusterclip.settings import add_arguments, from_args
from clusterclip.stages import writing
from clusterclip.store import RunDir
from clusterclip.store.lineage import check_record_files


def add_add_parser(sub: Any) -> argparse.ArgumentParser:
    p = command(sub, "add", cmd_add, "append new documents to a finished run",
                "Append NEW_INPUT documents after the corpus: new corpus parts, embeddings of the new documents "
                "only, assignment to the existing (frozen) centroids, and a drift report (drift.json) that "
                "recommends `cluster --refit` when many new documents are far from every centroid. Killed, "
                "re-run it to finish (or --abort it); re-run after it finished, it changes nothing. An input whose "
                "bytes are already in the run is refused, documents whose text is are skipped (--allow-duplicates).",
                ("clusterclip add runs/web data/2024-02/*.jsonl.gz",
                 "clusterclip add runs/web new.parquet --text-field content --drift-threshold 0.2",
                 "clusterclip add runs/web --abort                 # undo an interrupted add"),
                run_dir="finished run directory (corpus, embed and cluster stages)")
    p.add_argument("new_inputs", nargs="*", metavar="NEW_INPUT", help="files or folders to add (formats as for run)")
    p.add_argument("--abort", action="store_true",
                   help="undo an interrupted add: remove its new parts and shards and its journal, restore the records")
    g = p.add_argument_group("reader options (default: those the corpus stage recorded)")
    add_arguments(g, ReadOptions, READ_FIELDS, unset=True)
    add_arguments(p, AddConfig, overrides={"allow_duplicates": {"action": "store_true"}})
    add_engine(p.add_argument_group("engine"))
    add_common(p, force=False)
    return p


def cmd_add(a: argparse.Namespace) -> int:
    if a.abort != (not a.new_inputs):
        raise ClusterClipError("clusterclip add needs NEW_INPUT... to add, or --abort alone to undo an interrupted add")
    run = RunDir(a.run_dir)
    check_record_files(record_paths(run))
    if a.abort:
        with writing(run):
            print(abort_add(run))
        return 0
    with writing(run) as run:
        recorded = CorpusRecord.require(run, verify=False).read_options(READ_FIELDS)
        read = from_args(ReadOptions, a, READ_FIELDS, base=ReadOptions(**recorded))
        report = add_documents(run, a.new_inputs, read, from_args(AddConfig, a), progress=not a.quiet,
                               engine=a.engine)
    print(format_drift(report, run))
    return 0
