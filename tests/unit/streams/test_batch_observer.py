"""Batch observers: one grain turn receives a whole delivery (up to ``batch_size`` containers)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from orleanspy import Grain, Silo, SiloOptions
from orleanspy.streams import StreamObserver
from orleanspy.streams.adapters import MemoryAdapterFactory
from orleanspy.streams.options import StreamProviderOptions
from orleanspy.streams.provider import PersistentStreamProvider, implicit_subscription
from orleanspy.streams.tokens import SequenceToken
from orleanspy.testing import EventCollector

WAIT = 10.0
BATCHES: dict[str, list[list[tuple[Any, SequenceToken]]]] = {}
FIRST_SEEN: dict[str, asyncio.Event] = {}
RECORDED = EventCollector()  # who received a batch, in order: wakes the test's waits


class BatchProducer(Grain):
    async def produce(self, namespace: str, key: str, n: int) -> None:
        stream = self.get_stream_provider("b").get_stream(namespace, key)
        for i in range(n):
            await stream.on_next(i)


class ExplicitBatchConsumer(Grain):
    async def subscribe(self) -> None:
        stream = self.get_stream_provider("b").get_stream("ns", self.key)
        await stream.subscribe(StreamObserver(None, on_next_batch=self._batch))

    async def _batch(self, items: list[tuple[Any, SequenceToken]]) -> None:
        await _record(self.key, items)


@implicit_subscription("implicit")
class ImplicitBatchConsumer(Grain):
    async def on_next_batch(self, items: list[tuple[Any, SequenceToken]]) -> None:
        await _record(f"implicit:{self.key}", items)


GATES: dict[str, asyncio.Event] = {}


async def _record(who: str, items: list[tuple[Any, SequenceToken]]) -> None:
    BATCHES.setdefault(who, []).append(list(items))
    RECORDED.record(who)
    FIRST_SEEN.setdefault(who, asyncio.Event()).set()
    gate = GATES.get(who)
    if gate is not None:
        await gate.wait()  # hold the first delivery until everything was published


@pytest.fixture
async def silo() -> AsyncIterator[Silo]:
    global RECORDED
    BATCHES.clear()
    FIRST_SEEN.clear()
    RECORDED = EventCollector()
    GATES.clear()
    provider = PersistentStreamProvider(
        MemoryAdapterFactory(), StreamProviderOptions(pull_period=0.01, batch_size=16),
    )
    s = Silo(SiloOptions(gateway_port=None),
             grains=[BatchProducer, ExplicitBatchConsumer, ImplicitBatchConsumer],
             stream_providers={"b": provider})
    await s.start()
    yield s
    await s.stop()


async def _until(predicate: Any) -> None:
    """Wait until ``predicate()`` holds, checked on every batch a consumer records."""
    await RECORDED.wait_for(lambda _: predicate(), WAIT)


@pytest.mark.parametrize("implicit", [False, True])
async def test_a_batch_observer_gets_whole_deliveries_in_order(silo: Silo, implicit: bool) -> None:
    who = "implicit:k" if implicit else "k"
    namespace = "implicit" if implicit else "ns"
    GATES[who] = gate = asyncio.Event()
    FIRST_SEEN[who] = seen = asyncio.Event()
    if not implicit:
        await silo.get_grain(ExplicitBatchConsumer, "k").subscribe()
    producer = silo.get_grain(BatchProducer, "p")
    await producer.produce(namespace, "k", 1)
    async with asyncio.timeout(WAIT):
        await seen.wait()  # the first delivery is held: the rest piles up in the cache
    await producer.produce(namespace, "k", 100)
    gate.set()
    await _until(lambda: sum(map(len, BATCHES.get(who, []))) >= 101)
    batches = BATCHES[who]
    items = [item for batch in batches for item, _ in batch]
    tokens = [token for batch in batches for _, token in batch]
    assert items == [0, *range(100)] and tokens == sorted(tokens)
    assert max(map(len, batches)) == 16  # batch_size containers in one call
    assert len(batches) < 101 // 2


def test_an_observer_needs_a_handler() -> None:
    with pytest.raises(TypeError, match="on_next_batch"):
        StreamObserver(None)
