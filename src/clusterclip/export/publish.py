"""The output folder of an export: what it owns there, its staging folder, free space, publication.

Export owns only what it wrote. It writes into a missing or empty folder or an earlier export of the same
identity (plan and its SHA-256, format, tokenizer, EOS, sequence length), refuses anything else (files it
did not write, another identity, symbolic links), and never overwrites or deletes a file it did not write.
What it wrote is what the folder's record ``export.json`` lists (``files``) plus what the staging journal
``.partial/identity.json`` lists: the journal is written before anything changes (the earlier export's
files) and again before the first file is moved into place (every file it owns), so a killed export is
finished by the next run of the same command.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple

from clusterclip.contract.export import EXPORT_IDENTITY, EXPORT_MANIFEST, EXPORT_STAGING
from clusterclip.errors import DISK_FULL_ERRNOS, ClusterClipError
from clusterclip.store import TMP_PREFIX, atomic_write, load_json, save_json
from clusterclip.store import layout as A

STREAM = EXPORT_STAGING + ".arrow"
"""The ``hf`` writer's Arrow stream, beside the staging folder (``save_to_disk`` cannot write around it)."""


class Survey(NamedTuple):
    """What an output folder holds: the identities recorded there, the files its record lists, every file
    an export wrote there (the record's plus those a killed export's journal lists) and what no export wrote."""

    identities: list[dict[str, Any]]
    listed: set[str]
    owned: set[str]
    foreign: list[str]


def _no_link(path: Path) -> None:
    """Refuse a symbolic link where export writes, deletes or reads its own records."""
    if path.is_symlink():
        raise ClusterClipError(f"{path}: is a symbolic link (to {os.readlink(path)}); clusterclip export does not "
                               "follow links where it writes or deletes: remove the link or choose another --dest")


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
        raise ClusterClipError(f"{path}: unreadable export record ({exc}); choose an empty --dest, or delete the "
                               "folder if it only holds an old export") from exc
    if not isinstance(found, dict) or not isinstance(found.get("identity"), dict):
        raise ClusterClipError(f"{path}: records no plan identity (not a clusterclip export, or one of an older "
                               "version); choose an empty --dest, or delete the folder if it only holds an old export")
    files = found.get("files", [])
    bad = [f for f in files if not isinstance(f, str) or not f or PurePosixPath(f).is_absolute()
           or any(p in ("..", ".") for p in PurePosixPath(f).parts)] if isinstance(files, list) else [files]
    if bad:
        raise ClusterClipError(f"{path}: lists {bad[0]!r}, not a file inside the folder (edited?); refusing to "
                               "write or delete anything there: choose an empty --dest")
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


def survey(out: Path) -> Survey:
    """What ``out`` holds (:class:`Survey`). Refuses a link or a file where the folder, a record or staging
    should be; the writer lock ``.lock`` counts as the export's."""
    _no_link(out)
    if not out.exists():
        return Survey([], set(), set(), [])
    if not out.is_dir():
        raise ClusterClipError(f"{out}: is a file, not a folder; --dest must name an empty or new folder")
    manifest, staging = out / EXPORT_MANIFEST, out / EXPORT_STAGING
    journal = staging / EXPORT_IDENTITY
    for path in (manifest, staging, out / STREAM, journal):
        _no_link(path)
    found = Survey([], set(), set(), [])
    for path in (manifest, journal):
        if path.is_file():
            identity, files = _read_record(path)
            found.identities.append(identity)
            found.owned.update(files)
            if path == manifest:
                found.listed.update(files)
    ours = {A.LOCK} | ({EXPORT_MANIFEST} if manifest.is_file() else set())
    if journal.is_file() or (staging.is_dir() and not any(staging.iterdir())):
        ours |= {EXPORT_STAGING, STREAM}
    entries = list(_entries(out))
    if found.identities:  # a killed atomic write's temp file beside one of the export's files is the export's own
        mine = found.owned | {EXPORT_MANIFEST}
        found.owned.update(rel for rel, is_dir in entries if not is_dir and _temp_target(rel) in mine)
    parents = {p.as_posix() for rel in found.owned for p in PurePosixPath(rel).parents}
    found.foreign.extend(rel for rel, is_dir in entries if rel not in found.owned
                         and rel.split("/")[0] not in ours and not (is_dir and rel in parents))
    return found


