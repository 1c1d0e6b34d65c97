"""Pipelined publishing: ``stream.send`` / ``send_batch`` take their place in the stream at
once and return a future of the enqueue; events keep the order of the calls, mixed with
``on_next``, on every adapter (the durable ones take the events at once, the memory adapter
through the stream's own ordered fallback)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from orleanspy import Grain, Silo, SiloOptions
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import (
    MemoryAdapterFactory,
    RedisAdapterFactory,
    SqliteAdapterFactory,
)

WAIT = 15.0
N = 600
GOT: dict[str, list[Any]] = {}
DONE: dict[str, asyncio.Event] = {}


class Sink(Grain):
    async def join(self, n: int) -> None:
        GOT[self.key] = []
        DONE[self.key] = asyncio.Event()
        stream = self.get_stream_provider("s").get_stream("ns", self.key)

        async def on_next(item: Any, token: Any) -> None:
            GOT[self.key].append(item)
            if len(GOT[self.key]) == n:
                DONE[self.key].set()

        await stream.subscribe(on_next)


class Source(Grain):
    async def produce(self, key: str) -> list[int]:
        """0..N-1 with sends, single and batched, and an ``on_next`` in between, at most
        64 futures in flight; returns how many futures were already done when sent."""
        stream = self.get_stream_provider("s").get_stream("ns", key)
        window: list[asyncio.Future[None]] = []
        done_at_once = 0
        i = 0
        while i < N:
            if i % 100 == 50:
                await stream.on_next(i)  # ordered after the sends before it
                i += 1
                continue
            if i % 7 == 0 and i + 3 <= N:
                future = stream.send_batch([i, i + 1, i + 2])
                i += 3
            else:
                future = stream.send(i)
                i += 1
            done_at_once += future.done()
            window.append(future)
            if len(window) >= 64:
                await window.pop(0)
        await asyncio.gather(*window)
        return [done_at_once]

    async def empty_batch(self, key: str) -> str:
        stream = self.get_stream_provider("s").get_stream("ns", key)
        try:
            stream.send_batch([])
        except ValueError as exc:
            return str(exc)
        return "no error"


Factory = Callable[[], Any]


@pytest.fixture(params=["memory", "sqlite", "redis", "nats"])
def factory(request: pytest.FixtureRequest, tmp_path: Path) -> Factory:
    if request.param == "memory":
        return MemoryAdapterFactory
    if request.param == "sqlite":
        return lambda: SqliteAdapterFactory(str(tmp_path / "q.db"))
    if request.param == "nats":
        from orleanspy.streams.adapters.nats import NatsAdapterFactory

        nats_url = request.getfixturevalue("nats_url")
        return lambda: NatsAdapterFactory(nats_url)
    url = request.getfixturevalue("redis_url")
    return lambda: RedisAdapterFactory(url)


@pytest.fixture
async def silo(factory: Factory) -> AsyncIterator[Silo]:
    provider = PersistentStreamProvider(
        factory(), StreamProviderOptions(total_queues=2, pull_period=0.01))
    silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0), grains=[Sink, Source],
                stream_providers={"s": provider})
    await silo.start()
    try:
        yield silo
    finally:
        await silo.stop()


async def test_sends_keep_the_order_of_the_calls_mixed_with_on_next(silo: Silo) -> None:
    await silo.get_grain(Sink, "k").join(N)

    await silo.get_grain(Source, "p").produce("k")

    async with asyncio.timeout(WAIT):
        await DONE["k"].wait()
    assert GOT["k"] == list(range(N))


async def test_send_batch_without_events_is_refused_at_once(silo: Silo) -> None:
    text = await silo.get_grain(Source, "p").empty_batch("k")

    assert "no events" in text
