"""A graceful hand-off keeps the progress of a delivery that failed part-way.

Two implicit consumers of one stream; the agent hands consumer ``b`` a delivery of several
containers, ``b`` handles the first ones and keeps failing on the last. A graceful stop
abandons that delivery; the containers ``b`` handled (and ``a`` handled too) are
acknowledged, so the queue's next owner delivers only the one ``b`` never took: nothing
either consumer handled comes twice but that one, which ``b`` still needs. Memory and
SQLite queues, on a ``FakeClock`` (back-offs pass in fake time).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orleanspy import Grain, Silo, SiloOptions
from orleanspy.diagnostics import DeliveryFailed
from orleanspy.streams.adapters import MemoryAdapterFactory, SqliteAdapterFactory
from orleanspy.streams.adapters.base import QueueAdapterFactory
from orleanspy.streams.options import StreamProviderOptions
from orleanspy.streams.provider import PersistentStreamProvider, implicit_subscription
from orleanspy.testing import EventRecorder, FakeClock

WAIT = 30.0  # real seconds: only a bound for a broken test

GOT: dict[str, list[Any]] = defaultdict(list)
GATES: list[asyncio.Event] = []  # consumer b waits at GATES[0] (one per test)
REFUSE: set[Any] = set()  # consumer b fails on these


async def _take(who: str, item: Any) -> None:
    if who == "b":
        if not GATES[0].is_set():
            await GATES[0].wait()
        if item in REFUSE:
            raise RuntimeError(f"b refuses {item}")
    GOT[who].append(item)


@implicit_subscription("hp")
class HandoffA(Grain):
    async def on_next(self, item: Any, token: Any) -> None:
        await _take("a", item)


@implicit_subscription("hp")
class HandoffB(Grain):
    async def on_next(self, item: Any, token: Any) -> None:
        await _take("b", item)


class HandoffProducer(Grain):
    async def produce(self, items: list[Any]) -> None:
        stream = self.get_stream_provider("s").get_stream("hp", "k")
        for item in items:
            await stream.on_next(item)


async def until(clock: FakeClock, done: Callable[[], bool], within: float = 60.0) -> None:
    """Move fake time in small steps until ``done()``; fail past ``within`` fake seconds."""
    start = clock.monotonic()
    async with asyncio.timeout(WAIT):
        while not done():
            assert clock.monotonic() - start <= within, f"not done within {within:g} fake s"
            await clock.run_for(0.01)


def make_silo(factory: QueueAdapterFactory, clock: FakeClock) -> Silo:
    options = StreamProviderOptions(total_queues=1, pull_period=0.01, delivery_backoff=0.5,
                                    max_delivery_backoff=1.0, max_delivery_time=600.0)
    return Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0),
                grains=[HandoffA, HandoffB, HandoffProducer],
                stream_providers={"s": PersistentStreamProvider(factory, options)}, clock=clock)


@pytest.mark.parametrize("adapter", ["memory", "sqlite"])
async def test_a_graceful_stop_acknowledges_what_a_failing_delivery_handled(
    adapter: str, tmp_path: Path
) -> None:
    GOT.clear()
    GATES[:] = [asyncio.Event()]
    REFUSE.clear()
    REFUSE.add(3)
    clock = FakeClock()
    factory: QueueAdapterFactory = (
        MemoryAdapterFactory() if adapter == "memory"
        else SqliteAdapterFactory(str(tmp_path / "queues.db")))
    silo = make_silo(factory, clock)
    await silo.start()
    try:
        (agent,) = silo.stream_providers["s"].agents.values()
        with EventRecorder(silo.diagnostics) as rec:
            await silo.get_grain(HandoffProducer, "p").produce([0, 1, 2, 3])
            # b holds its first delivery (event 0) until every event is cached, so its
            # next delivery carries 1, 2 and 3 in one call: it handles 1 and 2, fails on 3.
            await until(clock, lambda: agent.read == 4 and GOT["a"] == [0, 1, 2, 3])
            GATES[0].set()
            await until(clock, lambda: GOT["b"] == [0, 1, 2] and bool(rec.of(DeliveryFailed)))
            await clock.run_for(2.0)  # a few retries of 3, in fake time
    finally:
        await silo.stop()  # graceful: the failing delivery is abandoned
    assert GOT["b"] == [0, 1, 2] and GOT["a"] == [0, 1, 2, 3]

    REFUSE.clear()
    silo = make_silo(factory if adapter == "memory"
                     else SqliteAdapterFactory(str(tmp_path / "queues.db")), clock)
    await silo.start()
    try:
        await silo.get_grain(HandoffProducer, "p").produce(["end"])
        await until(clock, lambda: "end" in GOT["a"] and "end" in GOT["b"])
    finally:
        await silo.stop()
    # The next owner delivers 3 (b never took it) and what follows; 0..2 not again.
    assert GOT["b"] == [0, 1, 2, 3, "end"]
    assert GOT["a"] == [0, 1, 2, 3, 3, "end"]