def _temp_target(rel: str) -> str | None:
    """The file whose atomic write left the temp file ``rel`` (``.tmp-NAME.XXXX``), or None."""
    path = PurePosixPath(rel)
    if not path.name.startswith(TMP_PREFIX) or "." not in path.name[len(TMP_PREFIX):]:
        return None
    return (path.parent / path.name[len(TMP_PREFIX):].rsplit(".", 1)[0]).as_posix()


def _refuse_foreign(out: Path, exported: bool, foreign: list[str]) -> None:
    """Export writes only into an empty or new folder or its own export; it never overwrites or deletes
    what it did not write."""
    if not foreign:
        return
    shown = ", ".join(foreign[:3]) + (f" ... {len(foreign)} entries" if len(foreign) > 3 else "")
    if not exported:
        raise ClusterClipError(f"{out}: not empty and not a clusterclip export (holds {shown}); export writes only "
                               "into an empty or new folder or its own export of the same plan: choose an empty --dest")
    raise ClusterClipError(f"{out}: holds files clusterclip export did not write ({shown}) beside its export, and "
                           "export never overwrites or deletes them: move them away or choose an empty --dest")


def write_error(out: Path, exc: OSError) -> ClusterClipError:
    """One line for an OS error while staging the export (its partial files are removed by then)."""
    if exc.errno in DISK_FULL_ERRNOS:
        return ClusterClipError(f"{out}: no space left on the device while exporting ({exc.strerror}); the partial "
                                "files were removed and any earlier export is intact: free space or choose another "
                                "--dest")
    return ClusterClipError(f"{out}: cannot write the export ({exc.filename or out}: {exc.strerror or exc}); the "
                            "partial files were removed and any earlier export is intact")


def check_space(out: Path, need: int) -> None:
    """Fail before writing when the filesystem of ``out`` has less free space than ``need`` bytes."""
    free = shutil.disk_usage(out).free
    if need > free:
        raise ClusterClipError(f"{out}: this export needs about {_mib(need)} but its filesystem has {_mib(free)} "
                               "free; free space or choose another --dest")


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


