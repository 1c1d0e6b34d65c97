"""A consumer far behind costs the agent no memory: the queue holds its backlog.

The slow consumer waits inside its handler while the fast one receives thousands of events,
so it is spilled in the middle of a delivery. Cache items link to the next item of their
stream, so anything that kept the in-flight item alive would keep every later item alive
too, purged or not. The agent may hold no more cache items than its cache.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from orleanspy import Grain, Silo, SiloOptions, stream_handler
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import MemoryAdapterFactory, SqliteAdapterFactory
from orleanspy.streams.cache import CacheItem
from orleanspy.streams.ids import StreamId

WAIT = 60.0
N = 5000
STREAM = StreamId("mem", "one")
GOT: dict[str, list[int]] = {}
EVENTS: dict[str, asyncio.Event] = {}  # "hold", "fast", "slow": made by each run


class Consumer(Grain):
    async def join(self) -> None:
        stream = self.get_stream_provider("s").get_stream(STREAM.namespace, STREAM.key)
        await stream.subscribe(self.on_event)

    @stream_handler
    async def on_event(self, item: int, token: Any) -> None:
        got = GOT.setdefault(self.key, [])
        if self.key == "slow" and len(got) == 1:
            await EVENTS["hold"].wait()  # far behind from here on, waiting in its handler
        got.append(item)
        if len(got) == N:
            EVENTS[self.key].set()


def live_items() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects()
               if type(o) is CacheItem and o.stream_id == STREAM)


async def run(provider: PersistentStreamProvider) -> None:
    GOT.clear()
    EVENTS.update(hold=asyncio.Event(), fast=asyncio.Event(), slow=asyncio.Event())
    silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0), grains=[Consumer],
                stream_providers={"s": provider})
    await silo.start()
    try:
        await silo.get_grain(Consumer, "slow").join()
        await silo.get_grain(Consumer, "fast").join()
        stream = provider.get_stream(STREAM.namespace, STREAM.key)
        for i in range(N):
            await stream.on_next(i)
            if i % 50 == 0:
                await asyncio.sleep(0)
        async with asyncio.timeout(WAIT):
            await EVENTS["fast"].wait()
        (agent,) = provider.agents.values()
        assert agent.spiller.count >= 1
        assert GOT["slow"] == [0]
        assert live_items() <= len(agent.cache)
        EVENTS["hold"].set()
        async with asyncio.timeout(WAIT):
            await EVENTS["slow"].wait()
        assert GOT["fast"] == list(range(N))
        assert GOT["slow"] == list(range(N))
        assert live_items() <= len(agent.cache)
    finally:
        EVENTS["hold"].set()
        await silo.stop()


def options() -> StreamProviderOptions:
    return StreamProviderOptions(total_queues=1, pull_period=0.01, cache_size=100)


async def test_a_consumer_spilled_mid_delivery_keeps_no_purged_items_alive() -> None:
    await run(PersistentStreamProvider(MemoryAdapterFactory(), options()))


async def test_the_same_on_sqlite(tmp_path: Any) -> None:
    await run(PersistentStreamProvider(SqliteAdapterFactory(str(tmp_path / "s.db")),
                                       options()))
