"""Export a plan as the training stream itself, in the format a trainer reads (``--format``).

Policy, once for every format: rows follow the plan order with repeats expanded; the plan is cut into
windows of whole shards whose documents' text fits ``memory_mb`` (estimated from the corpus parts'
metadata), and for each window the distinct documents it draws are read from the corpus (only the row
groups that hold them), optionally tokenized (``tokenizer``, ``append_eos``) and packed into samples of
``seq_len`` tokens, then handed to the format's writer (:mod:`clusterclip.export_writers`) in batches of
``shard_size`` rows. Memory stays bounded by the limit plus one corpus part, whatever the corpus size
and plan length.

Everything is written into ``OUT/.partial/`` with the export's identity (plan name and SHA-256, format,
tokenizer, EOS, sequence length) recorded first; at the end the files are moved into ``OUT`` and
``export.json`` (identity, files, counts) is written last. A killed export leaves ``.partial/``, which
the re-run deletes before writing everything again, so its data files are byte-identical to an
uninterrupted export. Export owns only what it wrote: it writes into an empty or new folder or its own
export of the same identity, refuses anything else (files it did not write, another identity, symbolic
links) and never overwrites or deletes a file it did not write. Before reading, the plan must be current
(not built from older clusters) and every artifact read (plan, labels, corpus parts, ``tokens.npy``) is
checksum-verified; before writing, the free space is checked against an estimate; a failure removes the
staged files and leaves an earlier export intact.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from clusterclip.errors import DISK_FULL_ERRNOS, ClusterClipError
from clusterclip.export_writers import WRITERS
from clusterclip.settings import Settings, at_least, optional, setting
from clusterclip.store import RunDir, StaleArtifactError, load_json, save_json
from clusterclip.store import layout as A

FORMATS = tuple(WRITERS)
_EOS_TOKENS = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", "[SEP]")


@dataclass(frozen=True)
class ExportConfig(Settings):
    """How ``clusterclip export`` writes a plan (``--format``, ``--tokenizer`` ...)."""

    fmt: str = setting("jsonl", choices=FORMATS, flag="--format",
                       help="output format: jsonl, parquet, hf (datasets.save_to_disk), litdata, megatron (.bin/.idx)")
    shard_size: int = setting(100_000, check=at_least(1),
                              help="rows (documents, or samples with --seq-len) per shard or batch")
    memory_mb: int = setting(4096, check=at_least(1),
                             help="corpus text held at once; a larger corpus is read once per window of the plan")
    tokenizer: str | None = setting(None, help="Hugging Face tokenizer name, folder or tokenizer.json: write token "
                                               "ids instead of text (required for megatron)")
    append_eos: bool = setting(False, help="end each document with the tokenizer's EOS token",
                               check=lambda v: None if isinstance(v, bool) else f"must be true or false, got {v!r}")
    seq_len: int | None = setting(None, check=optional(at_least(1)),
                                  help="pack the token stream into samples of this many tokens (documents run on "
                                       "across samples; the last partial sample is dropped)")

    def __post_init__(self) -> None:
        super().__post_init__()
        needs = {"append_eos": self.append_eos, "seq_len": self.seq_len is not None,
                 "fmt": self.fmt == "megatron"}
        for name, used in needs.items():
            if used and self.tokenizer is None:
                raise self.error_class(name, "needs {tokenizer} (token ids)", type(self))


class _Tokenizer:
    """A fast Hugging Face tokenizer: ids without special tokens, plus the EOS id when ``append_eos``."""

    def __init__(self, name: str, append_eos: bool) -> None:
        from tokenizers import Tokenizer

        path = Path(name)
        file = path / "tokenizer.json" if path.is_dir() else path
        if file.is_file():
            self.tok = Tokenizer.from_file(str(file))
            eos = next((t for t in _EOS_TOKENS if self.tok.token_to_id(t) is not None), None)
        else:
            from transformers import AutoTokenizer

            hf = AutoTokenizer.from_pretrained(name)
            self.tok = hf.backend_tokenizer
            eos = hf.eos_token or hf.sep_token
        # Saved tokenizers often carry a model's truncation and padding (MiniLM's: 128 tokens); an export
        # wants every token of every document.
        self.tok.no_truncation()
        self.tok.no_padding()
        self.eos = self.tok.token_to_id(eos) if eos is not None else None
        if append_eos and self.eos is None:
            raise ClusterClipError(f"tokenizer {name!r} has no EOS token ({', '.join(_EOS_TOKENS)}); drop --append-eos")
        self.append_eos = append_eos
        vocab = self.tok.get_vocab_size(with_added_tokens=True)
        self.dtype = np.dtype(np.uint16 if vocab <= 2**16 else np.int32)
        digest = hashlib.sha256(self.tok.to_str().encode()).hexdigest()
        self.identity = {"name": name, "sha256": digest, "vocab_size": vocab,
                         "eos_id": self.eos if append_eos else None, "dtype": self.dtype.name}

    def encode(self, texts: pa.ChunkedArray, batch: int = 1024) -> pa.ChunkedArray:
        """Token ids of ``texts`` as a ``list<uint16|int32>`` array, encoded ``batch`` texts at a time so that
        Python lists of ids never hold more than one batch."""
        return pa.chunked_array([self._encode(texts.slice(i, batch).to_pylist())
                                 for i in range(0, len(texts), batch)], pa.list_(pa.from_numpy_dtype(self.dtype)))

    def _encode(self, texts: list[str]) -> pa.Array:
        ids = [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=False)]
        if self.append_eos:
            ids = [[*i, self.eos] for i in ids]
        lengths = np.fromiter((len(i) for i in ids), np.int64, len(ids))
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        flat = np.fromiter((t for i in ids for t in i), self.dtype, int(offsets[-1]))
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat))


class _CorpusIndex:
    """Where each document lives: the corpus parts with their row groups' first rows, from metadata."""

    def __init__(self, run: RunDir) -> None:
        from clusterclip.corpus import corpus_parts, open_parquet

        self.parts = corpus_parts(run)
        if not self.parts:
            raise StaleArtifactError(f"{run.path(A.CORPUS_DIR)}: no {A.CORPUS_PART_GLOB} files; rebuild the corpus "
                                     f"with `{run.rebuild_command(A.CORPUS_STAGE, force=True)}`")
        run.require(A.CORPUS_STAGE, only=[p.relative_to(run.root).as_posix() for p in self.parts])
        self.rebuild = run.rebuild_command(A.CORPUS_STAGE, force=True)
        self.files = [open_parquet(p) for p in self.parts]
        self.rg_starts: list[np.ndarray] = []
        self.text_bytes = 0
        start = 0
        for pf in self.files:
            md = pf.metadata
            names = pf.schema_arrow.names
            cols = [names.index(c) for c in ("id", "text")]
            rows = [md.row_group(g).num_rows for g in range(md.num_row_groups)]
            self.rg_starts.append(start + np.concatenate([[0], np.cumsum(rows)]).astype(np.int64))
            self.text_bytes += sum(md.row_group(g).column(c).total_uncompressed_size
                                   for g in range(md.num_row_groups) for c in cols)
            start += sum(rows)
        self.n = start

    def gather(self, docs: np.ndarray) -> pa.Table:
        """``id`` and ``text`` of ``docs`` (sorted, distinct indices), reading only the row groups holding them."""
        tables = []
        for pf, starts in zip(self.files, self.rg_starts, strict=True):
            lo, hi = np.searchsorted(docs, [starts[0], starts[-1]])
            if lo == hi:
                continue
            mine = docs[lo:hi]
            rg = np.searchsorted(starts, mine, side="right") - 1
            groups = np.unique(rg)
            sizes = starts[groups + 1] - starts[groups]
            first = np.zeros(len(starts) - 1, np.int64)
            first[groups] = np.concatenate([[0], np.cumsum(sizes)[:-1]])
            table = pf.read_row_groups(groups.tolist(), columns=["index", "id", "text"])
            rows = table.take(pa.array(first[rg] + mine - starts[rg]))
            if not np.array_equal(rows.column("index").to_numpy(), mine):
                raise StaleArtifactError(f"{self.parts[0].parent}: rows are not in index order; rebuild the corpus "
                                         f"with `{self.rebuild}`")
            tables.append(rows.drop_columns(["index"]))
        return pa.concat_tables(tables)


