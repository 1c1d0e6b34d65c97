"""A silo's pulling agent on the JetStream adapter after its queue was claimed by a next
owner (as when its lease expired while the silo was paused): its acknowledgements are
refused and change nothing, so the next owner gets every event the stale one delivered but
had not acknowledged."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from orleanspy import Grain, Silo, SiloOptions
from orleanspy.diagnostics import EventsAcknowledged
from orleanspy.errors import LeaseLostError
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters.base import BatchContainer
from orleanspy.streams.adapters.nats import NatsAdapterFactory
from orleanspy.streams.ids import StreamId
from orleanspy.testing import EventRecorder

WAIT = 10.0
GOT: list[Any] = []
ALL: list[asyncio.Event] = []  # set once GOT holds the ten events


class Reader(Grain):
    async def join(self) -> None:
        async def on_next(item: Any, token: Any) -> None:
            GOT.append(item)
            if len(GOT) == 10:
                ALL[0].set()

        await self.get_stream_provider("s").get_stream("ns", "k").subscribe(on_next)


async def test_a_stale_agent_cannot_acknowledge_once_the_queue_is_claimed(nats_url: str) -> None:
    GOT.clear()
    ALL[:] = [asyncio.Event()]
    provider = PersistentStreamProvider(
        NatsAdapterFactory(nats_url), StreamProviderOptions(total_queues=1, pull_period=0.01))
    silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0), grains=[Reader],
                stream_providers={"s": provider})
    recorder = EventRecorder(silo.diagnostics)
    other = NatsAdapterFactory(nats_url).create_adapter("s")
    await silo.start()
    try:
        await silo.get_grain(Reader, "r").join()
        (agent,) = provider.agents.values()
        sid = StreamId("ns", "k")
        for n in range(5):
            await provider.adapter.enqueue(agent.queue, sid, [n])
        await recorder.wait_event(EventsAcknowledged, lambda e: e.total >= 5, timeout=WAIT)

        await other.open()
        owner = other.create_receiver(agent.queue)  # the queue's next owner claims it
        await owner.initialize()
        refused: asyncio.Future[LeaseLostError] = asyncio.get_running_loop().create_future()
        acknowledge = agent.receiver.messages_delivered

        async def watched(batch: Sequence[BatchContainer]) -> None:
            try:
                await acknowledge(batch)
            except LeaseLostError as exc:
                if not refused.done():
                    refused.set_result(exc)
                raise

        agent.receiver.messages_delivered = watched  # type: ignore[method-assign]
        for n in range(5, 10):
            await provider.adapter.enqueue(agent.queue, sid, [n])
        async with asyncio.timeout(WAIT):
            await refused  # the stale agent delivered some and tried to acknowledge them
            await ALL[0].wait()

        assert list(range(10)) == GOT
        assert [c.events[0] for c in await owner.get_messages(100)] == list(range(5, 10))
        await owner.shutdown()
    finally:
        recorder.close()
        await silo.stop()
        await other.close()
