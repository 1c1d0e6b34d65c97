"""The default failure policy (``retry``) loses nothing: a handler that keeps failing past
``max_delivery_time`` is told (``on_error``, once per period) and retried for as long as it
fails; its events stay queued, unacknowledged, and arrive in order once it recovers."""

from __future__ import annotations

import asyncio
from typing import Any

from orleanspy import Grain, Silo, SiloOptions
from orleanspy.errors import StreamDeliveryError
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import MemoryAdapterFactory
from orleanspy.streams.stream import StreamObserver

WAIT = 10.0
GOT: list[Any] = []
ERRORS: list[BaseException] = []
TOLD = asyncio.Event()
ALL = asyncio.Event()
STATE = {"failing": True}


class Flaky(Grain):
    async def join(self) -> None:
        stream = self.get_stream_provider("s").get_stream("ns", "k")
        await stream.subscribe(StreamObserver(self._next, on_error=self._error))

    async def _next(self, item: int, token: Any = None) -> None:
        if STATE["failing"]:
            raise RuntimeError("downstream is down")
        GOT.append(item)
        if len(GOT) == 3:
            ALL.set()

    async def _error(self, error: BaseException) -> None:
        ERRORS.append(error)
        TOLD.set()


async def test_a_handler_failing_past_the_delivery_time_loses_nothing() -> None:
    GOT.clear()
    ERRORS.clear()
    TOLD.clear()
    ALL.clear()
    STATE["failing"] = True
    assert StreamProviderOptions().failure == "retry"
    adapter_factory = MemoryAdapterFactory()
    provider = PersistentStreamProvider(adapter_factory, StreamProviderOptions(
        total_queues=1, pull_period=0.01, max_delivery_time=0.2, delivery_backoff=0.01,
        max_delivery_backoff=0.05))
    silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0), grains=[Flaky],
                stream_providers={"s": provider})
    await silo.start()
    try:
        await silo.get_grain(Flaky, "c").join()
        await provider.get_stream("ns", "k").on_next_batch([1, 2, 3])
        async with asyncio.timeout(WAIT):
            await TOLD.wait()  # past max_delivery_time: told, not given up
        (agent,) = provider.agents.values()
        error = ERRORS[0]
        assert isinstance(error, StreamDeliveryError) and "retrying" in str(error)
        assert agent.acknowledged == 0 and agent.delivery is not None
        assert agent.delivery.skipped == 0
        assert provider.adapter.queue_length(agent.queue) == 1  # still queued
        STATE["failing"] = False  # downstream is back
        async with asyncio.timeout(WAIT):
            await ALL.wait()
        assert GOT == [1, 2, 3]
    finally:
        await silo.stop()
    assert not [e for e in ERRORS if not isinstance(e, StreamDeliveryError)]
