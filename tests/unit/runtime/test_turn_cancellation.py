"""Turns started eagerly: a cancel requested before a turn's task first runs reaches the grain.

Bounded by ``asyncio.timeout`` (or a call timeout where the failure would be a hang);
waits on probe events and runtime state, never on sleeps.
"""

from __future__ import annotations

import asyncio

from orleanspy import (
    Grain,
)

WAIT = 5.0


class EagerCancel(Grain):
    async def self_cancel(self) -> str:
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            return "handled"
        return "not cancelled"

    async def timeout_zero(self) -> str:
        try:
            async with asyncio.timeout(0):
                await asyncio.Event().wait()
        except TimeoutError:
            return "timed out"
        return "no timeout"


# A cancel requested before the continuation task's first step (eager start, Python 3.11)
async def test_sync_self_cancel_reaches_the_grain_coroutine(make_silo):
    silo = await make_silo(EagerCancel)
    async with asyncio.timeout(WAIT):
        assert await silo.get_grain(EagerCancel, "a").self_cancel() == "handled"


async def test_timeout_zero_before_first_await_raises_timeout_in_the_grain(make_silo):
    silo = await make_silo(EagerCancel)
    async with asyncio.timeout(WAIT):
        assert await silo.get_grain(EagerCancel, "a").timeout_zero() == "timed out"
