"""Cancellation on one silo: a local caller that gives up (its task cancelled, or its
deadline passed) cancels a running ``@cancellable`` turn at its next await, leaves any other
running turn to its end, and a request of its still queued never starts (counted).

Turns are observed with probe gates; every wait is bounded.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orleanspy import Grain, GrainCallTimeoutError, cancellable

WAIT = 5.0


class Worker(Grain):
    @cancellable
    async def polite(self, tag: str) -> str:
        probe = self.silo.probe
        probe.record(("start", tag))
        try:
            await probe.gate(tag).wait()
        except asyncio.CancelledError:
            probe.record(("cancelled", tag))
            raise
        probe.record(("end", tag))
        return tag

    async def stubborn(self, tag: str) -> str:
        probe = self.silo.probe
        probe.record(("start", tag))
        await probe.gate(tag).wait()
        probe.record(("end", tag))
        return tag


class Relay(Grain):
    @cancellable
    async def relay(self, key: str, tag: str) -> str:
        result: str = await self.get_grain(Worker, key).polite(tag)
        return result

    @cancellable
    async def relay_stubborn(self, key: str, tag: str) -> str:
        try:
            result: str = await self.get_grain(Worker, key).stubborn(tag)
        except asyncio.CancelledError:
            self.silo.probe.record(("relay cancelled", tag))
            raise
        return result


def _activation(silo: Any, ref: Any) -> Any:
    return silo.catalog.get(ref.grain_id)


async def _gone(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(WAIT):
            await task


async def test_a_cancelled_caller_cancels_a_cancellable_turn(make_silo, probe):
    silo = await make_silo(Worker)
    ref = silo.get_grain(Worker, "w")
    task = asyncio.ensure_future(ref.polite("a"))
    await probe.wait_logged(("start", "a"))
    await _gone(task)
    await probe.wait_logged(("cancelled", "a"))
    probe.open("b")
    async with asyncio.timeout(WAIT):
        assert await ref.polite("b") == "b"  # the activation serves on
    assert ("end", "a") not in probe.log


async def test_a_deadline_cancels_a_cancellable_turn_and_not_another(make_silo, probe):
    silo = await make_silo(Worker)
    ref = silo.get_grain(Worker, "w")
    with pytest.raises(GrainCallTimeoutError):
        await ref.with_timeout(0.1).polite("a")
    await probe.wait_logged(("cancelled", "a"))

    with pytest.raises(GrainCallTimeoutError):
        await ref.with_timeout(0.1).stubborn("s")
    probe.open("s")
    await probe.wait_logged(("end", "s"))  # not cancellable: it ran to its end


async def test_a_queued_request_whose_caller_gave_up_never_starts(make_silo, probe):
    silo = await make_silo(Worker)
    ref = silo.get_grain(Worker, "w")
    busy = asyncio.ensure_future(ref.stubborn("busy"))
    await probe.wait_logged(("start", "busy"))
    cancelled = asyncio.ensure_future(ref.stubborn("cancelled"))
    with pytest.raises(GrainCallTimeoutError):
        await ref.with_timeout(0.1).stubborn("late")
    assert _activation(silo, ref).statistics().queued == 2  # (queued while "late" waited)
    await _gone(cancelled)
    for tag in ("busy", "cancelled", "late", "after"):
        probe.open(tag)
    async with asyncio.timeout(WAIT):
        assert await busy == "busy"
        assert await ref.stubborn("after") == "after"
    started = [tag for kind, tag in probe.log if kind == "start"]
    assert started == ["busy", "after"]
    assert _activation(silo, ref).statistics().expired == 2


async def test_a_cancelled_turn_cancels_the_call_it_waits_for(make_silo, probe):
    silo = await make_silo(Worker, Relay)
    task = asyncio.ensure_future(silo.get_grain(Relay, "r").relay("w", "inner"))
    await probe.wait_logged(("start", "inner"))
    await _gone(task)
    await probe.wait_logged(("cancelled", "inner"))


async def test_a_cancelled_turn_gives_up_a_call_that_is_not_cancellable(make_silo, probe):
    """The cancelled turn gets CancelledError where it awaits the call; the called turn,
    not ``@cancellable``, runs to its end by itself."""
    silo = await make_silo(Worker, Relay)
    task = asyncio.ensure_future(silo.get_grain(Relay, "r").relay_stubborn("w", "inner"))
    await probe.wait_logged(("start", "inner"))
    await _gone(task)
    await probe.wait_logged(("relay cancelled", "inner"))
    probe.open("inner")
    await probe.wait_logged(("end", "inner"))
