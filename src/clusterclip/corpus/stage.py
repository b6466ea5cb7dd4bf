"""The corpus stage: read the inputs (or the default corpus) once into ``corpus/part-*.parquet`` and
``tokens.npy``, giving every document a stable index (its position in input order), so later stages never
re-parse user files."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from clusterclip.contract.corpus import (
    CORPUS_DIR,
    CORPUS_ID_SPILL,
    CORPUS_PART_GLOB,
    CORPUS_STAGE,
    CORPUS_STAGING,
    DEFAULT_IDENTITY,
    TOKENS,
    CorpusRecord,
    corpus_part,
)
from clusterclip.corpus import limits
from clusterclip.corpus.config import CORPUS_FIELDS, CorpusConfig
from clusterclip.corpus.default_corpus import DEFAULT_CORPUS, stdlib_documents
from clusterclip.corpus.duplicate_ids import check_duplicate_ids
from clusterclip.corpus.fields import build_fields
from clusterclip.corpus.id_spill import IdSpill
from clusterclip.corpus.inputs import Inputs, resolve_inputs
from clusterclip.corpus.parts import PartWriter, WrittenParts
from clusterclip.corpus.quality import SCORERS
from clusterclip.corpus.ray_read import read_on_ray
from clusterclip.corpus.reading import iter_documents
from clusterclip.corpus.records import ReadStats
from clusterclip.corpus.tokens import make_token_counter
from clusterclip.engines import check_engine
from clusterclip.errors import ClusterClipError, DiskFullError, disk_full_at
from clusterclip.progress import progress_bar
from clusterclip.settings import command_flags
from clusterclip.stages import Built, Stage, run_stage
from clusterclip.store import RUN, RunDir, config_hash, save_npy
from clusterclip.store.paths import name_of

log = logging.getLogger(__name__)


def corpus_stage(
    run: RunDir,
    inputs: Sequence[str | os.PathLike[str]] = (),
    config: CorpusConfig | None = None,
    force: bool = False,
    progress: bool = True,
    engine: str = "local",
    command: Sequence[str] = (),
) -> CorpusRecord:
    """Read ``inputs`` (or the default corpus) into ``corpus/part-*.parquet`` and ``tokens.npy``.

    Skipped when the record shows the same inputs (paths, sizes, mtimes) and options. With
    ``engine="ray"`` the work units (input files, datasets, runs of ``.txt`` files, runs of row groups of
    large Parquet files, byte ranges of large JSONL files) are read by Ray tasks in parallel and the parts
    are assembled in document order; the artifacts are byte-identical to the local engine's. The run
    directory must then be on storage every Ray node can reach. The small default corpus is always read
    here. ``config`` defaults to ``CorpusConfig()``. Returns the stage record.
    """
    config = CorpusConfig() if config is None else config
    given = resolve_inputs(inputs) if inputs else None
    fingerprint: Any = given.fingerprint if given is not None else {
        "default": DEFAULT_CORPUS, "python": sys.version, "stdlib": sysconfig.get_paths()["stdlib"]}
    cfg = {**settings_json(config), "inputs": [name_of(p) for p in inputs] or [DEFAULT_CORPUS]}
    if not inputs:
        cfg["group_field"] = "module"
    held = check_lineage(run, given, cfg, force)
    if held is not None:
        return held
    stage = Stage(CORPUS_STAGE, cfg, config_hash(fingerprint),
                  build=lambda job: _build_corpus(run, given, config, engine, progress),
                  command=command or corpus_command(inputs, config), record=CorpusRecord)
    with disk_full_at(run.root):
        return run_stage(run, stage, force)


def corpus_command(inputs: Sequence[str | os.PathLike[str]], config: CorpusConfig) -> list[str]:
    """The ``clusterclip embed`` command line that reads ``inputs`` with ``config`` (the default corpus
    when ``inputs`` is empty), before any embed option."""
    defaults = {} if inputs else {"group_field": "module"}
    return ["clusterclip", "embed", *map(str, inputs), "--out", RUN,
            *command_flags(CorpusConfig, asdict(config), CORPUS_FIELDS, defaults)]


def settings_json(config: CorpusConfig) -> dict[str, Any]:
    """The corpus settings as the record holds them: options newer than a run (``keep_fields``, ``quality_scorer``)
    only when set, so
    a run read before they existed stays up to date."""
    out = asdict(config)
    for name in ("keep_fields", "quality_scorer"):
        if not out[name]:
            del out[name]
    return out


def _build_corpus(run: RunDir, given: Inputs | None, config: CorpusConfig, engine: str, progress: bool) -> Built:
    """Read the corpus into its parts and ``tokens.npy``; refuse an empty corpus and duplicate ids. When the
    disk fills up, the parts written so far go too (the record is already gone), freeing their space."""
    try:
        return _write_corpus(run, given, config, engine, progress)
    except DiskFullError:
        for part in run.path(CORPUS_DIR).glob(CORPUS_PART_GLOB):
            part.unlink(missing_ok=True)
        raise


def _write_corpus(run: RunDir, given: Inputs | None, config: CorpusConfig, engine: str, progress: bool) -> Built:
    try:
        read = _read_parts(run, given, config, engine, progress)
        n, stats = read.tokens.size, read.stats
        if n == 0:
            where = ", ".join(str(p) for p in given.given) if given is not None else DEFAULT_CORPUS
            raise ClusterClipError(f"{where}: empty corpus: no usable documents"
                                   + (f" ({stats.skipped} bad records skipped)" if stats.skipped else ""))
        for stale in run.files(CORPUS_DIR, CORPUS_PART_GLOB):
            if f"{CORPUS_DIR}/{stale.name}" not in read.parts:
                run.remove(f"{CORPUS_DIR}/{stale.name}")
        duplicates = check_duplicate_ids(run, read, given, config)
    finally:
        shutil.rmtree(run.path(CORPUS_ID_SPILL), ignore_errors=True)
    hashed = given.hashed() if given is not None else []
    with disk_full_at(run.path(TOKENS)):
        save_npy(run.path(TOKENS), read.tokens)
        kept, fields = build_fields(run, read.parts, config.stored_fields())
    if stats.skipped:
        log.warning("corpus: skipped %d bad records, e.g. %s", stats.skipped, stats.examples[0])
    return Built([*read.parts, TOKENS, *kept], dict(
        count=n, tokens=int(read.tokens.sum()), skipped=stats.skipped, skipped_examples=stats.examples,
        duplicate_ids=duplicates, groups=dict(sorted(read.groups.items(), key=lambda kv: -kv[1])),
        inputs=hashed, engine=engine if given is not None else "local",
        input_hashes=[e["sha256"] for e in hashed] if given is not None else [DEFAULT_IDENTITY],
        **({"fields": fields} if fields else {}),
        **({"kinds": dict(stats.kinds)} if set(stats.kinds) - {"text"} else {}),
    ))


def _read_parts(run: RunDir, given: Inputs | None, config: CorpusConfig, engine: str, progress: bool) -> WrittenParts:
    """Read the documents into the corpus parts, here or on Ray, with a progress bar; no staging is left."""
    run.remove(CORPUS_STAGING)
    run.locate(CORPUS_DIR).mkdir(parents=True, exist_ok=True)
    bar = progress_bar("corpus", "docs", enabled=progress)
    try:
        if given is not None and check_engine(engine) == "ray":
            return read_on_ray(run.root, given.files, config, bar)
        return _read_here(run.root, given.files if given is not None else None, config, bar)
    finally:
        bar.close()
        run.remove(CORPUS_STAGING)


def _read_here(root: Path, resolved: Sequence[tuple[Path, str]] | None, config: CorpusConfig,
               bar: Any) -> WrittenParts:
    """Read every document in this process (``resolved=None``: the default corpus) into the final parts."""
    stats = ReadStats()
    batches = iter_documents(resolved, config, stats) if resolved is not None else stdlib_documents(config.min_words)
    writer = PartWriter(root, corpus_part, make_token_counter(config.tokenizer), limits.PART_ROWS,
                        ids=IdSpill(root / CORPUS_ID_SPILL), field_names=config.field_names,
                        scorer=SCORERS.get(config.quality_scorer or ""))
    for batch in batches:
        writer.add(batch)
        bar.update(len(batch))
    return writer.finish(stats)


def check_lineage(run: RunDir, given: Inputs | None, cfg: dict[str, Any], force: bool) -> CorpusRecord | None:
    """After ``clusterclip add``: the corpus record when the inputs given are every input of the run's
    lineage and the options (``cfg``) are the recorded ones (nothing to do); a one-line refusal otherwise
    (``--force`` rebuilds from the inputs given only, dropping documents added from others). None when the
    run has no adds (the stage decides as usual) or with ``force``."""
    prev = CorpusRecord.previous(run) if not force else None
    if prev is None or not prev.additions:
        return None
    hashes = [e["sha256"] for e in given.hashed(prev.inputs)] if given is not None else [DEFAULT_IDENTITY]
    held = prev.lineage_hashes()
    if set(hashes) == set(held):
        changed = prev.config.differing(cfg)
        if changed:
            raise ClusterClipError(f"{run.root}: corpus option(s) {', '.join(changed)} differ from the run's; re-run "
                                   "with --force to rebuild the run from the inputs given (every input of the run)")
        run.verify(CORPUS_STAGE, prev.to_json(), checksums=False)
        return prev
    lacking = [" ".join(a["inputs"]) for a in prev.additions if not set(a.get("input_hashes", ())) <= set(hashes)]
    extra = len(set(hashes) - set(held))
    why = (f"it also holds the documents that `clusterclip add` added from {', '.join(lacking)}, which the inputs "
           "given lack; give those inputs too (the run is then up to date)") if lacking else \
        f"{extra} of the inputs given are not in it: add them with `clusterclip add {run.root} NEW...`"
    raise ClusterClipError(f"{run.root}: the inputs given are not those of the run: {why}, or re-run with --force "
                           "to rebuild the run from only the inputs given")
