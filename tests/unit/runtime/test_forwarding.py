"""Re-dispatch is bounded on a lone silo too: a message whose activation keeps deactivating
before it runs fails with "forwarding failed" after ``max_forward_count`` forwards."""

from __future__ import annotations

import asyncio

import pytest

from orleanspy import Grain, MessageRejectedError

WAIT = 5.0
ACTIVATIONS: list[str] = []


class Fleeting(Grain):
    async def on_activate(self) -> None:
        ACTIVATIONS.append(str(self.key))
        self.deactivate_on_idle()

    async def ping(self) -> str:
        return "pong"


@pytest.mark.parametrize("limit", [0, 2, 5])
async def test_a_grain_that_leaves_in_on_activate_ends_in_forwarding_failed(
    make_silo, limit: int
) -> None:
    ACTIVATIONS.clear()
    silo = await make_silo(Fleeting, max_forward_count=limit)
    async with asyncio.timeout(WAIT):
        with pytest.raises(MessageRejectedError, match="forwarding failed") as info:
            await silo.get_grain(Fleeting, "k").ping()
    assert info.value.kind == "forward_limit"
    assert len(ACTIVATIONS) <= limit + 1
