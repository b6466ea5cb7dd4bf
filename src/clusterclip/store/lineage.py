"""Which stages of a run directory can still be used: staleness and lineage, from the records alone.

A record lists the output hash of every upstream stage it was built from (``upstream``). It is *stale*
when one of those stages was rebuilt since, directly or further up; consumers refuse a stale stage with
the commands that rebuild it, upstream first. A record that *grew* (``grown_from``: the output hashes of
the versions it extends, e.g. after documents were appended) does not make what was built on an earlier
version stale: that stage is *behind* (still valid over the documents it was built from).
"""

from __future__ import annotations

import shlex
import stat
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

from clusterclip.store import layout as A
from clusterclip.store.files import StaleArtifactError, config_hash
from clusterclip.store.lock import held_elsewhere

REGROW = "regrow"
"""Record field: the command lines (``argv`` with :data:`clusterclip.store.layout.RUN`) that re-apply, in
order, what grew the stage after its ``command`` built it (``clusterclip add`` writes them)."""


def record_output_hash(rec: Mapping[str, Any]) -> str:
    """Hash that identifies a stage's outputs, from its record (config, inputs, artifact checksums)."""
    return config_hash({"config": rec.get("config_hash"), "inputs": rec.get("inputs_hash"),
                        "artifacts": artifact_checksums(rec)})


def artifact_checksums(record: Mapping[str, Any]) -> dict[str, str | None]:
    """``{artifact: sha256}`` of a stage record: what its outputs are, whenever they were written."""
    return {rel: meta.get("sha256") if isinstance(meta, Mapping) else None
            for rel, meta in record.get("artifacts", {}).items()}


def grown_from(rec: Mapping[str, Any]) -> list[str]:
    """The ``grown_from`` field of a record that extends ``rec`` (documents appended): the output hashes of the
    versions it grew from. What was built on those covers fewer documents but stays valid."""
    return [*rec.get("grown_from", []), record_output_hash(rec)]


def check_record_files(paths: Iterable[Path]) -> None:
    """Refuse a run directory where a record (one of ``paths``, those that exist or are links) is no regular
    file (a FIFO, a folder, a device would hang or mislead every reader): one line naming it. Only ``lstat``
    is called; nothing is opened."""
    for path in paths:
        if not (path.is_symlink() or path.exists()):
            continue
        mode = path.lstat().st_mode
        if not stat.S_ISREG(mode):
            kind = "a folder" if stat.S_ISDIR(mode) else "a symbolic link" if stat.S_ISLNK(mode) else \
                "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
            raise StaleArtifactError(f"{path}: {kind} in place of a record of the run directory; remove it "
                                     "(then re-run the stage that wrote it)")


def edited_reason(rec: Mapping[str, Any], later: Mapping[str, Any]) -> str | None:
    """Why ``rec``, whose output is not the one ``later`` was built from, looks edited by hand rather than
    rebuilt: its config does not hash to its ``config_hash``, or its artifacts were all written before
    those of ``later`` (a rebuild writes new ones)."""
    if isinstance(rec.get("config"), Mapping) and config_hash(rec["config"]) != rec.get("config_hash"):
        return "its config does not match its config_hash"
    times = [[m.get("mtime_ns") for m in r.get("artifacts", {}).values() if isinstance(m, Mapping)]
             for r in (rec, later)]
    if all(t and all(isinstance(x, int) for x in t) for t in times) and max(times[0]) <= min(times[1]):
        return "its artifacts are older than what was built from them"
    return None


