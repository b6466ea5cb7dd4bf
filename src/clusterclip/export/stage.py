"""``clusterclip export`` as a stage: the output folder is a run directory whose one stage is the export.

The record is ``OUT/export.json`` (written by :func:`clusterclip.stages.run_stage`): its settings are the
export options and the tokenizer's SHA-256, its inputs hash is the SHA-256 of the plan's ``plan.npy``, its
artifacts are the exported files, and its own fields are the export's identity, the files and the counts.
The folder's writer lock is held for the whole export, so two exports into one folder cannot interleave;
a re-export of the same plan with the same settings whose files pass the quick check is skipped.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

from clusterclip.contract.export import (
    EXPORT_MANIFEST,
    ExportRecord,
    ExportSettings,
    content_hash,
    metadata,
    stream_identity,
)
from clusterclip.engines import EngineConfig, available_cores
from clusterclip.errors import ClusterClipError
from clusterclip.export.blend import estimate_bytes as blend_bytes
from clusterclip.export.blend import write_blend_export
from clusterclip.export.chat import LOSS_MASK
from clusterclip.export.publish import ExportFolder, check_space, write_error
from clusterclip.export.stream import PlanStream
from clusterclip.export.writers.registry import FORMATS, WRITERS
from clusterclip.settings import Settings, at_least, command_flags, optional, setting
from clusterclip.stages import Built, Job, Stage, run_stage
from clusterclip.store import RUN, RunDir, exclusive
from clusterclip.store.paths import is_remote

log = logging.getLogger(__name__)

STAGE = EXPORT_MANIFEST.removesuffix(".json")
SCRATCH = ".buckets"
"""In the staging folder: the buckets of a corpus larger than ``--memory-mb`` (removed before publishing)."""
"""The export folder's one stage: its record is :data:`clusterclip.store.layout.EXPORT_MANIFEST`."""

MAX_SEQ_LEN = 2**24
"""The longest ``--seq-len``: 16,777,216 tokens, far past any model's context, and well inside the int32
offsets of an Arrow list column (a window of samples is one such column)."""


def _boolean(v: Any) -> str | None:
    return None if isinstance(v, bool) else f"must be true or false, got {v!r}"


def _at_most_max(v: int) -> str | None:
    return None if v <= MAX_SEQ_LEN else f"must be at most {MAX_SEQ_LEN:,} (2^24) tokens per sample, got {v:,}"


