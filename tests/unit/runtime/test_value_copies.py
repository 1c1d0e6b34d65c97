"""In-process calls carry only values the wire can carry.

Bounded by ``asyncio.timeout`` (or a call timeout where the failure would be a hang);
waits on probe events and runtime state, never on sleeps.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orleanspy import Grain, SerializationError

WAIT = 5.0


class Echo(Grain):
    async def echo(self, x: Any) -> Any:
        return x

    async def ping(self) -> str:
        return "pong"

    async def hold(self) -> str:
        self.silo.probe.record("holding")
        await self.silo.probe.gate("hold").wait()
        return "held"

    async def recursive_late(self) -> Any:
        await asyncio.sleep(0)
        a: list[Any] = []
        a.append((a,))
        return a


# An in-process call refuses an int wider than 64 bits, as the wire would
async def test_local_call_rejects_int_wider_than_64_bits(make_silo):
    silo = await make_silo(Echo)
    async with asyncio.timeout(WAIT):
        with pytest.raises(SerializationError):
            await silo.get_grain(Echo, "k").echo(2**70)