class Lineage:
    """Staleness methods of :class:`clusterclip.store.RunDir` (which supplies ``record``, ``require``,
    ``verify`` and ``rebuild_command``)."""

    root: Path
    where: str

    def record(self, stage: str) -> dict[str, Any] | None: ...
    def require(self, stage: str, verify: bool = True, only: Collection[str] | None = None) -> dict[str, Any]: ...
    def verify(self, stage: str, rec: Mapping[str, Any] | None = None, checksums: bool = True,
               only: Collection[str] | None = None) -> None: ...
    def rebuild_command(self, stage: str, rec: Any = ..., force: bool = False) -> str: ...

    def output_hash(self, stage: str) -> str:
        """Hash that identifies a finished stage's outputs: the input hash of the stages after it."""
        return record_output_hash(self.require(stage, verify=False))

    def require_current(self, stage: str, upstream: str | None = None, *, verify: bool = False,
                        only: Collection[str] | None = None) -> dict[str, Any]:
        """The record of ``stage``, checked to be built from the current outputs of the stages before it.

        Refuses to mix artifacts: if an upstream stage was rebuilt after ``stage`` (directly, or further
        up), ``stage`` is stale and this raises :class:`StaleArtifactError` with the commands that rebuild
        it. ``upstream`` checks only that one stage's direct input hash. With ``verify`` the artifacts (or
        the ``only`` ones) are checksum-verified too. This is the call for every consumer of a stage's
        artifacts (report, export, sampler).
        """
        rec = self.require(stage, verify=False)
        if upstream is not None:
            if rec.get("inputs_hash") != self.output_hash(upstream):
                raise StaleArtifactError(self._unfinished_write() or (
                    f"{self.root}: stage `{stage}` was built from an older `{upstream}` output; "
                    f"re-run it: `{self.rebuild_command(stage)}`"))
        else:
            why = self.stale_reason(stage)
            if why:
                raise StaleArtifactError(self._unfinished_write() or why)
        if verify:
            self.verify(stage, rec, only=only)
        return rec

    def _unfinished_write(self) -> str | None:
        """While another command writes the run directory, or ``clusterclip add`` is unfinished (its journal is
        there), records are half rewritten, so stages look stale or gone: the way out is to wait for the writer,
        or to finish or undo the add, not to rebuild them."""
        if held_elsewhere(self.root):
            return (f"{self.root}: another clusterclip process is writing this run directory right now (lock held "
                    f"on {A.LOCK}); wait for it to finish, then run the command again")
        if not self.path(A.ADD_JOURNAL).exists():
            return None
        return (f"{self.root}: an add is pending ({A.ADD_JOURNAL}): finish it by running the same `clusterclip add "
                f"{self.root} ...` again, or undo it with `clusterclip add {self.root} --abort`")

    def stale_reason(self, stage: str) -> str | None:
        """Why ``stage`` can no longer be used, as one line ending in the commands that rebuild it; None
        when it is current or has not run.

        A stage is stale when an upstream stage it was built from was rebuilt since (its output hash is
        not the one the stage recorded), directly or further up: plans after ``cluster``, ``cluster`` after
        ``embed``, ``embed`` after ``corpus``. A corrupt record (its own or an upstream one) is a reason
        too. Only the records are read. A plan built before ``clusterclip add`` grew the run is not stale
        (its indices are still valid; it covers the documents it was built from): see :meth:`behind_note`.
        """
        found = self._stale(stage, set())
        if found is None:
            return None
        reason, commands = found
        steps = ", then ".join(f"`{c}`" for c in dict.fromkeys(commands))
        return f"{self.root}: stage `{stage}` is stale: {reason}; rebuild: {steps}"

    def behind_note(self, stage: str) -> str | None:
        """A note when ``stage`` (a plan) was built before ``clusterclip add`` grew an upstream stage: still
        usable, over the documents it was built from; None otherwise."""
        try:
            rec = self.record(stage)
            if rec is None or self._stale(stage, set()):
                return None
            for up, h in self._upstream_hashes(stage, rec).items():
                up_rec = self.record(up)
                if up_rec is not None and h != record_output_hash(up_rec) and h in up_rec.get("grown_from", []):
                    return (f"stage `{stage}` was built before `clusterclip add` grew `{up}`: it covers only the "
                            f"documents before the add; `{self.rebuild_command(stage)}` rebuilds it over all of them")
        except StaleArtifactError:
            return None
        return None

    def _stale(self, stage: str, seen: set[str]) -> tuple[str, list[str]] | None:
        """``(reason, commands)`` when ``stage`` is stale, else None (see :meth:`stale_reason`)."""
        if stage in seen:
            return None
        seen.add(stage)
        try:
            rec = self.record(stage)
        except StaleArtifactError:
            return "its record is corrupt", [self.rebuild_command(stage, None, force=True)]
        if rec is None:
            return None
        for up, h in self._upstream_hashes(stage, rec).items():
            try:
                up_rec = self.record(up)
            except StaleArtifactError:
                return (f"the record of `{up}`, which it was built from, is corrupt",
                        [self.rebuild_command(up, None, force=True)])
            if up_rec is None:
                return f"`{up}`, which it was built from, is gone", [self.rebuild_command(stage, rec)]
            if h != record_output_hash(up_rec) and h not in up_rec.get("grown_from", []):
                edited = edited_reason(up_rec, rec)
                if edited:
                    return (f"the record of `{up}` was modified by hand ({edited})",
                            self.rebuild_steps(up, up_rec, force=True))
                return f"`{up}` was rebuilt after it", self.rebuild_steps(stage, rec)
            found = self._stale(up, seen)
            if found is not None:
                return f"`{up}`, which it was built from, is stale ({found[0]})", \
                    [*found[1], self.rebuild_command(stage, rec)]
        return None

    def rebuild_steps(self, stage: str, rec: Any = ..., force: bool = False) -> list[str]:
        """The commands that rebuild ``stage`` as it is: its ``command``, then each of its ``regrow`` commands
        (what grew it since, e.g. every ``clusterclip add``), in order."""
        if rec is ...:
            try:
                rec = self.record(stage)
            except StaleArtifactError:
                rec = None
        regrow = rec.get(REGROW, []) if isinstance(rec, Mapping) else []
        root = shlex.quote(self.where)
        return [self.rebuild_command(stage, rec, force=force),
                *(" ".join(root if a == A.RUN else shlex.quote(str(a)) for a in argv)
                  for argv in regrow if isinstance(argv, list))]

    def _upstream_hashes(self, stage: str, rec: Mapping[str, Any]) -> dict[str, str]:
        """``{upstream stage: its output hash when ``stage`` was built}``, as its record lists them."""
        upstream = rec.get("upstream")
        return dict(upstream) if isinstance(upstream, Mapping) else {}