@dataclass(frozen=True)
class ExportConfig(Settings):
    """How ``clusterclip export`` writes a plan (``--format``, ``--tokenizer`` ...)."""

    fmt: str = setting("jsonl", choices=FORMATS, flag="--format",
                       help="output format: " + ", ".join(f"{n} ({w.SUMMARY})" for n, w in WRITERS.items()))
    shard_size: int = setting(100_000, check=at_least(1),
                              help="rows (documents, or samples with --seq-len) per shard or batch")
    memory_mb: int = setting(4096, check=at_least(1),
                             help="corpus text held at once; a larger corpus is read once per window of the plan")
    tokenizer: str | None = setting(None, help="Hugging Face tokenizer name, folder or tokenizer.json: write token "
                                               "ids instead of text (required for megatron)")
    append_eos: bool = setting(False, help="end each document with the tokenizer's EOS token",
                               check=lambda v: None if isinstance(v, bool) else f"must be true or false, got {v!r}")
    seq_len: int | None = setting(None, check=optional(lambda v: at_least(1)(v) or _at_most_max(v)),
                                  help="pack the token stream into samples of this many tokens (documents run on "
                                       "across samples; the last partial sample is dropped)")
    pad_to_multiple: int | None = setting(None, check=optional(at_least(1)),
                                          help="repeat the stream's first rows so that the row count is a multiple "
                                               "of this (litdata under R ranks with batch size B: R*B)")
    workers: int | None = setting(None, check=optional(at_least(1)),
                                  help="processes for the one-pass export of a corpus over --memory-mb, which they "
                                       "share (default: this machine's cores; the output does not depend on it)")
    keep_record: bool | None = setting(
        None, check=optional(_boolean),
        help="write each document's input record (its own fields, e.g. messages) beside index and cluster, for an "
             "SFT trainer (jsonl, parquet, hf; docs/fine-tuning.md) (default: on for a corpus of conversation "
             "records exported without --tokenizer)")
    assistant_only_loss: bool = setting(False, check=_boolean,
                                        help="with --tokenizer over conversations: add loss_mask, 1 on the tokens of "
                                             "assistant turns (the chat template's {%% generation %%} marks), 0 on "
                                             "the prompt")
    blend: bool = setting(False, help="instead of the stream, one source per cluster (its documents once, in corpus "
                                      "order) and the plan's token mixture as Megatron --data-path weights and an "
                                      "OLMo-core source mixture; megatron only (docs/export.md)",
                          check=lambda v: None if isinstance(v, bool) else f"must be true or false, got {v!r}")

    @classmethod
    def from_recorded(cls, settings: ExportSettings) -> ExportConfig:
        """The settings an export's record holds (:class:`clusterclip.contract.export.ExportSettings`), validated
        against the writers' registry (``workers``, never recorded, is unset; ``keep_record`` whether the export kept
        the records)."""
        recorded = {**settings.to_json(), "keep_record": settings.keep_record}
        del recorded["tokenizer_sha256"]
        return cls(**recorded)

    def __post_init__(self) -> None:
        super().__post_init__()
        writer = WRITERS[self.fmt]
        needs = {"blend": self.blend, "append_eos": self.append_eos, "seq_len": self.seq_len is not None,
                 "fmt": writer.TOKENS_ONLY, "assistant_only_loss": self.assistant_only_loss}
        for name, used in needs.items():
            if used and self.tokenizer is None:
                raise self.error_class(name, "needs {tokenizer} (token ids)", type(self))
        if self.keep_record:
            kept = ", ".join(n for n, w in WRITERS.items() if w.RECORDS)
            if self.tokenizer is not None or not writer.RECORDS or self.blend:
                raise self.error_class("keep_record", f"writes the records' fields for a trainer that tokenizes them "
                                       f"itself, in {kept}: drop {{tokenizer}} and {{blend}}, or {{keep_record}}",
                                       type(self))
        if self.blend:
            sources = ", ".join(n for n, w in WRITERS.items() if w.BLEND_SOURCES)
            refused = {"fmt": f"writes Megatron .bin/.idx sources: use {{fmt}} {sources}, not {self.fmt}",
                       "seq_len": "writes whole documents, which {seq_len} would cut into samples: drop {seq_len} "
                                  "(Megatron and OLMo-core cut sequences themselves)",
                       "pad_to_multiple": "writes no stream to pad: drop {pad_to_multiple}"}
            used = {"fmt": not writer.BLEND_SOURCES, "seq_len": self.seq_len is not None,
                    "pad_to_multiple": self.pad_to_multiple is not None}
            for name, problem in refused.items():
                if used[name]:
                    raise self.error_class("blend", problem, type(self))

    def columns(self, record_fields: list[str] | None = None) -> list[str]:
        """The columns of the exported rows (``record_fields``: the records' fields, when they are kept)."""
        mask = [LOSS_MASK] if self.assistant_only_loss else []
        if self.seq_len is not None:
            return ["tokens", *mask]
        if record_fields is not None:
            return [*record_fields, "index", "cluster"]
        first = ["tokens", *mask] if self.tokenizer is not None else ["text"]
        return first if WRITERS[self.fmt].FIRST_COLUMN_ONLY else [*first, "id", "index", "cluster"]


