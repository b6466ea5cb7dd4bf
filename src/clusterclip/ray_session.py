"""The Ray session of the ``ray`` engine: connecting or starting a local instance, keeping Ray's own console
messages out of clusterclip's output, and removing a local instance's session folder afterwards."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from clusterclip.errors import ClusterClipError
from clusterclip.settings import SettingsError


def load_ray() -> Any:
    """The ``ray`` module with Ray Data loaded; a missing extra is a :class:`SettingsError` naming it."""
    try:
        import ray
        import ray.data
    except ImportError:
        raise SettingsError("engine", "ray needs `pip install 'clusterclip[ray]'`") from None
    return ray


_local: list[bool] = []
"""Whether the Ray instance of the innermost :func:`ray_session` that started one is a local instance."""


def started_locally() -> bool:
    """Whether Ray runs as a local instance that a :func:`ray_session` of this process started."""
    return bool(_local) and _local[-1]


@contextlib.contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None) -> Iterator[Any]:
    """Connect to Ray (``address``, else ``RAY_ADDRESS``: an existing cluster; neither: start a local
    instance) for a block.

    Reuses a session that is already initialised, and shuts down only one it started itself, so the
    stages of one ``clusterclip run`` share a single Ray instance. The session folder of a local instance
    (logs, sockets: ``/tmp/ray/session_*``) is removed after shutdown, so runs leave nothing behind. Ray's
    console messages are kept to errors inside the block (:func:`quiet_ray_logs`).
    """
    ray = load_ray()
    address = address or os.environ.get("RAY_ADDRESS") or None
    started, session = False, None
    with quiet_ray_logs():
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                      "configure_logging": False}
            if address:
                _probe(address)
                kwargs["address"] = address  # the cluster's resources are its own: no num_cpus
            else:
                kwargs["num_cpus"] = num_cpus or os.cpu_count()
            try:
                ray.init(**kwargs)
            except ConnectionError as exc:
                raise ClusterClipError(f"cannot connect to the Ray cluster at {address}: {exc}") from None
            started = True
            session = None if address else session_folder(ray)
            _local.append(not address)
        try:
            ctx = ray.data.DataContext.get_current()
            ctx.execution_options.preserve_order = True
            ctx.enable_progress_bars = False
            yield ray
        finally:
            if started:
                _local.pop()
                ray.shutdown()
                remove_session(session)


@contextlib.contextmanager
def quiet_ray_logs() -> Iterator[None]:
    """Ray's console messages at ERROR only, inside the block: the token-authentication notice of every local
    start, Ray Data's INFO lines about each dataset it runs and its warning that its progress bars are off
    (clusterclip draws its own). Ray Data still writes them to the session's log file; with clusterclip's
    debug logging (``--verbose``) nothing is hidden."""
    if logging.getLogger("clusterclip").isEnabledFor(logging.DEBUG):
        yield
        return
    core = logging.getLogger("ray")
    consoles = [h for h in logging.getLogger("ray.data").handlers if isinstance(h, logging.StreamHandler)]
    levels = [core.level, *(h.level for h in consoles)]
    for target in (core, *consoles):
        target.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for target, level in zip((core, *consoles), levels, strict=True):
            target.setLevel(level)


def _probe(address: str, timeout: float = 3.0) -> None:
    """Refuse in one line, within seconds, a ``host:port`` (or ``ray://host:port``) where nothing listens: Ray itself
    retries such an address for minutes. ``auto`` and addresses without a port are left to Ray."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        return
    import socket

    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise ClusterClipError(f"cannot connect to the Ray cluster at {address}: nothing answers there "
                               f"({exc.strerror or exc}); start one (`ray start --head`) or fix --ray-address"
                               ) from None


def session_folder(ray: Any) -> Path | None:
    """The session folder of the local instance this process started (Ray exposes it only privately; its
    socket paths must stay short, so the folder is not moved with ``_temp_dir``)."""
    try:
        return Path(ray._private.worker._global_node.get_session_dir_path())
    except Exception:  # a Ray without that attribute: leave the folder, as Ray does
        return None


def remove_session(session: Path | None) -> None:
    """Remove a stopped Ray instance's ``session_*`` folder, its ``session_latest`` link when it points there, and
    the Ray temp folder when nothing else is left in it."""
    if session is None or not session.name.startswith("session_"):
        return
    shutil.rmtree(session, ignore_errors=True)
    latest = session.parent / "session_latest"
    if latest.is_symlink() and Path(os.readlink(latest)).name == session.name:
        latest.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        session.parent.rmdir()
