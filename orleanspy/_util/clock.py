"""Clock: the only source of time in the runtime: reads, sleeps, timers and deadlines.

Every component takes the silo's (or client's) clock, so a test can replace real time with
``orleanspy.testing.FakeClock`` and drive grain timers, reminders, agent pulls, retries,
membership and reconnects by advancing it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["Clock", "SystemClock", "TimerHandle"]


class TimerHandle(Protocol):
    """A scheduled callback; ``cancel()`` is idempotent."""

    def cancel(self) -> None: ...


class Clock:
    """Monotonic and wall time, sleeping, timers and deadlines. Subclass to fake time."""

    __slots__ = ()

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (durations, deadlines)."""
        return time.monotonic()

    def time(self) -> float:
        """Seconds since the epoch (timestamps stored or sent to other processes)."""
        return time.time()

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock's time."""
        await asyncio.sleep(seconds)

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        """Call ``callback(*args)`` on the running loop after ``delay`` seconds."""
        return asyncio.get_running_loop().call_later(delay, callback, *args)

    def timeout(self, seconds: float | None) -> asyncio.Timeout:
        """``async with clock.timeout(s):`` raises TimeoutError when ``s`` seconds pass."""
        return asyncio.timeout(seconds)

    def timeout_at(self, deadline: float | None) -> asyncio.Timeout:
        """Like ``timeout`` with an absolute ``monotonic()`` deadline."""
        if deadline is None:
            return asyncio.timeout(None)
        return asyncio.timeout(max(0.0, deadline - self.monotonic()))

    @property
    def is_real(self) -> bool:
        """True for a clock that follows the event loop's own time."""
        return True


class SystemClock(Clock):
    """The real clock (the event loop's time)."""

    __slots__ = ()

    # The functions themselves, not methods calling them: a bound ``clock.monotonic`` (kept
    # by hot paths) is then a C call, with no Python frame.
    monotonic = staticmethod(time.monotonic)
    time = staticmethod(time.time)