class ExportFolder:
    """The output folder ``out`` of an export of ``identity``, from the first check to the last clean-up.

    :meth:`check` refuses a folder export does not own (nothing written yet); under the folder's writer
    lock, :meth:`claim` opens the staging folder, the writer fills it, :meth:`prepare` journals what the
    export will own, :meth:`publish` moves the files in, the stage runner writes ``export.json`` and
    :meth:`finish` removes the earlier export's other files and the staging folder. :meth:`fail` undoes a
    failed export (the earlier one stays as it was) and :meth:`forget` removes a folder the export created.
    """

    def __init__(self, out: Path, identity: dict[str, Any]) -> None:
        self.out = out
        self.identity = identity
        self.staging = out / EXPORT_STAGING
        self.created = not out.exists() and not out.is_symlink()
        self.manifest: bytes | None = None
        self.stale: set[str] = set()

    def check(self) -> Survey:
        """Refuse ``out`` unless it is missing, empty or an export of this identity with nothing else in it
        and no link where export writes or deletes."""
        found = survey(self.out)
        for other in found.identities:
            if other != self.identity:
                keys = [*self.identity, *(k for k in other if k not in self.identity)]
                diff = ", ".join(f"{k}: {other.get(k)!r} here, {self.identity.get(k)!r} now" for k in keys
                                 if other.get(k) != self.identity.get(k))
                raise ClusterClipError(f"{self.out} holds an export of another plan or setting ({diff}); refusing "
                                       "to mix them: delete the folder or choose another --dest")
        _refuse_foreign(self.out, bool(found.identities), found.foreign)
        for rel in found.owned:
            _target(self.out, rel)
        return found

    def claim(self) -> None:
        """Check ``out`` again (the caller holds its lock) and open a fresh staging folder whose journal
        records the identity and the earlier export's files. Files a killed publication moved in but the
        record does not list are removed (they are the export's own), so ``out`` holds the record's files."""
        found = self.check()
        for rel in sorted(found.owned - found.listed):
            _target(self.out, rel).unlink(missing_ok=True)
        manifest = self.out / EXPORT_MANIFEST
        self.manifest = manifest.read_bytes() if manifest.is_file() else None
        (self.out / STREAM).unlink(missing_ok=True)
        if self.staging.exists():
            shutil.rmtree(self.staging)
        try:
            self.staging.mkdir(parents=True)
            save_json(self.staging / EXPORT_IDENTITY, {"identity": self.identity, "files": sorted(found.listed)})
        except OSError as exc:
            shutil.rmtree(self.staging, ignore_errors=True)
            raise write_error(self.out, exc) from exc

    def prepare(self) -> list[str]:
        """The staged files, checked before anything is moved; the journal then lists every file the
        export owns in ``out``, so that an interrupted publication is finished by the next run."""
        files = sorted(rel for p in self.staging.rglob("*")
                       if p.is_file() and (rel := p.relative_to(self.staging).as_posix()) != EXPORT_IDENTITY)
        found = survey(self.out)
        _refuse_foreign(self.out, bool(found.identities), found.foreign)
        for rel in files:
            target = _target(self.out, rel)
            if rel not in found.owned and (target.exists() or target.is_symlink()):
                raise ClusterClipError(f"{target}: appeared while exporting and was not written by clusterclip "
                                       "export; refusing to overwrite it: move it away or choose an empty --dest")
        journal = {"identity": self.identity, "files": sorted(found.owned | set(files))}
        save_json(self.staging / EXPORT_IDENTITY, journal)
        self.stale = found.owned - set(files)
        return files

    def publish(self, files: list[str]) -> None:
        """Move the staged ``files`` into ``out`` (the record is written next, by the stage runner)."""
        with self._finishing():
            for rel in files:
                target = _target(self.out, rel)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(self.staging / rel, target)

    def finish(self) -> None:
        """After the record: remove the earlier export's files the new one did not write, and the staging."""
        with self._finishing():
            for rel in sorted(self.stale):
                _target(self.out, rel).unlink(missing_ok=True)
            (self.out / STREAM).unlink(missing_ok=True)
            if self.staging.exists():
                shutil.rmtree(self.staging)

    @contextlib.contextmanager
    def _finishing(self) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            raise ClusterClipError(f"{self.out}: interrupted while moving the finished export into place "
                                   f"({exc.filename}: {exc.strerror or exc}); run the same command again to finish "
                                   "it") from exc

    def fail(self) -> None:
        """Undo a failed export before publication: the staged files go and the earlier export's record
        (removed by the stage runner before building) is put back, so the earlier export is as it was. If
        the record cannot be put back, the journal stays: it still lists the earlier export's files."""
        (self.out / STREAM).unlink(missing_ok=True)
        manifest = self.out / EXPORT_MANIFEST
        if self.manifest is not None and not manifest.exists():
            try:
                with atomic_write(manifest) as fh:
                    fh.write(self.manifest)
            except OSError:
                return
        shutil.rmtree(self.staging, ignore_errors=True)

    def forget(self) -> None:
        """Remove ``out`` again if this export created it and it holds nothing but the writer lock."""
        if self.created and self.out.is_dir() and set(os.listdir(self.out)) <= {A.LOCK}:
            with contextlib.suppress(OSError):
                (self.out / A.LOCK).unlink(missing_ok=True)
                self.out.rmdir()
