"""Grains of the clustered stream tests (``--app tests.integration.cluster_stream_app``).

``NumberSink`` subscribes implicitly to namespace ``numbers``; each delivery appends
``KEY NUMBER PID`` to ``received.txt`` in the (shared) data dir with one ``write``, so what was
delivered survives a kill -9 of the silo that delivered it. ``PacedTicker`` does the same for
the ticks of its durable reminder (``ticks.txt``).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from orleanspy import Grain, TickStatus
from orleanspy.streams.provider import implicit_subscription
from orleanspy.streams.tokens import SequenceToken

__all__ = ["ExplicitSink", "FeedProducer", "NumberSink", "PacedTicker"]


def _append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)


@implicit_subscription("numbers")
class NumberSink(Grain):
    async def on_next(self, item: Any, token: SequenceToken) -> None:
        path = os.path.join(self.silo.options.data_dir, "received.txt")
        await asyncio.to_thread(_append, path, f"{self.key} {item} {os.getpid()}\n")


class ExplicitSink(Grain):
    """Subscribes explicitly (``subscribe``) to stream ``explicit/KEY``; appends what it
    receives to ``explicit.txt`` in the shared data dir."""

    async def on_activate(self) -> None:
        stream = self.get_stream_provider("s").get_stream("explicit", self.key)
        for handle in await stream.get_subscriptions():  # after a reactivation elsewhere
            await handle.resume(self._on_next)

    async def subscribe(self) -> str:
        stream = self.get_stream_provider("s").get_stream("explicit", self.key)
        if not await stream.get_subscriptions():
            await stream.subscribe(self._on_next)
        return str(self.silo.address)

    async def _on_next(self, item: Any, token: SequenceToken) -> None:
        path = os.path.join(self.silo.options.data_dir, "explicit.txt")
        await asyncio.to_thread(_append, path, f"{self.key} {item} {os.getpid()}\n")


class FeedProducer(Grain):
    """Publishes numbers on stream ``feed/KEY`` (the client subscription tests)."""

    async def produce(self, start: int, count: int) -> int:
        stream = self.get_stream_provider("s").get_stream("feed", self.key)
        for n in range(start, start + count):
            await stream.on_next(n)
        return os.getpid()


class PacedTicker(Grain):
    """A durable reminder every ``period`` s; each tick appends ``KEY INDEX TIME PID`` to
    ``ticks.txt`` in the shared data dir: INDEX is the tick's number since the first, TIME
    the moment it was due (epoch seconds)."""

    async def start(self, period: float) -> int:
        await self.register_reminder("tick", period, period)
        return os.getpid()

    async def receive_reminder(self, name: str, status: TickStatus) -> None:
        index = round((status.current_tick - status.first_tick) / status.period)
        path = os.path.join(self.silo.options.data_dir, "ticks.txt")
        line = f"{self.key} {index} {status.current_tick} {os.getpid()}\n"
        await asyncio.to_thread(_append, path, line)
