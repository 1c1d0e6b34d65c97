"""Clock: the only source of time in the runtime, injectable for tests."""

from __future__ import annotations

import time

__all__ = ["Clock", "SystemClock"]


class Clock:
    """Monotonic and wall-clock time. Subclass to fake time in tests."""

    __slots__ = ()

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()


class SystemClock(Clock):
    """The real clock."""

    __slots__ = ()
