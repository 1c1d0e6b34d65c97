"""A stream provider's service-level figures: publish-acknowledgement latency for every
publish path, end-to-end delivery latency from the queue's write time, and the age of a
subscription's backlog while its consumer is slow."""

from __future__ import annotations

import asyncio
from typing import Any

from orleanspy import Grain, Silo, SiloOptions
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import MemoryAdapterFactory, SqliteAdapterFactory

WAIT = 10.0
EVENTS = 40
STATE: dict[str, Any] = {}


class Reader(Grain):
    async def join(self) -> None:
        async def on_next(item: Any, token: Any) -> None:
            gate: asyncio.Event | None = STATE.get("gate")
            if gate is not None:
                STATE["entered"].set()
                await gate.wait()
            STATE["got"].append(item)
            if len(STATE["got"]) == STATE["want"]:
                STATE["done"].set()

        await self.get_stream_provider("s").get_stream("ns", "k").subscribe(on_next)


async def _run(factory: Any, slow: bool) -> tuple[PersistentStreamProvider, dict[str, float]]:
    STATE.update(got=[], want=EVENTS, done=asyncio.Event(), entered=asyncio.Event(),
                 gate=asyncio.Event() if slow else None)
    provider = PersistentStreamProvider(factory, StreamProviderOptions(
        total_queues=1, pull_period=0.01))
    silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0), grains=[Reader],
                stream_providers={"s": provider})
    await silo.start()
    ages: dict[str, float] = {}
    try:
        await silo.get_grain(Reader, "r").join()
        stream = provider.get_stream("ns", "k")
        for i in range(10):
            await stream.on_next(i)
        await stream.on_next_batch(range(10, 20))
        await asyncio.gather(*(stream.send(i) for i in range(20, 30)))
        await stream.send_batch(range(30, EVENTS))
        if slow:
            (agent,) = provider.agents.values()
            async with asyncio.timeout(WAIT):  # the first delivery waits at the gate
                await STATE["entered"].wait()
            await asyncio.sleep(0.2)  # the backlog ages meanwhile
            ages = {f.stream: f.age for f in agent.snapshot().subs if f.age is not None}
            STATE["gate"].set()
        async with asyncio.timeout(WAIT):
            await STATE["done"].wait()
    finally:
        await silo.stop()
    return provider, ages


async def test_publish_and_delivery_latency_are_measured() -> None:
    provider, _ = await _run(MemoryAdapterFactory(), slow=False)
    assert STATE["got"] == list(range(EVENTS))
    # One observation per publish call: 10 on_next + 1 batch + 10 send + 1 send_batch.
    assert provider.publish_latency.count == 22
    assert provider.publish_latency.offered == 22
    delivery = provider.delivery_latency
    assert delivery.count >= 1
    p99 = delivery.quantile(0.99)
    assert p99 is not None and p99 < WAIT


async def test_a_slow_consumer_shows_its_backlog_age_and_latency(tmp_path: Any) -> None:
    provider, ages = await _run(SqliteAdapterFactory(str(tmp_path / "q.db")), slow=True)
    assert STATE["got"] == list(range(EVENTS))
    (age,) = ages.values()
    assert age >= 0.2  # the gate held the oldest event at least that long
    p99 = provider.delivery_latency.quantile(0.99)
    assert p99 is not None and p99 >= 0.1
