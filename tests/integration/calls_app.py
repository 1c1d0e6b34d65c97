"""Grains of the call-model integration tests (cancellation, streamed responses, observers;
``--app tests.integration.calls_app``): placed by hash, so the test picks keys whose
activations live on the silo it wants. Each ``Holder`` counts the turns it started and when
(wall clock) a turn was cancelled; ``Numbers`` streams numbers back; ``Room`` calls its
members' observers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from orleanspy import Grain, ObserverManager, always_interleave, cancellable, placement

__all__ = ["Holder", "Numbers", "Room"]


@placement("hash_based")
class Holder(Grain):
    async def on_activate(self) -> None:
        self.started: dict[str, int] = {}
        self.cancelled_at: dict[str, float] = {}
        self.finished: dict[str, int] = {}

    def _start(self, name: str) -> None:
        self.started[name] = self.started.get(name, 0) + 1

    @always_interleave
    async def where(self) -> str:
        return self.silo.name

    @cancellable
    async def hold(self) -> None:
        """Waits until its caller gives up."""
        self._start("hold")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled_at["hold"] = time.time()
            raise

    @cancellable
    async def relay_hold(self, key: str) -> None:
        """Holds ``Holder(key)`` (on whichever silo it lives) until its caller gives up."""
        self._start("relay_hold")
        try:
            await self.get_grain(Holder, key).with_timeout(60).hold()
        except asyncio.CancelledError:
            self.cancelled_at["relay_hold"] = time.time()
            raise

    async def stubborn(self, seconds: float) -> None:
        """Not cancellable: runs its ``seconds`` whoever waits."""
        self._start("stubborn")
        await asyncio.sleep(seconds)
        self.finished["stubborn"] = self.finished.get("stubborn", 0) + 1

    async def queued(self) -> None:
        self._start("queued")

    @always_interleave
    async def stats(self) -> dict[str, Any]:
        mailbox = self._orleanspy_activation.statistics()
        return {"started": self.started, "cancelled_at": self.cancelled_at,
                "finished": self.finished, "queued": mailbox.queued,
                "dropped_unstarted": mailbox.expired}


def _rss() -> int:
    """This process's resident set, in bytes."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * 4096


@placement("hash_based")
class Numbers(Grain):
    """Streams numbers back (an async generator method) and says what it cost."""

    async def on_activate(self) -> None:
        self.closed = 0
        self.rss_before = 0

    @always_interleave
    async def where(self) -> str:
        return self.silo.name

    async def count(self, n: int) -> AsyncIterator[int]:
        self.rss_before = _rss()
        try:
            for i in range(n):
                yield i
        finally:
            self.closed += 1

    @always_interleave
    async def memory(self) -> dict[str, int]:
        """RSS now and when the last count began, in bytes."""
        return {"before": self.rss_before, "now": _rss()}

    async def closed_count(self) -> int:
        """Not interleaving: it waits while a count is being streamed."""
        return self.closed


@placement("hash_based")
class Room(Grain):
    """Says each message to its members (client observers with a ``receive`` method)."""

    async def on_activate(self) -> None:
        self.members = ObserverManager(expiry=600.0, clock=self.silo.clock.monotonic)

    async def where(self) -> str:
        return self.silo.name

    async def join(self, member: Any) -> int:
        self.members.subscribe(member)
        return len(self.members)

    async def say(self, text: str) -> int:
        return await self.members.notify("receive", text)
