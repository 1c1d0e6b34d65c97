"""This process's resource figures, for status answers and the dashboard."""

from __future__ import annotations

import os
import resource

__all__ = ["process_usage"]


def process_usage() -> dict[str, float]:
    """CPU seconds (user + system) and resident memory in bytes (Linux ``/proc``; 0 where
    it is not readable)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    try:
        with open("/proc/self/statm", "rb") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        rss = 0
    return {"cpu_seconds": usage.ru_utime + usage.ru_stime, "rss_bytes": rss}
