"""The scratch folder of this process's working copies of object storage: removed when the process ends, and, when
a kill left it behind, by the next process of this machine that makes one."""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing.util
import os
import shutil
import tempfile
from pathlib import Path


def scratch_folder(mark: str) -> Path:
    """A new folder ``TMP/<mark><pid>-XXXX``, removed at exit (also from a worker process of a pool, which ends
    without ``atexit`` but with multiprocessing's own finalizers); first the folders of processes that no longer
    run are swept."""
    sweep(Path(tempfile.gettempdir()), mark)
    base = Path(tempfile.mkdtemp(prefix=f"{mark}{os.getpid()}-"))
    atexit.register(shutil.rmtree, base, True)
    multiprocessing.util.Finalize(None, shutil.rmtree, args=(str(base), True), exitpriority=0)
    return base


def sweep(tmp: Path, mark: str) -> None:
    """Remove the folders ``<mark><pid>-...`` in ``tmp`` whose process no longer runs on this machine (killed
    before its exit handlers ran)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(tmp):
            pid = entry.name[len(mark):].split("-", 1)[0]
            if not (entry.name.startswith(mark) and pid.isdigit() and entry.is_dir(follow_symlinks=False)):
                continue
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                shutil.rmtree(entry.path, ignore_errors=True)
            except (PermissionError, OverflowError):
                pass
