"""What a turn promises about its task, on every supported Python (docs/grains.md, "A turn's
task"): ``asyncio.current_task()``, cancellation, ``contextvars`` and task factories.

This file has no per-version expectation: every assertion holds as written on 3.11, 3.12
and 3.13. Only ``test_the_private_path_is_taken_on_3_11_only`` names versions, to pin which
implementation runs where (``orleanspy._util.eager``).

Bounded by ``asyncio.timeout``; waits on probe gates and events, never on sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import sys
from typing import Any

from orleanspy import Grain, MessageRejectedError, reentrant
from tests.unit.runtime.gated_grain import Gated
from tests.unit.runtime.gated_grain import outcome as _outcome

WAIT = 5.0

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("turn_task_var", default="unset")
#: what turns hand to the test out of band (their current tasks)
SEEN: dict[str, Any] = {}


class Turns(Gated):
    """Non-reentrant; records its current task at the points the tests ask about."""

    async def task_at_start_and_end(self, tag: str) -> bool:
        """Whether the current task is one object before and after waiting at a gate."""
        first = asyncio.current_task()
        SEEN[tag] = first
        self.silo.probe.record(("waiting", tag))
        await self.silo.probe.gate(tag).wait()
        same = asyncio.current_task() is first
        self.silo.probe.record(("same", tag, same))
        return same

    async def task_without_suspending(self, tag: str) -> None:
        SEEN[tag] = asyncio.current_task()

    async def count_cancels(self, tag: str) -> tuple[int, int, int]:
        """Cancels itself, handles it, then reports cancelling() before and after a gate
        and after uncancel()."""
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0)
        before = task.cancelling()
        self.silo.probe.record(("waiting", tag))
        await self.silo.probe.gate(tag).wait()
        after = task.cancelling()
        self.silo.probe.record(("counts", tag, before, after))
        return before, after, task.uncancel()

    async def cancelled_by_itself(self) -> None:
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        await asyncio.Event().wait()

    async def timeout_inside(self) -> str:
        try:
            async with asyncio.timeout(0.01):
                await asyncio.Event().wait()
        except TimeoutError:
            return "timed out"
        return "no timeout"

    async def group_inside(self) -> str:
        async def fail() -> None:
            raise ValueError("child failed")

        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(fail())
                group.create_task(asyncio.Event().wait())
        except BaseExceptionGroup as error:
            return f"group: {error.exceptions[0]}"
        return "no error"

    async def done_callback(self, tag: str) -> None:
        task = asyncio.current_task()
        assert task is not None
        assert not task.done()
        task.add_done_callback(lambda _: self.silo.probe.record(("task done", tag)))
        self.silo.probe.record(("waiting", tag))
        await self.silo.probe.gate(tag).wait()
        self.silo.probe.record(("done", tag))

    async def read_var(self) -> str:
        return VAR.get()

    async def set_var(self, value: str) -> str:
        VAR.set(value)
        await asyncio.sleep(0)
        return VAR.get()


@reentrant
class Nest(Grain):
    async def inner_and_outer(self, tag: str) -> tuple[bool, bool]:
        """The outer turn's task, the inner turn's, and the outer one after the call."""
        outer = asyncio.current_task()
        inner_same = await self.get_grain(Turns, tag).task_at_start_and_end(tag)
        return inner_same, asyncio.current_task() is outer


# -- asyncio.current_task() ---------------------------------------------------------------------


async def test_a_turns_task_is_its_own_and_one_object_from_start_to_end(make_silo) -> None:
    silo = await make_silo(Turns)
    ref = silo.get_grain(Turns, "one")
    caller = asyncio.create_task(ref.task_at_start_and_end("one"))
    await silo.probe.wait_logged("waiting", "one")
    assert SEEN["one"] is not None
    assert SEEN["one"] is not caller
    assert SEEN["one"] is not asyncio.current_task()
    silo.probe.open("one")
    assert await _outcome(caller) is True


async def test_a_turns_task_is_one_object_after_its_caller_gave_up(make_silo) -> None:
    silo = await make_silo(Turns)
    ref = silo.get_grain(Turns, "gave-up")
    caller = asyncio.create_task(ref.task_at_start_and_end("gave-up"))
    await silo.probe.wait_logged("waiting", "gave-up")
    caller.cancel()
    assert isinstance(await _outcome(caller), asyncio.CancelledError)
    silo.probe.open("gave-up")
    await silo.probe.wait_logged("same", "gave-up", True)


async def test_a_nested_turns_task_is_neither_its_callers_nor_the_outer_callers(make_silo) -> None:
    silo = await make_silo(Turns, Nest)
    call = asyncio.create_task(silo.get_grain(Nest, "n").inner_and_outer("nested"))
    await silo.probe.wait_logged("waiting", "nested")
    assert SEEN["nested"] is not call
    silo.probe.open("nested")
    assert await _outcome(call) == (True, True)


async def test_concurrent_turns_have_distinct_tasks(make_silo) -> None:
    silo = await make_silo(Turns)
    a = asyncio.create_task(silo.get_grain(Turns, "a").task_at_start_and_end("ta"))
    b = asyncio.create_task(silo.get_grain(Turns, "b").task_at_start_and_end("tb"))
    await silo.probe.wait_logged("waiting", "ta")
    await silo.probe.wait_logged("waiting", "tb")
    assert SEEN["ta"] is not SEEN["tb"]
    silo.probe.open_all()
    assert await _outcome(a) is True
    assert await _outcome(b) is True


async def test_the_task_of_an_ended_turn_is_done_and_cannot_cancel_a_later_turn(
    make_silo,
) -> None:
    silo = await make_silo(Turns)
    ref = silo.get_grain(Turns, "ended")
    async with asyncio.timeout(WAIT):
        await ref.task_without_suspending("ended")
    old = SEEN["ended"]
    later = asyncio.create_task(ref.task_at_start_and_end("later"))
    await silo.probe.wait_logged("waiting", "later")
    assert old.done()
    assert old.cancel() is False
    silo.probe.open("later")
    assert await _outcome(later) is True


# -- cancellation -------------------------------------------------------------------------------


async def test_a_turn_cancelling_itself_is_rejected_and_its_caller_is_not_cancelled(
    make_silo,
) -> None:
    silo = await make_silo(Turns)
    caller = asyncio.current_task()
    assert caller is not None
    async with asyncio.timeout(WAIT):
        try:
            await silo.get_grain(Turns, "self").cancelled_by_itself()
        except MessageRejectedError as error:
            assert "cancelled" in str(error)
        else:
            raise AssertionError("the self-cancelled turn returned")
    assert caller.cancelling() == 0


async def test_the_cancelling_count_is_the_turns_and_survives_its_caller_giving_up(
    make_silo,
) -> None:
    silo = await make_silo(Turns)
    ref = silo.get_grain(Turns, "count")
    kept = asyncio.create_task(ref.count_cancels("kept"))
    await silo.probe.wait_logged("waiting", "kept")
    given_up = asyncio.create_task(silo.get_grain(Turns, "count2").count_cancels("gone"))
    await silo.probe.wait_logged("waiting", "gone")
    given_up.cancel()
    assert isinstance(await _outcome(given_up), asyncio.CancelledError)
    silo.probe.open_all()
    assert await _outcome(kept) == (1, 1, 0)
    await silo.probe.wait_logged("counts", "gone", 1, 1)
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_asyncio_timeout_and_task_group_act_on_the_turn_alone(make_silo) -> None:
    silo = await make_silo(Turns)
    ref = silo.get_grain(Turns, "scopes")
    caller = asyncio.current_task()
    assert caller is not None
    async with asyncio.timeout(WAIT):
        assert await ref.timeout_inside() == "timed out"
        assert await ref.group_inside() == "group: child failed"
    assert caller.cancelling() == 0


async def test_a_caller_giving_up_does_not_cancel_the_turn(make_silo) -> None:
    silo = await make_silo(Turns)
    ref = silo.get_grain(Turns, "on")
    caller = asyncio.create_task(ref.wait_gate("on"))
    await silo.probe.wait_logged("waiting", "on")
    caller.cancel()
    assert isinstance(await _outcome(caller), asyncio.CancelledError)
    silo.probe.open("on")
    await silo.probe.wait_logged("done", "on")
    async with asyncio.timeout(WAIT):
        assert await ref.finished() == ["on"]


async def test_a_done_callback_runs_when_the_turn_ends_not_when_its_caller_gives_up(
    make_silo,
) -> None:
    silo = await make_silo(Turns)
    ref = silo.get_grain(Turns, "cb")
    caller = asyncio.create_task(ref.done_callback("cb"))
    await silo.probe.wait_logged("waiting", "cb")
    caller.cancel()
    assert isinstance(await _outcome(caller), asyncio.CancelledError)
    for _ in range(3):
        await asyncio.sleep(0)  # room for a callback that must not run yet
    assert ("task done", "cb") not in silo.probe.log
    silo.probe.open("cb")
    await silo.probe.wait_logged("task done", "cb")


# -- contextvars --------------------------------------------------------------------------------


async def test_a_turn_sees_its_callers_context_and_keeps_its_own_changes(make_silo) -> None:
    silo = await make_silo(Turns)
    ref = silo.get_grain(Turns, "ctx")
    token = VAR.set("the caller's")
    try:
        async with asyncio.timeout(WAIT):
            assert await ref.read_var() == "the caller's"
            assert await ref.set_var("the turn's") == "the turn's"
            assert VAR.get() == "the caller's"
    finally:
        VAR.reset(token)
    async with asyncio.timeout(WAIT):
        assert await ref.read_var() == "unset"


# -- task factories -----------------------------------------------------------------------------


async def test_tasks_made_for_turns_come_from_the_loops_task_factory(make_silo) -> None:
    silo = await make_silo(Turns)
    loop = asyncio.get_running_loop()
    made: list[asyncio.Task[Any]] = []

    class FactoryTask(asyncio.Task):  # type: ignore[type-arg]
        """A factory's own Task class, as tracing and monitoring libraries make."""

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
        made.append(FactoryTask(coro, loop=loop, **kwargs))
        return made[-1]

    previous = loop.get_task_factory()
    loop.set_task_factory(factory)
    try:
        ref = silo.get_grain(Turns, "factory")
        silo.probe.open("f0")
        async with asyncio.timeout(WAIT):  # the call's result, not the factory's Task
            assert await ref.wait_gate("f0") == "f0"
        first = asyncio.create_task(ref.wait_gate("f1"))
        second = asyncio.create_task(ref.wait_gate("f2"))  # queued behind the first
        await silo.probe.wait_logged("waiting", "f1")
        made_by_test = len(made)
        silo.probe.open("f1")
        assert await _outcome(first) == "f1"
        await silo.probe.wait_logged("waiting", "f2")
        silo.probe.open("f2")
        assert await _outcome(second) == "f2"
        # the queued turn suspended with no caller to go on in: a Task runs it, the factory's
        assert len(made) > made_by_test
    finally:
        loop.set_task_factory(previous)


# -- which path runs ------------------------------------------------------------------------------


def test_the_private_path_is_taken_on_3_11_only() -> None:
    from orleanspy._util import eager

    assert eager.PRIVATE_TURNS is (sys.version_info[:2] == (3, 11))
    assert (eager.CARRY_CODE is None) is (not eager.PRIVATE_TURNS)
    if not eager.PRIVATE_TURNS:
        assert "orleanspy._util.private_asyncio" not in sys.modules
