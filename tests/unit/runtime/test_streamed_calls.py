"""Streamed responses on one silo: a grain method written as an async generator is called
as ``async for item in ref.method(...)``; the activation is held while the caller iterates
(unless the method interleaves), the generator runs only as far as the caller pulls, and a
caller that stops early, fails or walks away ends it.

Turns are observed with probe gates and a fake clock; every wait is bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from orleanspy import Grain, MessageRejectedError, always_interleave
from orleanspy.grains.streamed import DEFAULT_BATCH
from orleanspy.runtime.streamed_calls import FIRST_BATCH, MAX_BATCH
from orleanspy.testing import FakeClock

WAIT = 5.0


class Source(Grain):
    def __init__(self) -> None:
        self.produced = 0
        self.closed = 0

    async def count(self, n: int) -> AsyncIterator[int]:
        try:
            for i in range(n):
                self.produced += 1
                yield i
        finally:
            self.closed += 1
            self.silo.probe.record(("closed", self.closed))

    async def gated(self, n: int) -> AsyncIterator[int]:
        """Yields ``n`` items, then waits for the gate "more" and fails."""
        for i in range(n):
            yield i
        await self.silo.probe.gate("more").wait()
        raise LookupError("the source ran dry")

    @always_interleave
    async def side(self, n: int) -> AsyncIterator[int]:
        for i in range(n):
            yield i

    @always_interleave
    async def figures(self) -> dict[str, int]:
        return {"produced": self.produced, "closed": self.closed}

    async def plain(self) -> str:
        return "served"


class Reader(Grain):
    async def total(self, key: str, n: int) -> int:
        return sum([i async for i in self.get_grain(Source, key).count(n)])


async def test_every_item_arrives_in_order_and_the_grain_stays_at_most_a_batch_ahead(
        make_silo):
    silo = await make_silo(Source, Reader)
    ref = silo.get_grain(Source, "s")
    n = FIRST_BATCH + 3 * DEFAULT_BATCH + 5
    seen = []
    async with asyncio.timeout(WAIT):
        async for item in ref.count(n):
            if not seen:  # the call answered its first items only, and one pull is on its way
                assert (await ref.figures())["produced"] <= FIRST_BATCH + DEFAULT_BATCH
            seen.append(item)
        assert seen == list(range(n))
        assert await ref.figures() == {"produced": n, "closed": 1}
        assert [i async for i in ref.count(3)] == [0, 1, 2]  # one answer, nothing held
        # grain to grain
        assert await silo.get_grain(Reader, "r").total("s", 1000) == sum(range(1000))


async def test_the_activation_is_held_while_its_caller_iterates(make_silo):
    silo = await make_silo(Source)
    ref = silo.get_grain(Source, "s")
    async with asyncio.timeout(WAIT):
        stream = ref.count(10**9)
        assert await stream.__anext__() == 0
        plain = asyncio.ensure_future(ref.plain())
        side = [i async for i in ref.side(FIRST_BATCH * 2)]  # interleaves: not held
        assert side == list(range(FIRST_BATCH * 2))
        assert not plain.done()
        assert silo.catalog.get(ref.grain_id).statistics().queued == 1  # it waits
        await stream.aclose()
        assert await plain == "served"
        assert (await ref.figures())["closed"] == 1


async def test_a_failing_generator_fails_its_caller_and_releases_the_activation(
        make_silo, probe):
    silo = await make_silo(Source)
    ref = silo.get_grain(Source, "s")
    got = []
    async with asyncio.timeout(WAIT):
        stream = ref.gated(FIRST_BATCH + 1)
        with pytest.raises(LookupError, match="ran dry"):
            async for item in stream:
                got.append(item)
                if item == FIRST_BATCH - 1:  # (the pull on its way waits for it)
                    probe.open("more")
        assert got == list(range(FIRST_BATCH + 1))
        assert await ref.plain() == "served"


async def test_an_iteration_nobody_pulls_ends_after_the_calls_timeout(make_silo, probe):
    clock = FakeClock()
    silo = await make_silo(Source, clock=clock)
    ref = silo.get_grain(Source, "s").with_timeout(5.0)
    stream = ref.count(10**9)
    async with asyncio.timeout(WAIT):
        assert await stream.__anext__() == 0
        pending = stream._next  # the prefetching pull: let it land, then walk away
        assert pending is not None
        await pending
        stream._next = None
        stream._done = True  # (as if the caller vanished: no close is sent)
        await clock.run_for(4.9)
        assert (await ref.figures())["closed"] == 0
        await clock.run_for(0.2)
        await probe.wait_logged(("closed", 1))
        assert await ref.plain() == "served"


async def test_pulls_name_an_open_iteration_of_this_grain(make_silo):
    silo = await make_silo(Source)
    ref: Any = silo.get_grain(Source, "s")
    other: Any = silo.get_grain(Source, "t")
    async with asyncio.timeout(WAIT):
        stream = ref.count(10**9)
        await stream.__anext__()
        token = stream._token
        with pytest.raises(MessageRejectedError, match="no open streamed call"):
            await other.invoke("__orleanspy_stream_pull__", token, 10)
        with pytest.raises(MessageRejectedError, match="no open streamed call"):
            await ref.invoke("__orleanspy_stream_pull__", "0" * 32, 10)
        await stream.aclose()
        with pytest.raises(MessageRejectedError, match="no open streamed call"):
            await ref.invoke("__orleanspy_stream_pull__", token, 10)
    assert MAX_BATCH >= DEFAULT_BATCH


async def test_an_interface_declares_a_streamed_method_and_the_grain_must_agree(make_silo):
    from typing import Protocol

    from orleanspy import ConfigurationError, GrainInterface, grain_type
    from orleanspy.grains.interface import class_info

    @grain_type("Counting")
    class ICounting(GrainInterface, Protocol):
        async def upto(self, n: int) -> AsyncIterator[int]:
            yield 0  # a stub: the grain's generator runs

    class Counting(Grain, ICounting):
        async def upto(self, n: int) -> AsyncIterator[int]:
            for i in range(n):
                yield i

    class Wrong(Grain, ICounting):
        async def upto(self, n: int) -> list[int]:  # type: ignore[override]
            return list(range(n))

    with pytest.raises(ConfigurationError, match="async generator"):
        class_info(Wrong)
    silo = await make_silo(Counting)
    async with asyncio.timeout(WAIT):
        assert [i async for i in silo.get_grain(ICounting, "c").upto(300)] == list(range(300))
