"""PeriodicSteps: the membership service's loops (I-am-alive, table refresh, probes, cleanup).

Each loop runs its step once per period of the injected clock, measured from the start of
the previous step, so a slow step does not drift the schedule. A step that raises is
counted and logged and the loop goes on at the next period (a loop boundary); a loop ends
when the owner is stopping.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, final

from orleanspy._util.clock import Clock
from orleanspy._util.tasks import TaskSet

__all__ = ["PeriodicSteps"]


@final
class PeriodicSteps:
    """Owned periodic loops.

    Args:
        clock: the clock the periods are measured on.
        log: the owner's logger (``membership_step_failed``).
        stopping: True once the owner is stopping (every loop then ends).
        prefix: task names are ``{prefix}-{name}``.
    """

    __slots__ = ("_clock", "_log", "_prefix", "_stopping", "step_failures", "tasks")

    def __init__(self, clock: Clock, log: Any, stopping: Callable[[], bool], prefix: str) -> None:
        self._clock = clock
        self._log = log
        self._stopping = stopping
        self._prefix = prefix
        self.tasks = TaskSet()
        self.step_failures = 0

    def start(self, name: str, period: float, step: Callable[[], Awaitable[Any]]) -> None:
        """Run ``await step()`` every ``period`` seconds, the first after one period."""
        if self._stopping():
            return
        self.tasks.spawn(self._run(name, period, step), name=f"{self._prefix}-{name}")

    def cancel(self) -> None:
        """Cancel every loop except the calling task (a step may stop its own service)."""
        current = asyncio.current_task()
        for task in self.tasks:
            if task is not current:
                task.cancel()

    async def _run(self, name: str, period: float, step: Callable[[], Awaitable[Any]]) -> None:
        clock = self._clock
        delay = period
        while True:
            await clock.sleep(delay)
            if self._stopping():
                return
            started = clock.monotonic()
            try:
                await step()
            except Exception as exc:  # loop boundary: log, go on at the next period
                self.step_failures += 1
                self._log.warning("membership_step_failed", step=name, error=repr(exc))
            if self._stopping():
                return
            delay = max(0.0, period - (clock.monotonic() - started))
