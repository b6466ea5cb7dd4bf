"""Execution engines for the embarrassingly parallel work: reading, embedding, cluster assignment, and the
tasks of dedup and of the one-pass export (:func:`ordered_map`).

``local`` runs in this process. ``ray`` runs the same computation on Ray: input files are read by Ray
tasks (:func:`ray_tasks`, see :func:`clusterclip.corpus.corpus_stage`); corpus parts are read
with Ray Data's ``read_parquet``, embedded by a pool of actors (``map_batches`` with a callable class, one GPU per
actor when the cluster has GPUs and the encoder can use one), and embedding shards are assigned to the
nearest centroid by another actor pool. The driver only writes shards and labels, in document order
(``preserve_order``), so both engines produce the same artifacts. Centroids are always trained on a
sample on one node (the driver), see :mod:`clusterclip.cluster`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from clusterclip.errors import ClusterClipError
from clusterclip.ray_session import load_ray as _ray
from clusterclip.ray_session import ray_session, started_locally
from clusterclip.settings import Settings, SettingsError, is_text, one_of, optional, setting
from clusterclip.store.paths import for_arrow

log = logging.getLogger(__name__)

ENGINES = ("local", "ray")


def check_engine(engine: str) -> str:
    """``engine`` if it is one of :data:`ENGINES`, else a :class:`SettingsError`."""
    problem = one_of(ENGINES)(engine)
    if problem:
        raise SettingsError("engine", problem)
    return engine


@dataclass(frozen=True)
class EngineConfig(Settings):
    """Where the parallel stages run; validated on construction, so the engine is checked once, where a
    command opens its :meth:`session`."""

    engine: str = setting("local", choices=ENGINES,
                          help="where the parallel work runs (reading, embedding, cluster assignment; dedup's "
                               "clusters; the export's one-pass tasks): this machine, or Ray (same results)")
    ray_address: str | None = setting(None, check=optional(is_text),
                                      help="address of an existing Ray cluster (default: start a local Ray "
                                           "instance)")

    def session(self) -> contextlib.AbstractContextManager[Any]:
        """A Ray session for ``engine="ray"`` (shared by every stage inside it); nothing for ``local``."""
        return ray_session(self.ray_address) if self.engine == "ray" else contextlib.nullcontext()


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def ray_tasks(fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]],
              on_done: Callable[[Any], None] | None = None) -> list[Any]:
    """Run ``fn(*args)`` for every ``args`` in ``calls`` as Ray tasks of one CPU each; results in call order.

    ``on_done`` sees each result as its task finishes (for progress). When tasks fail, the error of the
    first failing call in call order is raised (what a sequential run would have hit first), a
    :class:`ClusterClipError` (a bad record, say) as itself; tasks after it are cancelled.
    """
    ray = _ray()
    remote = ray.remote(num_cpus=1)(fn)
    refs = [remote.remote(*args) for args in calls]
    slot = {ref: i for i, ref in enumerate(refs)}
    results: list[Any] = [None] * len(refs)
    failed: dict[int, Exception] = {}
    pending = refs
    while pending:
        done, pending = ray.wait(pending, num_returns=len(pending), timeout=0.5)
        for ref in done:
            try:
                results[slot[ref]] = ray.get(ref)
            except ray.exceptions.RayTaskError as exc:
                failed[slot[ref]] = exc
                continue
            if on_done is not None:
                on_done(results[slot[ref]])
        if failed:
            first = min(failed)
            for ref in pending:
                if slot[ref] > first:
                    ray.cancel(ref)
            pending = [ref for ref in pending if slot[ref] < first]
    if failed:
        _raise_task_error(failed[min(failed)])
    return results


def ordered_map(fn: Callable[..., Any], calls: Iterable[tuple[Any, ...]], engine: str = "local",
                workers: int = 1, ahead: int | None = None) -> Iterator[Any]:
    """``fn(*args)`` for every ``args`` in ``calls``, results yielded in call order, computed in this process
    (``local`` with one worker, lazily: one call per result taken), in ``workers`` spawned processes
    (``local``; at most one per call and per core, each ending with this process, :func:`die_with_parent`), or
    as Ray tasks of one CPU (``ray``, inside :meth:`EngineConfig.session`). At most ``ahead`` calls (default:
    twice the workers or the cluster's CPUs) run or wait to be taken, which bounds what they hold. ``fn`` must
    be importable by name; a failure is raised at its call's turn, as a sequential run would meet it, and the
    calls after it are cancelled."""
    if isinstance(calls, Sequence):
        workers = min(workers, len(calls))  # no process started that would get no call
    if engine == "local" and workers <= 1:
        yield from (fn(*args) for args in calls)
        return
    if engine == "ray":
        ray = _ray()
        remote = ray.remote(num_cpus=1)(fn)
        submit: Callable[[tuple[Any, ...]], Any] = lambda args: remote.remote(*args)  # noqa: E731
        result: Callable[[Any], Any] = _ray_result
        cancel: Callable[[Any], Any] = ray.cancel
        window = ahead or 2 * max(1, int(ray.cluster_resources().get("CPU", 1)))
        pool = None
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        workers = min(workers, available_cores())
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=die_with_parent, initargs=(os.getpid(),))
        submit = lambda args: pool.submit(fn, *args)  # noqa: E731
        result, cancel = (lambda f: f.result()), (lambda f: f.cancel())
        window = ahead or 2 * workers
    queue: list[Any] = []
    todo = iter(calls)
    try:
        for args in todo:
            queue.append(submit(args))
            if len(queue) >= window:
                yield result(queue.pop(0))
        while queue:
            yield result(queue.pop(0))
    finally:
        for job in queue:
            cancel(job)
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def die_with_parent(parent: int) -> None:
    """Initializer of a worker process: end it when the process that started it ends, even by ``kill -9``
    (which runs no cleanup), so no worker is left running, reparented to init. Linux delivers SIGKILL on the
    parent's death (``prctl(PR_SET_PDEATHSIG)``); elsewhere a daemon thread checks the parent every second."""
    import sys

    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
        if os.getppid() != parent:  # it died before the line above
            os._exit(1)
        return
    import threading
    import time

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


def _ray_result(ref: Any) -> Any:
    """A Ray task's result; its failure raised as :func:`_raise_task_error` does."""
    ray = _ray()
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        _raise_task_error(exc)


def _raise_task_error(exc: Any) -> NoReturn:
    """A failed Ray task's error: a :class:`ClusterClipError` (a bad record, say) as itself, else Ray's."""
    if isinstance(exc.cause, ClusterClipError):
        raise exc.cause from None
    raise exc


def _map_actors(ds: Any, cls: type, **options: Any) -> Any:
    """``ds.map_batches`` with the actor class ``cls``. On a local instance this process started, a dead actor is
    not restarted (Ray Data restarts actors without end): it fails the stage, whose finished shards a new run
    reuses, instead of restarting on a crash that repeats, and the driver prints no ``core_worker.cc ... E`` line
    about restarting actors whose arguments Ray Data put in the object store. A cluster keeps Ray's restarts,
    which outlive a lost node."""
    extra = {"max_restarts": 0} if started_locally() else {}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`ray_remote_args` is deprecated")
        return ds.map_batches(cls, batch_format="numpy", **options, **extra)


def _pool_size(ray: Any, per_actor_gpus: float) -> tuple[int, float, float]:
    """``(actors, GPUs, CPUs)`` each for a map stage: one actor per GPU, or one per CPU but one (reads need a CPU to
    run on); on a cluster of one CPU, one actor that reserves none, so the reads still get it (an actor that
    reserved the CPU, or half of it, left the reads waiting forever)."""
    resources = ray.cluster_resources()
    gpus, cpus = float(resources.get("GPU", 0)), float(resources.get("CPU", 1))
    if per_actor_gpus and gpus >= 1:
        return max(1, int(gpus)), 1.0, 1.0
    return (int(cpus) - 1, 0.0, 1.0) if cpus >= 2 else (1, 0.0, 0.0)


class _Encoder:
    """Ray actor: holds one embedder and encodes batches of texts, keeping their document index."""

    def __init__(self, embedder: Any, device: str | None) -> None:
        if device is not None and hasattr(embedder, "device"):
            embedder.device = device
        self.embedder = embedder

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        texts = [str(t) for t in batch["text"]]
        vecs, conf = self.embedder.encode_with_confidence(texts, progress=False)
        # float16 vectors (as stored) beside float32 confidence, in one float32 row: split by the embed stage
        rows = np.concatenate([vecs.astype(np.float16).astype(np.float32), conf.astype(np.float32)], axis=1)
        return {"index": batch["index"], "embedding": rows}


def ray_embed_shards(parts: Sequence[Path], start_row: int, n_docs: int, shard_size: int, embedder: Any,
                     batch_rows: int = 4096) -> Iterator[np.ndarray]:
    """Embed documents ``start_row..n_docs`` on Ray Data; yield shards of ``shard_size`` rows in order, each row
    the float16-exact vector followed by the document's confidence (float32).

    ``start_row`` must be a shard boundary (resume after a kill starts at the first missing shard).
    """
    ray = _ray()
    if start_row % shard_size:
        raise ValueError("start_row must be a multiple of shard_size")
    wants_gpu = bool(getattr(embedder, "USES_GPU", False))
    actors, gpus, cpus = _pool_size(ray, 1.0 if wants_gpu else 0.0)
    paths, filesystem = for_arrow(list(parts))
    ds = ray.data.read_parquet(paths, filesystem=filesystem).select_columns(["index", "text"])
    if start_row:
        from ray.data.expressions import col

        ds = ds.filter(expr=col("index") >= int(start_row))
    ds = _map_actors(ds, _Encoder, fn_constructor_args=(embedder, "cuda" if gpus else None), batch_size=batch_rows,
                     compute=ray.data.ActorPoolStrategy(size=actors), num_gpus=gpus, num_cpus=cpus)
    batches = ((b["index"], b["embedding"]) for b in ds.iter_batches(batch_size=None, batch_format="numpy"))
    yield from in_document_order(batches, start_row, n_docs, shard_size)


def in_document_order(batches: Iterable[tuple[np.ndarray, np.ndarray]], start_row: int, n_docs: int,
                      shard_size: int) -> Iterator[np.ndarray]:
    """Shards of ``shard_size`` rows (the last may be shorter) in document order, from batches of
    ``(index, embedding)`` in any order: Ray Data's parquet reader can hand a large file's blocks back out of
    order, even with ``preserve_order``. Rows wait until every earlier row arrived (memory: the rows that
    arrived ahead); a row missing or arriving twice is an error."""
    expected = start_row
    held_index, held_rows = np.zeros(0, np.int64), None
    for index, rows in batches:
        rows = np.stack(rows) if rows.dtype == object else rows
        index_all = np.concatenate([held_index, np.asarray(index, np.int64)])
        rows_all = rows if held_rows is None else np.concatenate([held_rows, rows])
        order = np.argsort(index_all, kind="stable")
        index_all, rows_all = index_all[order], rows_all[order]
        if not index_all.size:
            continue
        if index_all[0] < expected or np.any(np.diff(index_all) == 0):
            raise ClusterClipError("ray engine: a document's embedding arrived twice")
        gaps = index_all != expected + np.arange(index_all.size)
        ready = int(np.argmax(gaps)) if gaps.any() else index_all.size
        take = ready if expected + ready == n_docs else ready - ready % shard_size
        for a in range(0, take, shard_size):
            yield np.ascontiguousarray(rows_all[a:min(a + shard_size, take)])
        expected += take
        held_index, held_rows = index_all[take:], rows_all[take:]
    if expected != n_docs or held_index.size:
        raise ClusterClipError(f"ray engine: embedded {expected - start_row} of {n_docs - start_row} documents in "
                               "order (rows missing or repeated)")


class _Assigner:
    """Ray actor: nearest centroid (inner product on unit vectors) for batches of embeddings."""

    def __init__(self, centroids: np.ndarray) -> None:
        import faiss

        self.index = faiss.IndexFlatIP(centroids.shape[1])
        self.index.add(np.ascontiguousarray(centroids, dtype=np.float32))

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = batch["data"]
        x = np.stack(x) if x.dtype == object else x
        sim, idx = self.index.search(np.ascontiguousarray(x, dtype=np.float32), 1)
        return {"label": idx[:, 0].astype(np.int32), "score": sim[:, 0].astype(np.float32)}


def ray_assign(shards: Sequence[Path], centroids: np.ndarray,
               batch_rows: int = 65_536) -> tuple[np.ndarray, np.ndarray]:
    """Labels and cosine scores of every embedding row in the shards, computed on Ray Data, in order."""
    ray = _ray()
    actors, _, cpus = _pool_size(ray, 0.0)
    paths, filesystem = for_arrow(list(shards))
    ds = ray.data.read_numpy(paths, filesystem=filesystem)
    ds = _map_actors(ds, _Assigner, fn_constructor_args=(centroids,), batch_size=batch_rows,
                     compute=ray.data.ActorPoolStrategy(size=actors), num_cpus=cpus)
    labels, scores = [], []
    for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
        labels.append(batch["label"])
        scores.append(batch["score"])
    return np.concatenate(labels).astype(np.int32), np.concatenate(scores).astype(np.float32)