def _windows(order: np.ndarray, corpus: _CorpusIndex, labels: np.ndarray, window: int,
             tokenizer: _Tokenizer | None) -> Iterator[pa.Table]:
    """The planned stream, one window at a time: ``text`` (or ``tokens``), ``id``, ``index``, ``cluster``."""
    for w in range(0, order.shape[0], window):
        block = np.asarray(order[w:w + window], dtype=np.int64)
        docs, where = np.unique(block, return_inverse=True)
        rows = corpus.gather(docs)
        take = pa.array(where)
        if tokenizer is None:
            body = {"text": rows.column("text").take(take)}
        else:
            body = {"tokens": tokenizer.encode(rows.column("text")).take(take)}
        cluster = pa.array(np.asarray(labels[block], dtype=np.int64))
        yield pa.table({**body, "id": rows.column("id").take(take), "index": pa.array(block), "cluster": cluster})


class _Packer:
    """Cuts the concatenated token stream into samples of ``seq_len`` tokens, in stream order.

    A document that does not end at a sample boundary continues at the start of the next sample; the
    tokens left after the last full sample are dropped (``dropped``).
    """

    def __init__(self, seq_len: int) -> None:
        self.seq_len = seq_len
        self.carry = np.zeros(0, np.int64)
        self.dropped = 0

    def pack(self, batch: pa.Table) -> pa.Table:
        flat = pc.list_flatten(batch.column("tokens")).to_numpy()
        stream = np.concatenate([self.carry.astype(flat.dtype), flat])
        n = stream.size // self.seq_len
        self.carry = stream[n * self.seq_len:]
        self.dropped = int(self.carry.size)
        offsets = pa.array(np.arange(n + 1, dtype=np.int32) * self.seq_len)
        return pa.table({"tokens": pa.ListArray.from_arrays(offsets, pa.array(stream[:n * self.seq_len]))})


