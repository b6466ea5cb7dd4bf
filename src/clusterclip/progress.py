"""The progress output of the pipeline stages on stderr, all off with ``--quiet``: tqdm bars, step bars for long
calls that report nothing finer (a fit), and one-line notes."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

STEP_FORMAT = "{desc}: {n_fmt}/{total_fmt} steps [{elapsed}{postfix}]"


def progress_bar(desc: str, unit: str, total: int | None = None, enabled: bool = True, initial: int = 0,
                 leave: bool = True, bar_format: str | None = None) -> Any:
    """A tqdm bar on stderr (a no-op bar when not ``enabled``); ``leave=False`` clears it when it closes."""
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit=unit, disable=not enabled, file=sys.stderr,
                dynamic_ncols=True, smoothing=0.1, leave=leave, bar_format=bar_format)


@contextlib.contextmanager
def progress_steps(desc: str, steps: int, enabled: bool = True,
                   interval: float = 1.0) -> Iterator[Callable[[str], None]]:
    """A bar over the ``steps`` named steps of one long computation, e.g. ``fit lsa: 1/2 steps [00:07, SVD]``.

    The block calls the yielded function with each step's name as the step starts; a thread redraws the bar
    every ``interval`` seconds, so the elapsed time runs on while a step that reports nothing itself is busy.
    """
    bar = progress_bar(desc, "step", steps, enabled, bar_format=STEP_FORMAT)
    started = threading.Event()
    stop = threading.Event()

    def step(name: str) -> None:
        bar.set_postfix_str(name, refresh=False)
        if started.is_set():
            bar.update(1)
        bar.refresh()
        started.set()

    def redraw() -> None:
        while not stop.wait(interval):
            bar.refresh()

    thread = threading.Thread(target=redraw, name="progress-steps", daemon=True) if enabled else None
    if thread is not None:
        thread.start()
    try:
        yield step
        bar.set_postfix_str("done", refresh=False)
        bar.update(1 if started.is_set() else 0)
    finally:
        stop.set()
        if thread is not None:
            thread.join()
        bar.close()


def progress_note(message: str, enabled: bool = True) -> None:
    """``clusterclip: message`` on a line of its own on stderr (above any open bar), when ``enabled``."""
    if enabled:
        from tqdm.auto import tqdm

        tqdm.write(f"clusterclip: {message}", file=sys.stderr)
