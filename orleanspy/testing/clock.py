"""FakeClock: time that moves only when a test says so.

Sleeps, timers and deadlines taken from a ``FakeClock`` wait for ``advance()``; nothing else
moves its time. ``advance`` runs every timer that falls due, in deadline order, and
``await clock.run_for(seconds)`` also lets the event loop run the work each timer starts
before moving on, so a test can step a grain timer, a reminder, an agent's pull period or a
retry back-off one period at a time without waiting in real time.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Any

from orleanspy._util.clock import Clock, TimerHandle

__all__ = ["FakeClock"]


class _FakeTimer:
    __slots__ = ("args", "callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.when = when
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock(Clock):
    """A clock for tests: ``advance(seconds)`` moves monotonic and wall time together."""

    __slots__ = ("_counter", "_mono", "_timers", "_wall")

    def __init__(self, start: float | None = None) -> None:
        self._mono = 1000.0
        self._wall = time.time() if start is None else start
        self._timers: list[tuple[float, int, _FakeTimer]] = []
        self._counter = itertools.count()

    def monotonic(self) -> float:
        return self._mono

    def time(self) -> float:
        return self._wall

    @property
    def is_real(self) -> bool:
        return False

    # -- scheduling -----------------------------------------------------------------------
    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        timer = _FakeTimer(self._mono + max(0.0, delay), callback, args)
        heapq.heappush(self._timers, (timer.when, next(self._counter), timer))
        return timer

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        handle = self.call_later(seconds, _wake, fut)
        try:
            await fut
        finally:
            handle.cancel()

    def timeout(self, seconds: float | None) -> asyncio.Timeout:
        cm = asyncio.timeout(None)
        if seconds is not None:
            self.call_later(seconds, _expire, cm)
        return cm

    def timeout_at(self, deadline: float | None) -> asyncio.Timeout:
        return self.timeout(None if deadline is None else deadline - self._mono)

    @property
    def pending_timers(self) -> int:
        """Timers scheduled and not cancelled (sleeps, call_later, deadlines)."""
        return sum(1 for _, _, t in self._timers if not t.cancelled)

    def next_deadline(self) -> float | None:
        """The monotonic time of the earliest pending timer, or None."""
        self._drop_cancelled()
        return self._timers[0][0] if self._timers else None

    # -- moving time ------------------------------------------------------------------------
    def advance(self, seconds: float) -> None:
        """Move time forward and run, in order, every timer that falls due."""
        if seconds < 0:
            raise ValueError("time does not go backwards")
        target = self._mono + seconds
        while True:
            self._drop_cancelled()
            if not self._timers or self._timers[0][0] > target:
                break
            when, _, timer = heapq.heappop(self._timers)
            self._wall += when - self._mono
            self._mono = when
            timer.callback(*timer.args)
        self._wall += target - self._mono
        self._mono = target

    async def run_for(self, seconds: float, *, step: float | None = None) -> None:
        """Advance ``seconds`` timer by timer (or in ``step``s), letting the loop run the work
        each due timer starts before time moves on."""
        target = self._mono + seconds
        await _settle()
        while True:
            nxt = self.next_deadline()
            if step is not None:
                nxt = min(nxt if nxt is not None else target, self._mono + step)
            if nxt is None or nxt > target:
                break
            self.advance(max(0.0, nxt - self._mono))
            await _settle()
        self.advance(max(0.0, target - self._mono))
        await _settle()

    def _drop_cancelled(self) -> None:
        timers = self._timers
        while timers and timers[0][2].cancelled:
            heapq.heappop(timers)


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _expire(cm: asyncio.Timeout) -> None:
    if cm.expired():
        return
    with contextlib.suppress(AssertionError, RuntimeError):  # not entered yet, or left
        cm.reschedule(asyncio.get_running_loop().time())


async def _settle(rounds: int = 20) -> None:
    """Let ready callbacks and the tasks they wake run (a bounded number of loop passes)."""
    for _ in range(rounds):
        await asyncio.sleep(0)