def _rebatch(tables: Iterator[pa.Table], size: int) -> Iterator[pa.Table]:
    """Batches of exactly ``size`` rows (the last may be shorter), whatever the windows' sizes."""
    pending: list[pa.Table] = []
    held = 0
    for table in tables:
        pending.append(table)
        held += table.num_rows
        while held >= size:
            joined = pa.concat_tables(pending).combine_chunks()
            yield joined.slice(0, size)
            pending, held = [joined.slice(size)], held - size
    if held:
        yield pa.concat_tables(pending).combine_chunks()


def _window_rows(corpus: _CorpusIndex, n_rows: int, cfg: ExportConfig) -> int:
    """Plan rows per window: all when the corpus text fits ``memory_mb``, else whole shards that fit it."""
    limit = cfg.memory_mb * 2**20
    if corpus.text_bytes <= limit:
        return max(n_rows, 1)
    return max(1, int(limit / (corpus.text_bytes / corpus.n)) // cfg.shard_size) * cfg.shard_size


# ------------------------------------------------------------------------------- ownership of --out, staging

_STREAM = A.EXPORT_STAGING + ".arrow"
"""The ``hf`` writer's Arrow stream, beside the staging folder (``save_to_disk`` cannot write around it)."""


def _no_link(path: Path) -> None:
    """Refuse a symbolic link where export writes, deletes or reads its own records."""
    if path.is_symlink():
        raise ClusterClipError(f"{path}: is a symbolic link (to {os.readlink(path)}); clusterclip export does not "
                               "follow links where it writes or deletes: remove the link or choose another --out")


def _target(out: Path, rel: str) -> Path:
    """``out/rel``, refusing a symbolic link at any step below ``out``."""
    path = out
    for part in PurePosixPath(rel).parts:
        path = path / part
        _no_link(path)
    return path


def _read_record(path: Path) -> tuple[dict[str, Any], set[str]]:
    """Identity and written files of an export record (``export.json`` or the staging journal)."""
    try:
        found = load_json(path)
    except (OSError, ValueError) as exc:
        raise ClusterClipError(f"{path}: unreadable export record ({exc}); choose an empty --out, or delete the "
                               "folder if it only holds an old export") from exc
    if not isinstance(found, dict) or not isinstance(found.get("identity"), dict):
        raise ClusterClipError(f"{path}: records no plan identity (not a clusterclip export, or one of an older "
                               "version); choose an empty --out, or delete the folder if it only holds an old export")
    files = found.get("files", [])
    bad = [f for f in files if not isinstance(f, str) or not f or PurePosixPath(f).is_absolute()
           or any(p in ("..", ".") for p in PurePosixPath(f).parts)] if isinstance(files, list) else [files]
    if bad:
        raise ClusterClipError(f"{path}: lists {bad[0]!r}, not a file inside the folder (edited?); refusing to "
                               "write or delete anything there: choose an empty --out")
    return found["identity"], set(files)


def _entries(folder: Path, prefix: str = "") -> Iterator[tuple[str, bool]]:
    """``(relative path, is a real folder)`` of everything under ``folder``, links not followed."""
    with os.scandir(folder) as it:
        for entry in sorted(it, key=lambda e: e.name):
            rel = prefix + entry.name
            is_dir = entry.is_dir(follow_symlinks=False)
            yield rel, is_dir
            if is_dir:
                yield from _entries(Path(entry.path), rel + "/")


def _survey(out: Path) -> tuple[list[dict[str, Any]], set[str], set[str], list[str]]:
    """What ``out`` holds: the identities recorded there, the files its manifest lists, every file an
    export wrote there (the manifest's plus those of a publication that was interrupted), and the
    entries no export wrote. Refuses a link or a file where the folder, a record or staging should be.
    """
    _no_link(out)
    if not out.exists():
        return [], set(), set(), []
    if not out.is_dir():
        raise ClusterClipError(f"{out}: is a file, not a folder; --out must name an empty or new folder")
    manifest, staging = out / A.EXPORT_MANIFEST, out / A.EXPORT_STAGING
    journal = staging / A.EXPORT_IDENTITY
    for path in (manifest, staging, out / _STREAM, journal):
        _no_link(path)
    identities: list[dict[str, Any]] = []
    listed: set[str] = set()
    owned: set[str] = set()
    for path in (manifest, journal):
        if path.is_file():
            identity, files = _read_record(path)
            identities.append(identity)
            owned |= files
            if path == manifest:
                listed = files
    ours = {A.EXPORT_MANIFEST} if manifest.is_file() else set()
    if journal.is_file() or (staging.is_dir() and not any(staging.iterdir())):
        ours |= {A.EXPORT_STAGING, _STREAM}
    parents = {p.as_posix() for rel in owned for p in PurePosixPath(rel).parents}
    foreign = [rel for rel, is_dir in _entries(out)
               if rel not in owned and rel.split("/")[0] not in ours and not (is_dir and rel in parents)]
    return identities, listed, owned, foreign


def _refuse_foreign(out: Path, exported: bool, foreign: list[str]) -> None:
    """Export writes only into an empty or new folder or its own export; it never overwrites or deletes
    what it did not write."""
    if not foreign:
        return
    shown = ", ".join(foreign[:3]) + (f" ... {len(foreign)} entries" if len(foreign) > 3 else "")
    if not exported:
        raise ClusterClipError(f"{out}: not empty and not a clusterclip export (holds {shown}); export writes only "
                               "into an empty or new folder or its own export of the same plan: choose an empty --out")
    raise ClusterClipError(f"{out}: holds files clusterclip export did not write ({shown}) beside its export, and "
                           "export never overwrites or deletes them: move them away or choose an empty --out")


def _claim(out: Path, identity: dict[str, Any]) -> Path:
    """Check ``out`` against ``identity`` and return a fresh staging folder that records it.

    Files a killed publication moved in but the manifest does not list are removed (they are the
    export's own), so that afterwards ``out`` holds exactly the manifest's files.
    """
    identities, listed, owned, foreign = _survey(out)
    for found in identities:
        if found != identity:
            diff = ", ".join(f"{k}: {found.get(k)!r} here, {v!r} now" for k, v in identity.items()
                             if found.get(k) != v)
            raise ClusterClipError(f"{out} holds an export of another plan or setting ({diff}); refusing to mix "
                                   "them: delete the folder or choose another --out")
    _refuse_foreign(out, bool(identities), foreign)
    for rel in sorted(owned - listed):
        _target(out, rel).unlink(missing_ok=True)
    staging = out / A.EXPORT_STAGING
    (out / _STREAM).unlink(missing_ok=True)
    if staging.exists():
        shutil.rmtree(staging)
    try:
        staging.mkdir(parents=True)
        save_json(staging / A.EXPORT_IDENTITY, {"identity": identity})
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise _write_error(out, exc) from exc
    return staging


def _write_error(out: Path, exc: OSError) -> ClusterClipError:
    """One line for an OS error while staging the export (its partial files are removed by then)."""
    if exc.errno in DISK_FULL_ERRNOS:
        return ClusterClipError(f"{out}: no space left on the device while exporting ({exc.strerror}); the partial "
                                "files were removed and any earlier export is intact: free space or choose another "
                                "--out")
    return ClusterClipError(f"{out}: cannot write the export ({exc.filename or out}: {exc.strerror or exc}); the "
                            "partial files were removed and any earlier export is intact")


def _discard(out: Path, staging: Path, created: bool) -> None:
    """Remove what a failed export staged (and ``out`` itself when it ``created`` it): the previous export
    in ``out`` is untouched."""
    (out / _STREAM).unlink(missing_ok=True)
    shutil.rmtree(staging, ignore_errors=True)
    if created:
        with contextlib.suppress(OSError):
            out.rmdir()


def _prepare(out: Path, staging: Path, identity: dict[str, Any]) -> tuple[list[str], set[str]]:
    """The staged files and the earlier export's files to remove, checked before anything is moved; the
    staging journal then records every file the export owns in ``out``, so that an interrupted
    publication can be finished by the next run."""
    files = sorted(rel for p in staging.rglob("*")
                   if p.is_file() and (rel := p.relative_to(staging).as_posix()) != A.EXPORT_IDENTITY)
    identities, _, owned, foreign = _survey(out)
    _refuse_foreign(out, bool(identities), foreign)
    for rel in files:
        target = _target(out, rel)
        if rel not in owned and (target.exists() or target.is_symlink()):
            raise ClusterClipError(f"{target}: appeared while exporting and was not written by clusterclip "
                                   "export; refusing to overwrite it: move it away or choose an empty --out")
    save_json(staging / A.EXPORT_IDENTITY, {"identity": identity, "files": sorted(owned | set(files))})
    return files, owned - set(files)


def _publish(out: Path, staging: Path, files: list[str], stale: set[str], manifest: dict[str, Any]) -> list[Path]:
    """Move the staged files into ``out``, write the manifest, then remove the earlier export's other files.

    Interrupted here, the staging journal lists every file the export owns in ``out``: the same command
    run again finishes the job."""
    try:
        for rel in files:
            target = _target(out, rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / rel, target)
        save_json(out / A.EXPORT_MANIFEST, {**manifest, "files": files})
        for rel in sorted(stale):
            _target(out, rel).unlink(missing_ok=True)
        shutil.rmtree(staging)
    except OSError as exc:
        raise ClusterClipError(f"{out}: interrupted while moving the finished export into place ({exc.filename}: "
                               f"{exc.strerror or exc}); run the same command again to finish it") from exc
    return [out / rel for rel in files]


# ----------------------------------------------------------------------------- inputs, free space

def _estimate_bytes(corpus: _CorpusIndex, run: RunDir, plan_record: dict[str, Any], draws: int,
                    cfg: ExportConfig, tokenizer: _Tokenizer | None) -> int:
    """A generous estimate of the bytes the export writes: the planned documents' text (the larger of the
    corpus's mean document per draw and the plan's token count at the corpus's bytes per token) plus a
    row's fields; with a tokenizer, one token per two bytes of text; ``hf`` twice (its stream, then the
    saved copy)."""
    from clusterclip.store import load_npy

    planned = plan_record.get("stats", {}).get("tokens")
    text = draws * corpus.text_bytes / max(corpus.n, 1)
    if planned and A.TOKENS in run.require(A.CORPUS_STAGE, verify=False).get("artifacts", {}):
        run.require(A.CORPUS_STAGE, only=[A.TOKENS])
        total = int(np.asarray(load_npy(run.path(A.TOKENS), mmap=True), dtype=np.int64).sum())
        if total > 0:
            text = max(text, planned * corpus.text_bytes / total)
    size = text + 64 * draws if tokenizer is None else text / 2 * tokenizer.dtype.itemsize + 8 * draws
    return int(size * (2 if cfg.fmt == "hf" else 1))


def _check_space(out: Path, need: int) -> None:
    """Fail before writing when the filesystem of ``out`` has less free space than ``need`` bytes."""
    free = shutil.disk_usage(out).free
    if need > free:
        raise ClusterClipError(f"{out}: this export needs about {_mib(need)} but its filesystem has {_mib(free)} "
                               "free; free space or choose another --out")


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"



def export_plan(run: RunDir | str | os.PathLike[str], plan_name: str | None, out_dir: str | os.PathLike[str],
                config: ExportConfig | None = None, **options: Any) -> list[Path]:
    """Write the planned stream of ``plans/<plan_name>`` (the only plan when None) into ``out_dir``.

    ``config`` (or its fields as keyword arguments: ``fmt``, ``shard_size``, ``memory_mb``, ``tokenizer``,
    ``append_eos``, ``seq_len``) chooses the format; see the module docstring for the policy and
    ``docs/export.md`` for each format's layout. Returns the written files; ``out_dir/export.json``
    records the plan's identity, the files and the counts.
    """
    from clusterclip.cluster import load_labels
    from clusterclip.plan.integrity import open_plan, resolve_plan_path

    cfg = config if config is not None else ExportConfig(**options)
    run = run if isinstance(run, RunDir) else RunDir(run)
    t0 = time.perf_counter()
    plan_path = resolve_plan_path(run.root, plan_name) if plan_name else resolve_plan_path(run.root)
    name = plan_path.parent.name
    stage = A.plan_stage_name(name)
    plan_record = run.require_current(stage, verify=True)
    corpus = _CorpusIndex(run)
    order = open_plan(plan_path, n_docs=corpus.n).verified()
    labels = load_labels(run, mmap=True)
    if labels.shape != (corpus.n,) or not np.issubdtype(labels.dtype, np.integer):
        raise StaleArtifactError(f"{run.path(A.LABELS)}: {labels.dtype} {labels.shape} labels for a corpus of "
                                 f"{corpus.n} documents; rebuild them with "
                                 f"`{run.rebuild_command(A.CLUSTER_STAGE, force=True)}`")
    tokenizer = _Tokenizer(cfg.tokenizer, cfg.append_eos) if cfg.tokenizer is not None else None
    plan_sha256 = plan_record["artifacts"][A.plan_path(name, A.PLAN_ORDER)]["sha256"]  # verified by require
    identity = {"plan": name, "plan_sha256": plan_sha256, "format": cfg.fmt,
                "tokenizer": tokenizer.identity if tokenizer is not None else None,
                "append_eos": cfg.append_eos, "seq_len": cfg.seq_len}
    need = _estimate_bytes(corpus, run, plan_record, int(order.shape[0]), cfg, tokenizer)
    out = Path(out_dir)
    created = not out.exists() and not out.is_symlink()
    try:
        staging = _claim(out, identity)
    except ClusterClipError:
        if created:
            with contextlib.suppress(OSError):
                out.rmdir()
        raise
    try:
        _check_space(staging, need)
        writer = WRITERS[cfg.fmt](staging, tokenizer.dtype if tokenizer is not None else np.dtype(np.int32))
        window = _window_rows(corpus, order.shape[0], cfg)
        stream: Iterator[pa.Table] = _windows(order, corpus, labels, window, tokenizer)
        packer = _Packer(cfg.seq_len) if cfg.seq_len is not None else None
        if packer is not None:
            stream = (packer.pack(t) for t in stream)
        rows = 0
        for batch in _rebatch(stream, cfg.shard_size):
            writer.write(batch)
            rows += batch.num_rows
        writer.close()
        files, stale = _prepare(out, staging, identity)
    except Exception as exc:
        _discard(out, staging, created)
        if isinstance(exc, OSError):
            raise _write_error(out, exc) from exc
        raise
    manifest = {"identity": identity, "run_dir": str(run.root), "documents": int(order.shape[0]), "rows": rows,
                "columns": _columns(cfg), "dropped_tokens": packer.dropped if packer is not None else 0,
                "config": asdict(cfg), "corpus_reads": -(-order.shape[0] // window) if order.size else 0,
                "seconds": round(time.perf_counter() - t0, 3)}
    return _publish(out, staging, files, stale, manifest)


def _columns(cfg: ExportConfig) -> list[str]:
    if cfg.seq_len is not None:
        return ["tokens"]
    first = "tokens" if cfg.tokenizer is not None else "text"
    return [first] if cfg.fmt == "megatron" else [first, "id", "index", "cluster"]


__all__ = ["FORMATS", "ExportConfig", "export_plan"]
