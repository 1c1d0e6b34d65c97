"""FakeClock: time that moves only when a test says so (idle collection, reminders)."""

from __future__ import annotations

import time

from orleanspy._util.clock import Clock

__all__ = ["FakeClock"]


class FakeClock(Clock):
    """A clock for tests: ``advance(seconds)`` moves both monotonic and wall time."""

    __slots__ = ("_mono", "_wall")

    def __init__(self, start: float | None = None) -> None:
        self._mono = 1000.0
        self._wall = time.time() if start is None else start

    def monotonic(self) -> float:
        return self._mono

    def time(self) -> float:
        return self._wall

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time does not go backwards")
        self._mono += seconds
        self._wall += seconds
