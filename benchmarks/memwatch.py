"""Peak anonymous memory of this process, sampled by a background thread (for memory tests and benchmarks).

``RssAnon`` counts what the process allocated; memory-mapped files (embedding shards, a plan written to
disk) are page cache the kernel can drop, so they are left out, unlike ``ru_maxrss``. Linux only.
"""

from __future__ import annotations

import threading
import time


def rss_anon_kib() -> int:
    """Current ``RssAnon`` of this process in KiB (0 where ``/proc`` does not report it)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    return 0


class AnonPeak:
    """Samples ``RssAnon`` every ``interval`` seconds from creation on; ``peak_kib`` is the largest seen."""

    def __init__(self, interval: float = 0.01) -> None:
        self.interval = interval
        self.peak_kib = rss_anon_kib()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        while True:
            self.peak_kib = max(self.peak_kib, rss_anon_kib())
            time.sleep(self.interval)

    def read(self) -> int:
        """The peak so far, including the current value (KiB)."""
        self.peak_kib = max(self.peak_kib, rss_anon_kib())
        return self.peak_kib