def export_plan(run: RunDir | str | os.PathLike[str], plan_name: str | None, out_dir: str | os.PathLike[str],
                config: ExportConfig | None = None, force: bool = False, engine: EngineConfig | None = None,
                **options: Any) -> list[Path]:
    """Write the planned stream of ``plans/<plan_name>`` (the only plan when None) into ``out_dir``.

    ``config`` (or its fields as keyword arguments: ``fmt``, ``shard_size``, ``memory_mb``, ``tokenizer``,
    ``append_eos``, ``seq_len``) chooses the format; see :mod:`clusterclip.export` for the policy and
    ``docs/export.md`` for each format's layout. An export of the same plan with the same settings already
    in ``out_dir`` is kept unless ``force``. ``engine`` (default local) runs the one-pass export of a corpus over
    ``memory_mb`` in this machine's processes or as Ray tasks (every node must see the run directory and
    ``out_dir``, or both are URLs of object storage); the files are the same either way. ``run`` and ``out_dir`` may
    be URLs (``s3://bucket/out``): the export is staged in a local working copy and sent to the store, its record
    last. Returns the exported files; ``out_dir/export.json`` records the plan's identity, the files and the
    counts.
    """
    cfg = config if config is not None else ExportConfig(**options)
    engine = engine or EngineConfig()
    run = run if isinstance(run, RunDir) else RunDir(run)
    # unset, --keep-record is on for conversations exported without a tokenizer in a format that keeps records
    keeps = bool(WRITERS[cfg.fmt].RECORDS) and not cfg.blend
    keep = cfg.keep_record if cfg.keep_record is not None else (None if keeps else False)
    src = PlanStream(run, plan_name, cfg.tokenizer, cfg.append_eos, keep, cfg.assistant_only_loss)
    tokenizer = src.tokenizer_identity
    # what the options added later change joins the identity only when used: earlier exports keep theirs
    later = {"blend": cfg.blend, "keep_record": src.keep_record, "assistant_only_loss": cfg.assistant_only_loss}
    identity = {"plan": src.name, "plan_sha256": src.plan_sha256, "format": cfg.fmt, "tokenizer": tokenizer,
                "append_eos": cfg.append_eos, "seq_len": cfg.seq_len, "pad_to_multiple": cfg.pad_to_multiple,
                "plan_identity": src.identity, **{k: True for k, v in later.items() if v}}
    if cfg.blend:
        need = blend_bytes(src, src.corpus.n)
        write = partial(write_blend_export, src, memory_mb=cfg.memory_mb, shard_size=cfg.shard_size)
    else:
        need = src.estimate_bytes(doubled=WRITERS[cfg.fmt].WRITES_TWICE, scratch=src.bucketed(cfg.memory_mb))
        write = partial(_write_stream, src, cfg, engine)
        if (too_large := src.batch_warning(cfg.memory_mb, cfg.shard_size)) is not None:
            log.warning("export: %s", too_large)
    folder = ExportFolder(RunDir(out_dir).path(), identity)  # in object storage: the folder's files fetched
    folder.check()  # before the lock: a refused folder is left exactly as it was
    values = {**asdict(cfg), "keep_record": None}
    command = ("clusterclip", "export", run.where, "--plan", src.name, "--dest", RUN,
               *command_flags(ExportConfig, values, always=("fmt",)),
               *({True: ["--keep-record"], False: ["--no-keep-record"], None: []}[cfg.keep_record]))
    # options that joined the settings later stay out of an export that does not use them, which keeps the
    # settings (and so the record) it had; --workers changes how, not what: it stays out of the settings
    settings = {k: v for k, v in asdict(cfg).items() if (k not in later or v) and k != "workers"}
    settings.update({"keep_record": True} if src.keep_record else {})
    settings["tokenizer_sha256"] = tokenizer["sha256"] if tokenizer is not None else None
    # The command goes into the record as a field (a tuple, so the store keeps no commands.json beside it):
    # the folder holds the exported files, export.json and the lock, nothing else.
    build = partial(_build, write, folder, need, {"run_dir": run.where, "command": command})
    with exclusive(folder.out, what="export folder"), engine.session():
        try:
            folder.claim()
            record = run_stage(RunDir(folder.out), Stage(STAGE, settings, src.plan_sha256, build,
                                                         record=ExportRecord), force)
            folder.finish()
        except Exception:
            folder.forget()
            raise
    return [folder.out / rel for rel in record.files]


def _write_stream(src: PlanStream, cfg: ExportConfig, engine: EngineConfig, folder: ExportFolder) -> dict[str, Any]:
    """Write the planned stream into the staging folder with the format's writer; the record's counts."""
    writer = WRITERS[cfg.fmt](folder.staging, src.token_dtype, metadata(folder.identity))
    fields = src.typed_records() if src.keep_record and writer.RECORDS == "typed" else None
    rows = 0
    scratch = folder.staging / SCRATCH
    if is_remote(scratch) and engine.engine != "ray":  # only Ray tasks on other machines need it in the store
        scratch = Path(tempfile.mkdtemp(prefix="clusterclip-buckets-"))
    for batch in src.batches(cfg.memory_mb, cfg.shard_size, cfg.seq_len, cfg.pad_to_multiple, scratch=scratch,
                             engine=engine.engine, workers=cfg.workers or available_cores()):
        writer.write(batch)
        rows += batch.num_rows
    if rows == 0:
        raise ClusterClipError(f"--seq-len {cfg.seq_len} is longer than the plan's whole token stream "
                               f"({src.stats()['dropped_tokens']:,} tokens): no full sample to write; use a "
                               "smaller --seq-len" if cfg.seq_len else "the plan is empty: nothing to export")
    writer.close()
    columns = cfg.columns(fields or getattr(writer, "record_fields", None) if src.keep_record else None)
    tiers = src.tiers is not None and "cluster" in columns
    return {"rows": rows, "columns": [*columns, "tier"] if tiers else columns, **src.stats(),
            **({"tiers": src.tier_labels} if tiers else {})}


def _build(write: Callable[[ExportFolder], dict[str, Any]], folder: ExportFolder, need: int,
           fields: dict[str, Any], job: Job) -> Built:
    """Fill the staging folder (``write`` returns the record's counts) and move it into place; a failure
    before the move undoes everything (:meth:`ExportFolder.fail`)."""
    try:
        check_space(folder.staging, need)
        counts = write(folder)
        files = folder.prepare()
    except Exception as exc:
        folder.fail()
        if isinstance(exc, OSError):
            raise write_error(folder.out, exc) from exc
        raise
    folder.publish(files)
    record = {"identity": folder.identity, "stream_identity": stream_identity(folder.identity), **fields, **counts,
              "files": files}
    return Built(files, {**record, "content_hash": content_hash(record)})
