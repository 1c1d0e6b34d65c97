"""A queued request whose caller's deadline has passed is dropped before it starts — for
local calls, and for a gateway client's — and the next call is served at once."""

from __future__ import annotations

import asyncio

import pytest

from orleanspy import Grain, GrainCallTimeoutError
from orleanspy.ids import GrainId
from orleanspy.testing import FakeClock

WAIT = 5.0


class Worker(Grain):
    async def hold(self) -> str:
        self.silo.probe.record("holding")
        await self.silo.probe.gate("hold").wait()
        return "held"

    async def work(self, n: int) -> int:
        self.silo.probe.record(("work", n))
        return n


async def test_local_requests_past_their_deadline_do_not_run(make_silo, probe) -> None:
    clock = FakeClock()
    silo = await make_silo(Worker, clock=clock)
    worker = silo.get_grain(Worker, "w")
    hold = asyncio.create_task(worker.hold())
    await probe.wait_logged("holding")
    queued = [asyncio.create_task(worker.with_timeout(1.0).work(i)) for i in range(10)]
    await clock.run_for(0)  # every call is queued behind hold
    await clock.run_for(1.5)  # the callers give up
    for call in queued:
        with pytest.raises(GrainCallTimeoutError):
            async with asyncio.timeout(WAIT):
                await call
    probe.open("hold")
    async with asyncio.timeout(WAIT):
        assert await hold == "held"
        assert await worker.work(99) == 99
    assert [e for e in probe.log if isinstance(e, tuple)] == [("work", 99)]
    stats = silo.catalog.activations[GrainId("Worker", "w")].statistics()
    assert stats.expired == 10


async def test_gateway_requests_past_their_deadline_do_not_run(make_cluster, probe) -> None:
    cluster = await make_cluster(Worker)
    client = cluster.client
    hold = asyncio.create_task(client.get_grain(Worker, "w").hold())
    await probe.wait_logged("holding")
    gid = GrainId("Worker", "w")
    queued = [asyncio.create_task(client.call(gid, "work", (i,), None, 0.2)) for i in range(10)]
    for call in queued:
        with pytest.raises(GrainCallTimeoutError):
            async with asyncio.timeout(WAIT):
                await call
    probe.open("hold")
    async with asyncio.timeout(WAIT):
        assert await hold == "held"
        assert await client.get_grain(Worker, "w").work(99) == 99
    assert [e for e in probe.log if isinstance(e, tuple)] == [("work", 99)]
