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

from clusterclip.corpus import limits
from clusterclip.corpus.config import CORPUS_FIELDS, CorpusConfig
from clusterclip.corpus.default_corpus import DEFAULT_CORPUS, stdlib_documents
from clusterclip.corpus.duplicate_ids import check_duplicate_ids
from clusterclip.corpus.inputs import expand_inputs, inputs_fingerprint
from clusterclip.corpus.parts import PartWriter, WrittenParts
from clusterclip.corpus.ray_read import read_on_ray
from clusterclip.corpus.reading import iter_documents
from clusterclip.corpus.records import ReadStats
from clusterclip.corpus.tokens import make_token_counter
from clusterclip.engines import check_engine
from clusterclip.errors import ClusterClipError, DiskFullError, disk_full_at
from clusterclip.progress import progress_bar
from clusterclip.settings import command_flags
from clusterclip.stages import Built, Stage, run_stage
from clusterclip.store import RUN, RunDir, StaleArtifactError, config_hash, save_npy
from clusterclip.store import layout as A

log = logging.getLogger(__name__)


def corpus_stage(
    run: RunDir,
    inputs: Sequence[str | os.PathLike[str]] = (),
    config: CorpusConfig | None = None,
    force: bool = False,
    progress: bool = True,
    engine: str = "local",
    command: Sequence[str] = (),
) -> dict[str, Any]:
    """Read ``inputs`` (or the default corpus) into ``corpus/part-*.parquet`` and ``tokens.npy``.

    Skipped when the record shows the same inputs (paths, sizes, mtimes) and options. With
    ``engine="ray"`` the work units (input files, datasets, runs of ``.txt`` files, runs of row groups of
    large Parquet files, byte ranges of large JSONL files) are read by Ray tasks in parallel and the parts
    are assembled in document order; the artifacts are byte-identical to the local engine's. The run
    directory must then be on storage every Ray node can reach. The small default corpus is always read
    here. ``config`` defaults to ``CorpusConfig()``. Returns the stage record.
    """
    config = CorpusConfig() if config is None else config
    if inputs:
        resolved = expand_inputs(inputs)
        fingerprint: Any = inputs_fingerprint(resolved)
    else:
        resolved = []
        fingerprint = {"default": DEFAULT_CORPUS, "python": sys.version,
                       "stdlib": sysconfig.get_paths()["stdlib"]}
    cfg = {**asdict(config), "inputs": [str(Path(p)) for p in inputs] or [DEFAULT_CORPUS]}
    if not inputs:
        cfg["group_field"] = "module"
    stage = Stage(A.CORPUS_STAGE, cfg, config_hash(fingerprint),
                  build=lambda job: _build_corpus(run, inputs, resolved, config, engine, progress, fingerprint),
                  command=command or corpus_command(inputs, config))
    with disk_full_at(run.root):
        return run_stage(run, stage, force)


def corpus_command(inputs: Sequence[str | os.PathLike[str]], config: CorpusConfig) -> list[str]:
    """The ``clusterclip embed`` command line that reads ``inputs`` with ``config`` (the default corpus
    when ``inputs`` is empty), before any embed option."""
    defaults = {} if inputs else {"group_field": "module"}
    return ["clusterclip", "embed", *map(str, inputs), "--out", RUN,
            *command_flags(CorpusConfig, asdict(config), CORPUS_FIELDS, defaults)]


def _build_corpus(run: RunDir, inputs: Sequence[str | os.PathLike[str]], resolved: Sequence[tuple[Path, str]],
                  config: CorpusConfig, engine: str, progress: bool, fingerprint: Any) -> Built:
    """Read the corpus into its parts and ``tokens.npy``; refuse an empty corpus and duplicate ids. When the
    disk fills up, the parts written so far go too (the record is already gone), freeing their space."""
    try:
        return _write_corpus(run, inputs, resolved, config, engine, progress, fingerprint)
    except DiskFullError:
        for part in run.path(A.CORPUS_DIR).glob(A.CORPUS_PART_GLOB):
            part.unlink(missing_ok=True)
        raise


