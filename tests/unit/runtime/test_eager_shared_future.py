"""Turns that start eagerly and await one shared future in their first step all resume when
it resolves (no "await wasn't used with future")."""

from __future__ import annotations

import asyncio
from typing import Any

from orleanspy import Grain, Silo, SiloOptions
from orleanspy._util.eager import eager_start

WAIT = 5.0
SHARED: dict[str, asyncio.Future[int]] = {}


class Waiter(Grain):
    async def wait(self) -> int:
        return await SHARED["f"] + 1


def _enter(a: Any, b: Any) -> None:
    pass


async def test_two_eager_coroutines_awaiting_one_future_both_resume() -> None:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[int] = loop.create_future()

    async def waiter() -> int:
        return await fut

    import contextvars
    t1, _ = eager_start(loop, waiter(), contextvars.copy_context(), _enter, None, None)
    t2, _ = eager_start(loop, waiter(), contextvars.copy_context(), _enter, None, None)
    assert t1 is not None and t2 is not None
    fut.set_result(7)
    async with asyncio.timeout(WAIT):
        assert await asyncio.gather(t1, t2) == [7, 7]


async def test_grain_turns_started_in_one_loop_pass_share_a_future() -> None:
    SHARED["f"] = asyncio.get_running_loop().create_future()
    silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0), grains=[Waiter])
    await silo.start()
    try:
        calls = [asyncio.ensure_future(silo.get_grain(Waiter, f"w{i}").wait()) for i in range(4)]
        await asyncio.sleep(0)  # every call's turn starts and awaits the future
        SHARED["f"].set_result(1)
        async with asyncio.timeout(WAIT):
            assert await asyncio.gather(*calls) == [2, 2, 2, 2]
    finally:
        await silo.stop()
