"""Turns carried by their local caller's task: a turn that suspends goes on in the task of
the in-process caller awaiting it. The caller may give up (cancelled, or its deadline
passed) and the turn goes on to its end in a Task of its own, the future it awaits untouched;
the turn's own cancels (``asyncio.timeout``, ``TaskGroup``, ``current_task().cancel()``)
reach the turn alone.

Bounded by ``asyncio.timeout``; waits on probe gates and events, never on sleeps.
"""

from __future__ import annotations

import asyncio

import pytest

from orleanspy import Grain, GrainCallTimeoutError, MessageRejectedError, reentrant
from tests.unit.runtime.gated_grain import Gated

WAIT = 5.0


class Slow(Gated):
    """Awaits probe gates; records what it reaches."""

    async def spin_until_gate(self, tag: str) -> int:
        """Suspends only on bare loop passes until the gate opens."""
        self.silo.probe.record(("waiting", tag))
        n = 0
        while not self.silo.probe.gate(tag).is_set():
            n += 1
            await asyncio.sleep(0)
        self.done.append(tag)
        self.silo.probe.record(("done", tag))
        return n

    async def current_task_id(self) -> int:
        await asyncio.sleep(0)
        return id(asyncio.current_task())

    async def inner_timeout(self) -> str:
        await asyncio.sleep(0)  # the rest runs in the caller's task
        try:
            async with asyncio.timeout(0.01):
                await asyncio.Event().wait()
        except TimeoutError:
            return "inner timeout"
        return "no timeout"

    async def cancel_self_after_await(self) -> str:
        await asyncio.sleep(0)
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return "handled"
        return "not cancelled"

    async def cancel_self_unhandled(self) -> None:
        await asyncio.sleep(0)
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        await asyncio.Event().wait()

    async def group_with_failing_child(self) -> str:
        await asyncio.sleep(0)

        async def fail() -> None:
            raise ValueError("child failed")

        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(fail())
                group.create_task(asyncio.Event().wait())
        except BaseExceptionGroup as group_error:
            return f"group error: {group_error.exceptions[0]}"
        return "no error"

    async def raise_after_await(self) -> None:
        await asyncio.sleep(0)
        raise KeyError("after await")


@reentrant
class Outer(Grain):
    async def through(self, key: str, tag: str) -> str:
        await asyncio.sleep(0)
        return await self.get_grain(Slow, key).wait_gate(tag)


async def _gone(task: asyncio.Task[object]) -> BaseException | None:
    async with asyncio.timeout(WAIT):
        try:
            await task
        except BaseException as exc:
            return exc
    return None


async def test_a_cancelled_caller_stops_at_once_and_the_turn_goes_on(make_silo) -> None:
    silo = await make_silo(Slow)
    ref = silo.get_grain(Slow, "a")
    caller = asyncio.create_task(ref.wait_gate("g"))
    await silo.probe.wait_logged("waiting", "g")

    caller.cancel()
    assert isinstance(await _gone(caller), asyncio.CancelledError)

    assert ("done", "g") not in silo.probe.log  # the turn still waits at its gate
    silo.probe.open("g")
    await silo.probe.wait_logged("done", "g")
    async with asyncio.timeout(WAIT):
        assert await ref.finished() == ["g"]


async def test_a_caller_cancelled_while_the_turn_spins_leaves_the_turn_running(make_silo) -> None:
    silo = await make_silo(Slow)
    ref = silo.get_grain(Slow, "spin")
    caller = asyncio.create_task(ref.spin_until_gate("s"))
    await silo.probe.wait_logged("waiting", "s")
    for _ in range(3):
        await asyncio.sleep(0)

    caller.cancel()
    assert isinstance(await _gone(caller), asyncio.CancelledError)
    silo.probe.open("s")
    await silo.probe.wait_logged("done", "s")
    async with asyncio.timeout(WAIT):
        assert await ref.finished() == ["s"]


async def test_a_caller_timing_out_gets_the_timeout_and_the_turn_goes_on(make_silo) -> None:
    silo = await make_silo(Slow)
    ref = silo.get_grain(Slow, "t")

    with pytest.raises(GrainCallTimeoutError):
        async with asyncio.timeout(WAIT):
            await ref.with_timeout(0.1).wait_gate("late")

    silo.probe.open("late")
    await silo.probe.wait_logged("done", "late")
    async with asyncio.timeout(WAIT):
        assert await ref.finished() == ["late"]


async def test_wait_for_giving_up_leaves_the_turn_running(make_silo) -> None:
    silo = await make_silo(Slow)
    ref = silo.get_grain(Slow, "w")

    with pytest.raises(TimeoutError):
        await asyncio.wait_for(ref.wait_gate("w"), 0.05)

    silo.probe.open("w")
    await silo.probe.wait_logged("done", "w")


async def test_the_turns_current_task_is_its_own(make_silo) -> None:
    silo = await make_silo(Slow)
    async with asyncio.timeout(WAIT):
        turns = await silo.get_grain(Slow, "c").current_task_id()
    assert turns not in (id(None), id(asyncio.current_task()))


async def test_asyncio_timeout_in_a_carried_turn_times_out_the_turn_only(make_silo) -> None:
    silo = await make_silo(Slow)
    caller = asyncio.current_task()
    assert caller is not None
    async with asyncio.timeout(WAIT):
        assert await silo.get_grain(Slow, "i").inner_timeout() == "inner timeout"
    assert caller.cancelling() == 0


async def test_a_turn_cancelling_itself_after_an_await_reaches_only_the_turn(make_silo) -> None:
    silo = await make_silo(Slow)
    ref = silo.get_grain(Slow, "x")
    async with asyncio.timeout(WAIT):
        assert await ref.cancel_self_after_await() == "handled"
        with pytest.raises(MessageRejectedError, match="cancelled"):
            await ref.cancel_self_unhandled()
    caller = asyncio.current_task()
    assert caller is not None and caller.cancelling() == 0


async def test_a_task_group_in_a_carried_turn_reports_its_child_error(make_silo) -> None:
    silo = await make_silo(Slow)
    async with asyncio.timeout(WAIT):
        assert await silo.get_grain(Slow, "tg").group_with_failing_child() == (
            "group error: child failed")


async def test_an_error_after_the_first_await_reaches_the_caller(make_silo) -> None:
    silo = await make_silo(Slow)
    with pytest.raises(KeyError, match="after await"):
        async with asyncio.timeout(WAIT):
            await silo.get_grain(Slow, "e").raise_after_await()


async def test_nested_carried_turns_go_on_when_the_outer_caller_is_cancelled(make_silo) -> None:
    silo = await make_silo(Slow, Outer)
    caller = asyncio.create_task(silo.get_grain(Outer, "o").through("n", "nested"))
    await silo.probe.wait_logged("waiting", "nested")

    caller.cancel()
    assert isinstance(await _gone(caller), asyncio.CancelledError)
    silo.probe.open("nested")
    await silo.probe.wait_logged("done", "nested")
    async with asyncio.timeout(WAIT):
        assert await silo.get_grain(Slow, "n").finished() == ["nested"]


async def test_stop_waits_for_a_carried_turn(make_silo) -> None:
    silo = await make_silo(Slow)
    ref = silo.get_grain(Slow, "stop")
    caller = asyncio.create_task(ref.wait_gate("stop"))
    await silo.probe.wait_logged("waiting", "stop")

    stopping = asyncio.create_task(silo.stop())
    await asyncio.sleep(0)
    assert not stopping.done()
    silo.probe.open("stop")
    async with asyncio.timeout(WAIT):
        assert await caller == "stop"
        await stopping
