"""EventCollector: record events from grains and await a condition instead of sleeping."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

__all__ = ["EventCollector"]


class EventCollector:
    """A list of events plus ``wait_for(predicate)`` that wakes on every ``record``."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self._changed = asyncio.Condition()

    def record(self, event: Any) -> None:
        self.events.append(event)
        loop_running = True
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            loop_running = False
        if loop_running:
            asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def wait_for(
        self, predicate: Callable[[list[Any]], bool], timeout: float = 10.0
    ) -> list[Any]:
        """Wait until ``predicate(events)`` holds; raise TimeoutError after ``timeout`` s."""
        async with asyncio.timeout(timeout):
            async with self._changed:
                await self._changed.wait_for(lambda: predicate(self.events))
        return self.events

    async def wait_count(self, n: int, timeout: float = 10.0) -> list[Any]:
        return await self.wait_for(lambda ev: len(ev) >= n, timeout)