def _write_corpus(run: RunDir, inputs: Sequence[str | os.PathLike[str]], resolved: Sequence[tuple[Path, str]],
                  config: CorpusConfig, engine: str, progress: bool, fingerprint: Any) -> Built:
    read = _read_parts(run, inputs, resolved, config, engine, progress)
    n, stats = read.tokens.size, read.stats
    if n == 0:
        where = ", ".join(str(p) for p in inputs) or DEFAULT_CORPUS
        raise ClusterClipError(f"{where}: empty corpus: no usable documents"
                               + (f" ({stats.skipped} bad records skipped)" if stats.skipped else ""))
    for stale in sorted(run.path(A.CORPUS_DIR).glob(A.CORPUS_PART_GLOB)):
        if f"{A.CORPUS_DIR}/{stale.name}" not in read.parts:
            stale.unlink()
    duplicates = check_duplicate_ids(run, read, inputs, resolved, config)
    with disk_full_at(run.path(A.TOKENS)):
        save_npy(run.path(A.TOKENS), read.tokens)
    if stats.skipped:
        log.warning("corpus: skipped %d bad records, e.g. %s", stats.skipped, stats.examples[0])
    return Built([*read.parts, A.TOKENS], dict(
        count=n, tokens=int(read.tokens.sum()), skipped=stats.skipped, skipped_examples=stats.examples,
        duplicate_ids=duplicates, groups=dict(sorted(read.groups.items(), key=lambda kv: -kv[1])),
        inputs=fingerprint if inputs else [], engine=engine if inputs else "local",
    ))


def _read_parts(run: RunDir, inputs: Sequence[str | os.PathLike[str]], resolved: Sequence[tuple[Path, str]],
                config: CorpusConfig, engine: str, progress: bool) -> WrittenParts:
    """Read the documents into the corpus parts, here or on Ray, with a progress bar; no staging is left."""
    staging = run.path(A.CORPUS_STAGING)
    shutil.rmtree(staging, ignore_errors=True)
    run.path(A.CORPUS_DIR).mkdir(parents=True, exist_ok=True)
    bar = progress_bar("corpus", "docs", enabled=progress)
    try:
        if inputs and check_engine(engine) == "ray":
            return read_on_ray(run.root, resolved, config, bar)
        return _read_here(run.root, resolved if inputs else None, config, bar)
    finally:
        bar.close()
        shutil.rmtree(staging, ignore_errors=True)


def _read_here(root: Path, resolved: Sequence[tuple[Path, str]] | None, config: CorpusConfig,
               bar: Any) -> WrittenParts:
    """Read every document in this process (``resolved=None``: the default corpus) into the final parts."""
    stats = ReadStats()
    batches = iter_documents(resolved, config, stats) if resolved is not None else stdlib_documents(config.min_words)
    writer = PartWriter(root, A.corpus_part, make_token_counter(config.tokenizer), limits.PART_ROWS)
    for batch in batches:
        writer.add(batch)
        bar.update(len(batch))
    return writer.finish(stats)


def check_inputs_unchanged(run: RunDir) -> None:
    """Refuse to go on when the corpus files changed (size or mtime) since the corpus stage read them."""
    rec = run.require(A.CORPUS_STAGE, verify=False)
    for entry in rec.get("inputs", []):
        path = Path(entry["path"])
        if not path.exists():
            raise StaleArtifactError(f"{path}: input of the corpus stage no longer exists; re-run "
                                     f"`clusterclip embed INPUT... --out {run.root}`")
        st = path.stat()
        if st.st_size != entry["size"] or st.st_mtime_ns != entry["mtime_ns"]:
            raise StaleArtifactError(
                f"{path}: changed since the corpus stage read it (size {entry['size']} -> {st.st_size}); "
                f"re-run `clusterclip embed INPUT... --out {run.root}` so every stage uses the same corpus")
