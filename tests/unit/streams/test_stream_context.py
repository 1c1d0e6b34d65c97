"""A stream event carries its publisher's request context to each consumer: an ``on_next``
handler runs under it, a batch handler under the first event's, a filter sees the event
itself, and an event published without a context is handled without one. Memory and SQLite
queues."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from orleanspy import Grain, RequestContext, Silo, SiloOptions
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import MemoryAdapterFactory, SqliteAdapterFactory
from orleanspy.streams.stream import StreamObserver

WAIT = 10.0
SEEN: dict[str, list[Any]] = defaultdict(list)
ARRIVED: list[asyncio.Event] = []  # one per test (an event belongs to one loop)


class Consumer(Grain):
    def _stream(self) -> Any:
        return self.get_stream_provider("s").get_stream("rc", "k")

    async def follow(self) -> None:
        await self._stream().subscribe(self._one)

    async def follow_batches(self) -> None:
        await self._stream().subscribe(StreamObserver(None, on_next_batch=self._batch))

    async def follow_filtered(self) -> None:
        await self._stream().subscribe(self._filtered, filter="event >= 2")

    async def _one(self, item: Any, token: Any) -> None:
        SEEN["one"].append([item, RequestContext.get("tenant")])
        ARRIVED[0].set()

    async def _batch(self, events: list[Any]) -> None:
        SEEN["batch"].append([[item for item, _ in events], RequestContext.get("tenant")])
        ARRIVED[0].set()

    async def _filtered(self, item: Any, token: Any) -> None:
        SEEN["filtered"].append([item, RequestContext.get("tenant")])
        ARRIVED[0].set()


class Publisher(Grain):
    async def publish(self, items: list[int], batch: bool = False) -> None:
        stream = self.get_stream_provider("s").get_stream("rc", "k")
        if batch:
            await stream.on_next_batch(items)
        else:
            for item in items:
                await stream.on_next(item)


async def _until(done: Any) -> None:
    async with asyncio.timeout(WAIT):
        while not done():
            ARRIVED[0].clear()
            await ARRIVED[0].wait()


@pytest.mark.parametrize("adapter", ["memory", "sqlite"])
async def test_a_consumer_handles_each_event_under_its_publishers_context(
    adapter: str, tmp_path: Path,
) -> None:
    SEEN.clear()
    ARRIVED[:] = [asyncio.Event()]
    factory = (MemoryAdapterFactory() if adapter == "memory"
               else SqliteAdapterFactory(str(tmp_path / "queues.db")))
    silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0),
                grains=[Consumer, Publisher],
                stream_providers={"s": PersistentStreamProvider(factory, StreamProviderOptions(
                    total_queues=1, pull_period=0.01))})
    await silo.start()
    try:
        consumer = silo.get_grain(Consumer, "c")
        with RequestContext.set(tenant="subscriber"):  # not the events' context
            await consumer.follow()
        await silo.get_grain(Consumer, "b").follow_batches()
        await silo.get_grain(Consumer, "f").follow_filtered()
        publisher = silo.get_grain(Publisher, "p")
        with RequestContext.set(tenant="acme"):
            await publisher.publish([1, 2])
        await publisher.publish([3])
        with RequestContext.set(tenant="initech"):
            await publisher.publish([4, 5], batch=True)
        await _until(lambda: len(SEEN["one"]) == 5 and len(SEEN["filtered"]) == 4
                     and sum(len(items) for items, _ in SEEN["batch"]) == 5)
        assert SEEN["one"] == [[1, "acme"], [2, "acme"], [3, None], [4, "initech"],
                               [5, "initech"]]
        assert SEEN["filtered"] == [[2, "acme"], [3, None], [4, "initech"], [5, "initech"]]
        batches = SEEN["batch"]
        assert [i for items, _ in batches for i in items] == [1, 2, 3, 4, 5]
        published = {1: "acme", 2: "acme", 3: None, 4: "initech", 5: "initech"}
        for items, tenant in batches:  # under the first context among the batch's events
            assert tenant == next((published[i] for i in items if published[i]), None)
    finally:
        await silo.stop()
