"""One protocol for the stages of a run directory, and the one runner that does their bookkeeping.

A :class:`Stage` says *what* a stage is: its ``name`` (the record is ``<name>.json``), its ``settings``
(the JSON-able options that change its output), its ``inputs`` (the hash of what it was built from:
upstream stages' output hashes, or the input files' fingerprint), which upstream artifacts it ``reads``,
and how to ``build`` them. :func:`run_stage` does the rest the same way for every stage:

1. the stage is *fresh* when its record has the same settings and inputs and its artifacts pass the
   quick check of :meth:`RunDir.problems <clusterclip.store.RunDir.problems>` (recorded sizes and
   modification times; no bytes read). A fresh stage is skipped after the same quick check of the
   upstream artifacts it reads, so a no-op re-run costs O(files) ``stat`` calls whatever the sizes;
2. otherwise the upstream artifacts it reads are checksum-verified (their content is about to be used),
   the old record is forgotten, the stage builds, and its record is written with every artifact's size,
   modification time and SHA-256.

An upstream artifact that fails either check is an error naming the file and the command that rebuilds
its stage. A corrupt record of the stage itself counts as "not finished" (a warning), so re-running the
stage rebuilds it. The record lists the output hash of every upstream stage it read (``upstream``): when
one of those is rebuilt later, the stage is *stale* (:meth:`RunDir.stale_reason
<clusterclip.store.RunDir.stale_reason>`) and its consumers refuse it.

Every command that writes into a run directory goes through :func:`run_stage`, which holds the run's
writer lock (:meth:`RunDir.lock <clusterclip.store.RunDir.lock>`, re-entrant: a command running several
stages may hold it around all of them) and records the command line that rebuilds the stage
(``command``; :data:`clusterclip.store.RUN` stands for the run directory).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from clusterclip.store import RunDir, config_hash, grown_from
from clusterclip.store.record import StageRecord

R = TypeVar("R", bound=StageRecord)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Job:
    """What :func:`run_stage` hands a build: the hashes its record will hold, and whether the re-run
    was forced (a forced build reuses nothing, e.g. no resumable embedding shards)."""

    config_hash: str
    inputs_hash: str
    force: bool


@dataclass(frozen=True)
class Built:
    """What a build wrote: its artifacts (paths relative to the run directory) and extra record fields."""

    artifacts: Sequence[str]
    fields: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Stage:
    """A stage of the pipeline, as :func:`run_stage` runs it.

    ``reads`` maps each upstream stage to the artifacts ``build`` reads from it (``None``: all of them);
    the runner checks them before deciding and verifies their checksums before building.
    """

    name: str
    settings: Mapping[str, Any]
    inputs: str
    build: Callable[[Job], Built]
    reads: Mapping[str, Sequence[str] | None] = field(default_factory=dict)
    command: Sequence[str] = ()
    """The command line that rebuilds this stage (see :func:`clusterclip.settings.command_flags`)."""
    record: type[StageRecord] | None = None
    """The stage's record class (its contract): the record is returned as one, checked field by field."""


@contextlib.contextmanager
def writing(run: RunDir) -> Iterator[RunDir]:
    """The run's writer lock around a command that runs several stages as one step (``run``, ``add``, a refit,
    an experiment's split), after removing the temp files a killed command left behind (e.g. a plan killed
    mid-write by a full disk). The one place such commands take the lock; :func:`run_stage` takes it again
    (re-entrant) around each stage."""
    with run.lock():
        run.clean_temp_files()
        yield run


def run_stage(run: RunDir, stage: Stage, force: bool = False) -> Any:
    """Run ``stage`` in ``run`` unless it is fresh (or ``force``); returns its record (typed as ``stage.record``
    when the stage declares one, else the parsed JSON)."""
    with run.lock():
        fresh = not force and run.is_fresh(stage.name, stage.settings, stage.inputs)
        for upstream, rels in stage.reads.items():
            run.verify(upstream, checksums=not fresh, only=rels)
        if fresh:
            log.info("%s: up to date (%s)", stage.name, run.record_path(stage.name))
            return _typed(run, stage, run.require(stage.name, verify=False))
        upstream = {name: run.output_hash(name) for name in stage.reads}
        run.invalidate(stage.name)
        t0 = time.perf_counter()
        built = stage.build(Job(config_hash(stage.settings), stage.inputs, force))
        extra = {"command": list(stage.command)} if stage.command else {}
        return _typed(run, stage, run.write_record(stage.name, stage.settings, stage.inputs, built.artifacts,
                                                   time.perf_counter() - t0, **extra, **built.fields,
                                                   upstream=upstream))


def _typed(run: RunDir, stage: Stage, rec: dict[str, Any]) -> Any:
    return rec if stage.record is None else stage.record.from_json(rec, str(run.record_path(stage.name)))


def grow_stage(run: RunDir, previous: R, inputs_hash: str, artifacts: Sequence[str], seconds: float,
               known: Mapping[str, Mapping[str, Any]], reads: Sequence[str], config: Mapping[str, Any] | None = None,
               **fields: Any) -> R:
    """Rewrite the record of a finished stage whose artifacts grew (documents were appended).

    The settings (or ``config``, which then lists what was appended) and the command stay; the inputs hash
    and artifacts are new (``known``: metadata of the untouched ones, not re-hashed); ``upstream`` is taken
    again from the ``reads`` stages, and the previous output is listed in ``grown_from`` so what was built
    on it stays valid (behind, not stale). ``fields`` replace the stage's own fields of ``previous``; the new
    record is read back as ``previous``'s class. The caller holds the lock (it grows several stages as one
    step)."""
    extra = {"command": previous.command} if previous.command is not None else {}
    rec = run.write_record(previous.stage, config or previous.to_json()["config"], inputs_hash, artifacts,
                           previous.seconds + seconds, known=known, **extra, **{**previous.own(), **fields},
                           upstream={name: run.output_hash(name) for name in reads},
                           grown_from=grown_from(previous.to_json()))
    return type(previous).from_json(rec, str(run.record_path(previous.stage)))
