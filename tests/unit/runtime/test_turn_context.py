"""A turn's context is its own: a context variable set by a turn that suspended does not
reach the turn that starts when it ends; and a loop's task factory makes the Task that
continues a suspended turn that no caller carries (one that was queued). A background task
does not inherit the request context of the call that started it."""

from __future__ import annotations

import asyncio
import contextvars
import enum
from typing import Any

from orleanspy import Grain, RequestContext, Silo, SiloOptions
from orleanspy.grains.request_context import without_context

VAR: contextvars.ContextVar[str | None] = contextvars.ContextVar("turn_test_var", default=None)


class Keeper(Grain):
    async def set_and_wait(self) -> str | None:
        VAR.set("set by the first turn")
        await asyncio.sleep(0)
        return VAR.get()

    async def read(self) -> str | None:
        return VAR.get()


async def test_a_waiting_turn_does_not_inherit_the_ended_turns_context() -> None:
    silo = Silo(SiloOptions(gateway_port=None), grains=[Keeper])
    await silo.start()
    try:
        ref = silo.get_grain(Keeper, "k")
        first, second = await asyncio.gather(ref.set_and_wait(), ref.read())
    finally:
        await silo.stop()
    assert first == "set by the first turn"
    assert second is None


async def test_the_loops_task_factory_makes_the_continuing_task() -> None:
    loop = asyncio.get_running_loop()
    made: list[Any] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        made.append(coro)
        return asyncio.Task(coro, loop=loop, **kwargs)

    silo = Silo(SiloOptions(gateway_port=None), grains=[Keeper])
    await silo.start()
    loop.set_task_factory(factory)
    try:
        ref = silo.get_grain(Keeper, "f")
        # the second call waits in the mailbox: started by the first turn's end, it has no
        # caller's task to go on in
        assert await asyncio.gather(ref.set_and_wait(), ref.set_and_wait()) == [
            "set by the first turn", "set by the first turn"]
    finally:
        loop.set_task_factory(None)
        await silo.stop()
    assert made  # the queued turn that suspended ran in a Task the factory made


async def test_a_background_task_started_under_a_request_context_runs_without_it() -> None:
    """``without_context``: a task that outlives the call starting it (a delivery loop)
    does not carry that call's request context; other context variables stay."""
    seen: list[Any] = []

    async def task() -> None:
        seen.append(RequestContext.get("tenant"))

    loop = asyncio.get_running_loop()
    assert without_context() is None  # no context: the task copies the current one
    with RequestContext.set(tenant="acme"):
        await loop.create_task(task(), context=without_context())
        await loop.create_task(task())
    assert seen == [None, "acme"]


def test_a_context_keeps_plain_scalars() -> None:
    """A str enum or an IntEnum is kept as its plain value: what a stream event or a frame
    carries is what the callee reads."""

    class Tier(str, enum.Enum):  # noqa: UP042 (its str() is "Tier.GOLD", not its value)
        GOLD = "gold"

    class Level(enum.IntEnum):
        HIGH = 3

    with RequestContext.set(tier=Tier.GOLD, level=Level.HIGH):
        assert RequestContext.snapshot() == {"tier": "gold", "level": 3}
        assert {type(v) for v in RequestContext.snapshot().values()} == {str, int}
