"""In-process calls carry only values the wire can carry.

Bounded by ``asyncio.timeout`` (or a call timeout where the failure would be a hang);
waits on probe events and runtime state, never on sleeps.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orleanspy import Grain, SerializationError
from tests.unit.runtime.echo_grain import Echo

WAIT = 5.0


# An in-process call refuses an int wider than 64 bits, as the wire would
async def test_local_call_rejects_int_wider_than_64_bits(make_silo):
    silo = await make_silo(Echo)
    async with asyncio.timeout(WAIT):
        with pytest.raises(SerializationError):
            await silo.get_grain(Echo, "k").echo(2**70)


class FutureMaker(Grain):
    async def pending_future(self) -> Any:
        return asyncio.get_running_loop().create_future()


# A method that returns a future returns a value the wire cannot carry: the call fails at
# once, it does not wait on that future as if it were the turn's own
async def test_local_call_returning_a_future_fails_instead_of_waiting_on_it(make_silo):
    silo = await make_silo(FutureMaker)
    async with asyncio.timeout(WAIT):
        with pytest.raises(SerializationError):
            await silo.get_grain(FutureMaker, "k").pending_future()
