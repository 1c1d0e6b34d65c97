"""A poison event is handled alone: with several events in one delivery and one of them
always failing, the events before it are not delivered again, the error names the failing
event's own token, the events after it are delivered, and only delivered events count."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from orleanspy import Grain, Silo, SiloOptions
from orleanspy.errors import StreamDeliveryError
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import MemoryAdapterFactory
from orleanspy.streams.stream import StreamObserver

WAIT = 10.0
GOT: list[Any] = []
ERRORS: list[BaseException] = []
DONE = asyncio.Event()


class Picky(Grain):
    async def join(self) -> None:
        stream = self.get_stream_provider("s").get_stream("ns", "k")
        await stream.subscribe(StreamObserver(self._next, on_error=self._error))

    async def _next(self, item: int, token: Any = None) -> None:
        if item == 3:
            raise ValueError("item 3 is poison")
        GOT.append(item)
        if item == 9:
            DONE.set()

    async def _error(self, error: BaseException) -> None:
        ERRORS.append(error)


async def test_a_poison_event_is_handled_alone() -> None:
    GOT.clear()
    ERRORS.clear()
    DONE.clear()
    options = StreamProviderOptions(total_queues=1, pull_period=0.01, batch_size=10,
                                    max_delivery_time=0.4, failure="skip")
    provider = PersistentStreamProvider(MemoryAdapterFactory(), options)
    silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0), grains=[Picky],
                stream_providers={"s": provider})
    await silo.start()
    try:
        await silo.get_grain(Picky, "c").join()
        stream = provider.get_stream("ns", "k")
        await stream.on_next_batch(range(10))  # one container, delivered in one call
        async with asyncio.timeout(WAIT):
            await DONE.wait()
        assert GOT == [0, 1, 2, 4, 5, 6, 7, 8, 9]  # no duplicates, nothing after 3 lost
        failures = [e for e in ERRORS if isinstance(e, StreamDeliveryError)]
        assert len(failures) == 1
        # the failing event's own token (event 3 of the container), not the delivery's first
        assert re.search(r"token \d+\.3 ", str(failures[0])), str(failures[0])
        (agent,) = provider.agents.values()
        assert agent.delivered == 9
    finally:
        await silo.stop()

