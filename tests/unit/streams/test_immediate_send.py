"""Publishing without a coroutine: the memory adapter's ``immediate_sender`` enqueues at once
while its queue has room and otherwise does nothing, so that ``on_next`` falls back to the
awaited enqueue (waiting for room, ``QueueFullError``, the closed-adapter error) unchanged."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orleanspy import Grain, Silo, SiloOptions
from orleanspy.diagnostics import EventsAcknowledged
from orleanspy.errors import SerializationError
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import MemoryAdapterFactory
from orleanspy.streams.adapters.base import QueueFullError
from orleanspy.streams.ids import QueueId, StreamId
from orleanspy.streams.tokens import SequenceToken
from orleanspy.testing import EventRecorder

WAIT = 10.0
Q0 = QueueId("p", 0)
Q = QueueId("s", 0)  # the silo's one queue
GOT: list[Any] = []
ENTERED: asyncio.Event
GATE: asyncio.Event


async def test_immediate_sender_enqueues_while_there_is_room_and_never_waits() -> None:
    adapter = MemoryAdapterFactory(capacity_per_queue=2).create_adapter("p")
    await adapter.open()
    stream = StreamId("s", 1)
    now = adapter.immediate_sender(Q0, stream)
    assert now(["a"]) is True
    assert now(["b", "c"]) is True
    assert now(["d"]) is False  # full: nothing done, the caller awaits the sender instead
    assert adapter.queue_length(Q0) == 2
    receiver = adapter.create_receiver(Q0)
    await receiver.initialize()
    first, second = await receiver.get_messages(10)
    assert (first.events, second.events) == (("a",), ("b", "c"))
    assert first.stream_id == stream and first.token < second.token
    await receiver.messages_delivered([first])
    assert now(["d"]) is True  # room again
    assert [c.events for c in await receiver.get_messages(10)] == [("d",)]


async def test_immediate_sender_leaves_bad_input_and_a_closed_adapter_to_the_sender() -> None:
    adapter = MemoryAdapterFactory().create_adapter("p")
    await adapter.open()
    stream = StreamId("s", 1)
    now, send = adapter.immediate_sender(Q0, stream), adapter.sender(Q0, stream)
    assert now([]) is False
    with pytest.raises(ValueError, match="empty batch"):
        await send([])
    with pytest.raises(SerializationError):
        now([object()])  # not msgpack: refused, nothing enqueued
    assert adapter.queue_length(Q0) == 0
    await adapter.close()
    assert now(["a"]) is False
    with pytest.raises(RuntimeError, match=r"after close\(\)"):
        await send(["a"])
    assert adapter.queue_length(Q0) == 0


class Blocker(Grain):
    """Takes the first event and holds it (its container stays unacknowledged) until GATE."""

    async def join(self) -> None:
        stream = self.get_stream_provider("s").get_stream("ns", "k")

        async def on_next(item: Any, token: SequenceToken) -> None:
            GOT.append(item)
            ENTERED.set()
            await GATE.wait()

        await stream.subscribe(on_next)


class Source(Grain):
    async def send(self, item: Any) -> None:
        await self.get_stream_provider("s").get_stream("ns", "k").on_next(item)


async def _silo(enqueue_timeout: float | None) -> Silo:
    provider = PersistentStreamProvider(
        MemoryAdapterFactory(capacity_per_queue=1, enqueue_timeout=enqueue_timeout),
        StreamProviderOptions(total_queues=1, pull_period=0.01),
    )
    silo = Silo(SiloOptions(gateway_port=None), grains=[Blocker, Source],
                stream_providers={"s": provider})
    await silo.start()
    return silo


@pytest.mark.parametrize("enqueue_timeout", [None, 0.0])
async def test_on_next_on_a_full_queue_waits_for_room_or_says_the_queue_is_full(
    enqueue_timeout: float | None,
) -> None:
    global ENTERED, GATE
    GOT.clear()
    ENTERED, GATE = asyncio.Event(), asyncio.Event()
    silo = await _silo(enqueue_timeout)
    try:
        await silo.get_grain(Blocker, "b").join()
        source = silo.get_grain(Source, "p")
        await source.send(1)
        async with asyncio.timeout(WAIT):
            await ENTERED.wait()  # event 1 is in its handler: its container fills the queue
        if enqueue_timeout == 0.0:
            with pytest.raises(QueueFullError, match="stayed full"):
                await source.send(2)
            adapter = silo.stream_providers["s"].adapter
            with EventRecorder(silo.diagnostics) as rec:
                GATE.set()
                await rec.wait_state(EventsAcknowledged, lambda: adapter.queue_length(Q) == 0,
                                     WAIT)
            await source.send(3)  # room again once event 1 is acknowledged
            expected = [1, 3]
        else:
            waiting = asyncio.ensure_future(source.send(2))
            await asyncio.sleep(0.05)
            assert not waiting.done()  # waits for room, not enqueued past the capacity
            GATE.set()
            async with asyncio.timeout(WAIT):
                await waiting
            expected = [1, 2]
        async with asyncio.timeout(WAIT):
            while expected != GOT:
                ENTERED.clear()
                await ENTERED.wait()
        assert expected == GOT
    finally:
        GATE.set()
        await silo.stop()
