"""Under min flow control, a consumer that has caught up has its events acknowledged to the
queue at once, not at the end of the pull period (which may be long): a queue holds only
what is still being delivered. Under max flow control the period stays the laggards' grace."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from orleanspy import Grain, Silo, SiloOptions
from orleanspy.diagnostics import EventsAcknowledged
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import SqliteAdapterFactory
from orleanspy.testing import EventRecorder

GOT: list[Any] = []
ACK_BOUND = 3.0  # seconds; the pull period is ten times that


class Reader(Grain):
    async def join(self) -> None:
        async def on_next(item: Any, token: Any) -> None:
            GOT.append(item)

        await self.get_stream_provider("s").get_stream("ns", "k").subscribe(on_next)


class Writer(Grain):
    async def write(self, items: list[int]) -> None:
        stream = self.get_stream_provider("s").get_stream("ns", "k")
        for item in items:
            await stream.on_next(item)


async def test_a_caught_up_consumer_has_its_events_acknowledged_at_once(tmp_path: Path) -> None:
    GOT.clear()
    period = 30.0  # far longer than the test may take
    provider = PersistentStreamProvider(
        SqliteAdapterFactory(str(tmp_path / "q.db")),
        StreamProviderOptions(total_queues=1, pull_period=period, max_pull_period=period),
    )
    silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0), grains=[Reader, Writer],
                stream_providers={"s": provider})
    recorder = EventRecorder(silo.diagnostics)
    await silo.start()
    try:
        await silo.get_grain(Reader, "r").join()
        (agent,) = provider.agents.values()
        for round_ in range(3):  # from the second round on the reader is inside its period
            items = list(range(10 * round_, 10 * round_ + 10))
            await silo.get_grain(Writer, "w").write(items)
            await agent.read_once()  # read them now (a reader waits its period for events)
            async with asyncio.timeout(ACK_BOUND):
                while await provider.adapter.pending_count(agent.queue):
                    await recorder.wait_event(EventsAcknowledged, timeout=ACK_BOUND,
                                              count=len(recorder.of(EventsAcknowledged)) + 1)
        assert list(range(30)) == GOT
    finally:
        recorder.close()
        await silo.stop()
