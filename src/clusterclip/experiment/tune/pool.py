"""Proxy runs ``jobs`` at a time, each in its own worker process (``clusterclip tune --jobs``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any

from clusterclip.experiment.tune.proxies import Pair
from clusterclip.experiment.tune.search import Search


def prefetch(s: Search, wanted: Sequence[tuple[str, Pair]], counted: bool = True) -> None:
    """Train the runs of ``wanted`` that are not finished yet, ``jobs`` at a time in worker processes.

    Runs start in the order given and stop starting where :meth:`Search.get` would stop (the budget), so
    the sequential pass of :meth:`Search.get` that follows finds exactly the runs it would have trained.
    The pool starts on its first submission; :meth:`Search.close` stops it.
    """
    if s.tune.jobs <= 1:
        return
    todo = [(n, p) for n, p in dict.fromkeys(wanted) if (n, p) not in s.cache]
    portable = getattr(s.runner, "portable", None)
    jobs: dict[int, Callable[..., dict[str, Any]]] = {}
    running: dict[Future[dict[str, Any]], tuple[str, Pair]] = {}
    while todo or running:
        while todo and len(running) < s.tune.jobs:
            name, pair = todo.pop(0)
            if s.reuse(name, pair, counted) or s.share(name, pair):
                continue
            key = s.plan_key(name, pair)
            if key is not None and any(p == pair and s.plan_key(n, p) == key for n, p in running.values()):
                continue  # the same plan is in flight: the sequential pass shares its run
            why = s.over_budget(counted, pending=len(running))
            if why:
                s.stop(why)
                todo = []
                break
            if pair[0] not in jobs:
                jobs[pair[0]] = portable(pair[0]) if portable else s.runner
            running[s.submit(jobs[pair[0]], name, pair)] = (name, pair)
        if running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in done:
                name, pair = running.pop(fut)
                s.finished(name, pair, fut.result, counted)
