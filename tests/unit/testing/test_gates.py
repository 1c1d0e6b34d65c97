"""The test gates hold and fail storage writes and queue operations where a test says."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orleanspy import Grain, Silo, SiloOptions, stream_handler
from orleanspy.ids import GrainId
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import MemoryAdapterFactory
from orleanspy.testing.gates import GatedAdapterFactory, GatedStorage

WAIT = 10.0
GOT: list[Any] = []
ARRIVED: dict[Any, asyncio.Event] = {}


class Reader(Grain):
    async def join(self) -> None:
        await self.get_stream_provider("s").get_stream("ns", "k").subscribe(self.got)

    @stream_handler
    async def got(self, item: Any, token: Any) -> None:
        GOT.append(item)
        ARRIVED.setdefault(item, asyncio.Event()).set()


async def test_storage_gates_hold_and_fail_matching_writes_only() -> None:
    storage = GatedStorage()
    gate = storage.hold_writes("held")
    failing = storage.fail_writes("flaky", times=2)
    await storage.write(GrainId("T", "free"), "s", b"1", None)  # not matched: goes through
    task = asyncio.ensure_future(storage.write(GrainId("T", "held"), "s", b"2", None))
    async with asyncio.timeout(WAIT):
        await gate.reached.wait()
    assert not task.done()
    gate.open()
    async with asyncio.timeout(WAIT):
        await task
    for _ in range(2):
        with pytest.raises(OSError):
            await storage.write(GrainId("T", "flaky"), "s", b"3", None)
    await storage.write(GrainId("T", "flaky"), "s", b"3", None)
    assert failing.count == 2
    assert (await storage.read(GrainId("T", "held"), "s")) is not None


async def test_adapter_gates_hold_an_agents_reads_until_opened() -> None:
    GOT.clear()
    ARRIVED.clear()
    factory = GatedAdapterFactory(MemoryAdapterFactory())
    provider = PersistentStreamProvider(
        factory, StreamProviderOptions(total_queues=1, pull_period=0.01, read_backoff=0.01))
    silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0), grains=[Reader],
                stream_providers={"s": provider})
    await silo.start()
    try:
        await silo.get_grain(Reader, "r").join()
        gate = factory.hold_reads()
        await provider.get_stream("ns", "k").on_next("e1")
        async with asyncio.timeout(WAIT):
            await gate.reached.wait()
        assert GOT == []  # the read waits at the gate
        factory.fail_reads(times=1)
        gate.open()  # the next read fails once, the agent backs off and reads again
        async with asyncio.timeout(WAIT):
            await ARRIVED.setdefault("e1", asyncio.Event()).wait()
        assert GOT == ["e1"]
    finally:
        await silo.stop()
