"""The one progress-bar factory of the pipeline stages (tqdm on stderr, off with ``--quiet``)."""

from __future__ import annotations

import sys
from typing import Any


def progress_bar(desc: str, unit: str, total: int | None = None, enabled: bool = True, initial: int = 0,
                 leave: bool = True) -> Any:
    """A tqdm bar on stderr (a no-op bar when not ``enabled``); ``leave=False`` clears it when it closes."""
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit=unit, disable=not enabled, file=sys.stderr,
                dynamic_ncols=True, smoothing=0.1, leave=leave)
