"""Adversarial interleavings of turns carried by their local caller's task (``_util.carrier``).

Each test drives one interleaving of: the caller giving up (cancel, response deadline,
``coro.close()``), the turn's own cancels (its ``current_task().cancel()``), nested carried
calls and their deadlines, the next queued message, shutdown, and odd exceptions. The
promises checked: one turn at a time, a caller giving up never aborts or duplicates the turn,
its outcome is counted once, the caller's and the turn's cancels stay apart, contextvars do
not leak, and the turn's "current task" is its own.

Bounded by ``asyncio.timeout``; waits on probe gates and events, never on sleeps (a few bare
loop passes are used only where a test checks that something does *not* happen).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import weakref
from typing import Any

import pytest

from orleanspy import Grain, GrainCallTimeoutError, MessageRejectedError, one_way, reentrant
from orleanspy.testing import FakeClock
from tests.unit.runtime.gated_grain import Gated
from tests.unit.runtime.gated_grain import outcome as _outcome

WAIT = 5.0

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("adversarial_var")
#: what grains hand to the test out of band (task handles, weak references, futures)
KEPT: dict[str, Any] = {}


class Fatal(BaseException):
    """A KeyboardInterrupt-like exception (not an ``Exception``) that asyncio lets through."""


class Target(Gated):
    """Non-reentrant; awaits probe gates and records what it reaches."""

    async def keep_task(self, slot: str) -> str:
        """Never suspends: keeps its current task."""
        KEPT[slot] = asyncio.current_task()
        return "kept"

    async def keep_weak_task(self, slot: str) -> str:
        """Suspends once (carried), keeps a weak reference to its current task."""
        await asyncio.sleep(0)
        KEPT[slot] = weakref.ref(asyncio.current_task())  # type: ignore[arg-type]
        return "kept"

    async def same_task_across(self, tag: str) -> bool:
        await asyncio.sleep(0)
        before = asyncio.current_task()
        self.silo.probe.record(("waiting", tag))
        await self.silo.probe.gate(tag).wait()
        same = asyncio.current_task() is before
        self.silo.probe.record(("same task", tag, same))
        return same

    async def cancelling_across(self, tag: str) -> None:
        await asyncio.sleep(0)
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0)
        before = task.cancelling()
        self.silo.probe.record(("waiting", tag))
        await self.silo.probe.gate(tag).wait()
        self.silo.probe.record(("cancelling", tag, before, task.cancelling()))

    async def done_callback_across(self, tag: str) -> None:
        await asyncio.sleep(0)
        task = asyncio.current_task()
        assert task is not None
        task.add_done_callback(lambda _: self.silo.probe.record(("task done", tag)))
        self.silo.probe.record(("waiting", tag))
        await self.silo.probe.gate(tag).wait()
        self.silo.probe.record(("done", tag))

    async def own_cancel_then_gate(self, tag: str) -> str:
        await asyncio.sleep(0)
        KEPT[tag] = asyncio.current_task()
        self.silo.probe.record(("waiting", tag))
        try:
            await self.silo.probe.gate(tag).wait()
        except asyncio.CancelledError:
            self.silo.probe.record(("own cancel", tag))
            await self.silo.probe.gate(tag + "-2").wait()
            self.silo.probe.record(("done", tag))
            return "handled"
        return "not cancelled"

    async def set_var_then_gate(self, tag: str) -> str:
        await asyncio.sleep(0)
        VAR.set(tag)
        self.silo.probe.record(("waiting", tag))
        await self.silo.probe.gate(tag).wait()
        self.silo.probe.record(("var", tag, VAR.get(None)))
        return VAR.get("unset")

    async def read_var(self) -> str:
        return VAR.get("unset")

    async def read_var_after_await(self) -> str:
        await asyncio.sleep(0)
        return VAR.get("unset")

    async def await_shared(self, tag: str) -> int:
        self.silo.probe.record(("waiting", tag))
        value: int = await KEPT["shared"]
        self.silo.probe.record(("done", tag))
        return value

    async def fatal_after_await(self) -> None:
        await asyncio.sleep(0)
        raise Fatal("after await")

    async def fatal_after_gate(self, tag: str) -> None:
        self.silo.probe.record(("waiting", tag))
        await self.silo.probe.gate(tag).wait()
        self.silo.probe.record(("done", tag))
        raise Fatal("after gate")

    async def fatal_at_once(self) -> None:
        raise Fatal("first step")

    async def raise_cancelled_after_await(self) -> None:
        await asyncio.sleep(0)
        raise asyncio.CancelledError("the grain's own")


@reentrant
class Caller(Grain):
    """Calls Target grains from inside its own (carried) turns."""

    async def through(self, tag: str) -> str:
        await asyncio.sleep(0)
        return await self.get_grain(Target, tag).wait_gate(tag)

    async def through_both_timed(self, tag: str) -> str:
        """Called with a timeout; calls on with the same timeout (one deadline batch)."""
        await asyncio.sleep(0)
        try:
            return await self.get_grain(Target, tag).with_timeout(1.0).wait_gate(tag)
        except GrainCallTimeoutError:
            self.silo.probe.record(("caller saw timeout", tag))
            return "timed out"

    async def inner_timeout(self, tag: str) -> str:
        await asyncio.sleep(0)
        try:
            return await self.get_grain(Target, tag).with_timeout(1.0).wait_gate(tag)
        except GrainCallTimeoutError:
            return "inner timed out"

    async def own_cancel_around_call(self, tag: str) -> str:
        await asyncio.sleep(0)
        KEPT["caller-" + tag] = asyncio.current_task()
        try:
            return await self.get_grain(Target, tag).wait_gate(tag)
        except asyncio.CancelledError:
            self.silo.probe.record(("caller own cancel", tag))
            return "caller cancelled"

    async def ping(self) -> str:
        return "pong"

    async def down(self, i: int, n: int, tag: str, suspend_first: bool) -> int:
        """A call chain of ``n`` more levels; the bottom waits at gate ``tag``."""
        if suspend_first:
            await asyncio.sleep(0)
        if i == n:
            self.silo.probe.record(("waiting", tag))
            await self.silo.probe.gate(tag).wait()
            self.silo.probe.record(("bottom", tag))
            return 0
        below = await self.get_grain(Caller, f"{tag}-{i + 1}").down(i + 1, n, tag, suspend_first)
        self.silo.probe.record(("level", tag, i))
        return below + 1

    @one_way
    async def fire(self, tag: str) -> None:
        got = await self.get_grain(Target, tag).wait_gate(tag)
        self.silo.probe.record(("one-way got", got))

    async def start_timer(self, tag: str) -> None:
        async def tick() -> None:
            got = await self.get_grain(Target, tag).wait_gate(tag)
            self.silo.probe.record(("timer got", got))

        self.register_timer(tick, 0.0)


async def _give_up_waiting(silo: Any, call: Any, key: str) -> asyncio.Task[Any]:
    """Start ``call`` as a caller task, wait until its turn waits at the gate ``key``,
    cancel the caller and check that it ended with CancelledError; returns the caller."""
    caller = asyncio.create_task(call)
    await silo.probe.wait_logged("waiting", key)
    caller.cancel()
    assert isinstance(await _outcome(caller), asyncio.CancelledError)
    return caller


def _act(silo: Any, ref: Any) -> Any:
    return silo.catalog.activations[ref.grain_id]


async def _stop_advancing(silo: Any, clock: FakeClock) -> None:
    """Stop a silo on a fake clock, moving time so that its shutdown timeouts can pass
    (a turn left stuck by a bug must not hang the fixture's teardown)."""
    silo.probe.open_all()
    stopping = asyncio.create_task(silo.stop())
    async with asyncio.timeout(WAIT):
        while not stopping.done():
            await clock.run_for(1.0)
    await stopping


async def _forget_stuck_turns(silo: Any) -> None:
    """Unregister the Tasks of turns left with no step to run (the bug pinned by the nested
    xfail tests): asyncio.Runner's teardown would otherwise wait for them forever."""
    silo.probe.open_all()
    for _ in range(5):
        await asyncio.sleep(0)
    for act in list(silo.catalog):
        for task in list(act.tasks.values()):
            if not task.done() and task._fut_waiter is None:
                asyncio.tasks._unregister_task(task)  # type: ignore[attr-defined]


# -- the caller gives up ------------------------------------------------------------------


async def test_the_next_call_waits_for_a_turn_its_caller_gave_up_on(make_silo) -> None:
    silo = await make_silo(Target)
    ref = silo.get_grain(Target, "one")
    first = asyncio.create_task(ref.wait_gate("first"))
    await silo.probe.wait_logged("waiting", "first")
    act = _act(silo, ref)
    completed, failed = act.completed, act.failed

    first.cancel()
    assert isinstance(await _outcome(first), asyncio.CancelledError)
    second = asyncio.create_task(ref.wait_gate("second"))
    await silo.probe.until(lambda: len(act.waiting) == 1)
    assert ("waiting", "second") not in silo.probe.log  # one turn at a time

    silo.probe.open("first")
    await silo.probe.wait_logged("waiting", "second")
    silo.probe.open("second")
    assert await _outcome(second) == "second"
    assert silo.probe.log.count(("waiting", "first")) == 1  # never started twice
    assert (act.completed, act.failed) == (completed + 2, failed)  # counted once each
    assert not act.running and not act.tasks


async def test_the_gate_opening_and_the_caller_cancelled_in_one_pass(make_silo) -> None:
    """The future the turn awaits is done (the caller's wake-up is scheduled) when the caller
    is cancelled: the caller gets CancelledError, the turn finishes once."""
    silo = await make_silo(Target)
    ref = silo.get_grain(Target, "race")
    caller = asyncio.create_task(ref.wait_gate("race"))
    await silo.probe.wait_logged("waiting", "race")
    act = _act(silo, ref)

    silo.probe.open("race")
    caller.cancel()
    assert isinstance(await _outcome(caller), asyncio.CancelledError)
    await silo.probe.wait_logged("done", "race")
    async with asyncio.timeout(WAIT):
        assert await ref.finished() == ["race"]
    assert act.failed == 0 and not act.running


async def test_a_caller_cancelled_does_not_cancel_a_future_shared_by_turns(make_silo) -> None:
    silo = await make_silo(Target)
    shared: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    KEPT["shared"] = shared
    one = asyncio.create_task(silo.get_grain(Target, "s1").await_shared("s1"))
    two = asyncio.create_task(silo.get_grain(Target, "s2").await_shared("s2"))
    await silo.probe.wait_logged("waiting", "s2")
    await silo.probe.wait_logged("waiting", "s1")

    one.cancel()
    assert isinstance(await _outcome(one), asyncio.CancelledError)
    assert not shared.done()
    shared.set_result(41)
    assert await _outcome(two) == 41
    await silo.probe.wait_logged("done", "s1")


async def test_deadline_then_cancel_before_the_caller_wakes_is_a_cancel(make_silo) -> None:
    """The response deadline passes, then the caller's task is cancelled before it ran: as
    with any future that is done when its task is cancelled, the caller gets
    CancelledError (its cancellation must not turn into a timeout it may catch)."""
    clock = FakeClock()
    silo = await make_silo(Target, clock=clock)
    ref = silo.get_grain(Target, "dl")
    caller = asyncio.create_task(ref.with_timeout(1.0).wait_gate("dl"))
    await silo.probe.wait_logged("waiting", "dl")

    clock.advance(5.0)  # the deadline sweep gives the carrier the timeout
    caller.cancel()
    outcome = await _outcome(caller)
    silo.probe.open("dl")
    await silo.probe.wait_logged("done", "dl")
    assert isinstance(outcome, asyncio.CancelledError), repr(outcome)


async def test_deadline_while_the_turn_spins_on_bare_passes(make_silo) -> None:
    clock = FakeClock()
    silo = await make_silo(Target, Caller, clock=clock)
    ref = silo.get_grain(Caller, "spin")
    caller = asyncio.create_task(ref.with_timeout(1.0).down(0, 0, "spin", True))
    await silo.probe.wait_logged("waiting", "spin")
    clock.advance(5.0)
    assert isinstance(await _outcome(caller), GrainCallTimeoutError)
    silo.probe.open("spin")
    await silo.probe.wait_logged("bottom", "spin")
    async with asyncio.timeout(WAIT):
        assert await ref.ping() == "pong"


@pytest.mark.parametrize("own_first", [True, False])
async def test_the_turns_own_cancel_and_its_callers_cancel_in_one_pass(
    make_silo, own_first: bool
) -> None:
    silo = await make_silo(Target)
    tag = f"both-{own_first}"
    ref = silo.get_grain(Target, tag)
    caller = asyncio.create_task(ref.own_cancel_then_gate(tag))
    await silo.probe.wait_logged("waiting", tag)
    own = KEPT[tag]

    if own_first:
        own.cancel()
        caller.cancel()
    else:
        caller.cancel()
        own.cancel()
    assert isinstance(await _outcome(caller), asyncio.CancelledError)
    await silo.probe.wait_logged("own cancel", tag)  # the turn got its own cancel, once
    silo.probe.open(tag + "-2")
    await silo.probe.wait_logged("done", tag)
    assert silo.probe.log.count(("own cancel", tag)) == 1
    async with asyncio.timeout(WAIT):
        assert await ref.finished() == []


async def test_a_grain_raising_cancelled_error_does_not_cancel_its_caller(make_silo) -> None:
    silo = await make_silo(Target)
    caller = asyncio.current_task()
    assert caller is not None
    with pytest.raises(MessageRejectedError, match="cancelled"):
        async with asyncio.timeout(WAIT):
            await silo.get_grain(Target, "rc").raise_cancelled_after_await()
    assert caller.cancelling() == 0


async def test_a_caller_that_cancels_itself_before_awaiting_the_call(make_silo) -> None:
    silo = await make_silo(Target)
    ref = silo.get_grain(Target, "self-cancel")

    async def caller() -> str:
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        return await ref.wait_gate("sc")

    task = asyncio.create_task(caller())
    assert isinstance(await _outcome(task), asyncio.CancelledError)
    silo.probe.open("sc")
    await silo.probe.wait_logged("done", "sc")


async def test_the_callers_coroutine_closed_while_it_carries_the_turn(make_silo) -> None:
    silo = await make_silo(Target)
    ref = silo.get_grain(Target, "closed")
    coro = ref.wait_gate("closed")
    yielded = coro.send(None)  # the call starts; its turn suspends at the gate
    assert ("waiting", "closed") in silo.probe.log
    assert yielded is not None
    coro.close()  # nobody will ever carry it: the turn goes on in a Task of its own

    silo.probe.open("closed")
    await silo.probe.wait_logged("done", "closed")
    async with asyncio.timeout(WAIT):
        assert await ref.finished() == ["closed"]
    assert not _act(silo, ref).running


async def test_a_caller_task_nobody_references_still_finishes_the_turn(make_silo) -> None:
    silo = await make_silo(Target)
    ref = silo.get_grain(Target, "gc")
    caller = asyncio.create_task(ref.wait_gate("gc"))
    await silo.probe.wait_logged("waiting", "gc")
    alive = weakref.ref(caller)
    del caller
    gc.collect()
    # The turn's future holds the caller's wake-up, and the activation the carrier.
    assert alive() is not None
    silo.probe.open("gc")
    await silo.probe.wait_logged("done", "gc")
    async with asyncio.timeout(WAIT):
        assert await ref.finished() == ["gc"]


async def test_a_task_factory_runs_the_rest_of_a_turn_its_caller_gave_up_on(make_silo) -> None:
    silo = await make_silo(Target)
    loop = asyncio.get_running_loop()
    made: list[asyncio.Task[Any]] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, context: Any = None) -> Any:
        made.append(asyncio.Task(coro, loop=loop, context=context))
        return made[-1]

    previous = loop.get_task_factory()
    loop.set_task_factory(factory)
    try:
        ref = silo.get_grain(Target, "factory")
        caller = asyncio.create_task(ref.wait_gate("factory"))
        await silo.probe.wait_logged("waiting", "factory")
        caller.cancel()
        assert isinstance(await _outcome(caller), asyncio.CancelledError)
        silo.probe.open("factory")
        await silo.probe.wait_logged("done", "factory")
        assert made  # the Task that runs the turn on came from the factory
        async with asyncio.timeout(WAIT):
            assert await ref.finished() == ["factory"]
    finally:
        loop.set_task_factory(previous)


# -- nested carried turns ---------------------------------------------------------------------


async def test_an_inner_deadline_reaches_the_outer_turn_only(make_silo) -> None:
    clock = FakeClock()
    silo = await make_silo(Target, Caller, clock=clock)
    outer = silo.get_grain(Caller, "o")
    caller = asyncio.create_task(outer.inner_timeout("inner"))
    await silo.probe.wait_logged("waiting", "inner")
    clock.advance(2.0)
    assert await _outcome(caller) == "inner timed out"
    silo.probe.open("inner")
    await silo.probe.wait_logged("done", "inner")
    async with asyncio.timeout(WAIT):
        assert await silo.get_grain(Target, "inner").finished() == ["inner"]


async def test_outer_and_inner_deadlines_in_one_sweep(make_silo) -> None:
    """Caller -> A (timeout 1 s) -> B (timeout 1 s): both deadlines are in one batch, so one
    sweep detaches A (its caller gives up) and then B (A's call to B gives up) before A's new
    Task first runs. A must still end (B's timeout reaches it) and take its next call."""
    clock = FakeClock()
    silo = await make_silo(Target, Caller, clock=clock)
    a = silo.get_grain(Caller, "a")
    caller = asyncio.create_task(a.with_timeout(1.0).through_both_timed("b"))
    await silo.probe.wait_logged("waiting", "b")

    try:
        clock.advance(5.0)
        assert isinstance(await _outcome(caller), GrainCallTimeoutError)
        await silo.probe.wait_logged("caller saw timeout", "b", timeout=2.0)  # A goes on
        silo.probe.open("b")
        await silo.probe.wait_logged("done", "b")
        async with asyncio.timeout(2.0):
            assert await a.ping() == "pong"
    finally:
        await _forget_stuck_turns(silo)
        await _stop_advancing(silo, clock)


async def test_the_turns_own_cancel_then_its_callers_deadline_is_a_timeout(make_silo) -> None:
    """The turn cancels the future it awaits (its own timeout: the caller's wake-up is
    scheduled with that CancelledError), then the caller's deadline passes before the caller
    ran: the caller gets the timeout, never the turn's own CancelledError."""
    clock = FakeClock()
    silo = await make_silo(Target, clock=clock)
    tag = "own-then-deadline"
    ref = silo.get_grain(Target, tag)
    caller = asyncio.create_task(ref.with_timeout(1.0).own_cancel_then_gate(tag))
    await silo.probe.wait_logged("waiting", tag)

    KEPT[tag].cancel()
    clock.advance(5.0)
    outcome = await _outcome(caller)
    await silo.probe.wait_logged("own cancel", tag)
    silo.probe.open(tag + "-2")
    await silo.probe.wait_logged("done", tag)
    assert isinstance(outcome, GrainCallTimeoutError), repr(outcome)
    assert caller.cancelling() == 0


async def test_stop_on_a_fake_clock_returns_once_a_carried_turn_ends(make_silo) -> None:
    """Shutdown waits for a carried turn; once it has ended, stop() returns without the
    test moving fake time (as it does for turns that run in a Task of their own)."""
    clock = FakeClock()
    silo = await make_silo(Target, clock=clock)
    ref = silo.get_grain(Target, "fake-stop")
    caller = asyncio.create_task(ref.wait_gate("fake-stop"))
    await silo.probe.wait_logged("waiting", "fake-stop")
    stopping = asyncio.create_task(silo.stop())
    try:
        for _ in range(3):
            await asyncio.sleep(0)
        assert not stopping.done()
        silo.probe.open("fake-stop")
        assert await _outcome(caller) == "fake-stop"
        async with asyncio.timeout(2.0):
            await stopping
    finally:
        async with asyncio.timeout(WAIT):
            while not stopping.done():
                await clock.run_for(1.0)


async def test_outer_turns_own_cancel_then_its_caller_cancelled_in_one_pass(make_silo) -> None:
    """A (carried) awaits B (carried). A's own cancel hands B to a Task of its own and wakes
    A's carrying task; before that task runs, A's caller is cancelled too, so A moves to a
    Task whose first step awaits B's carrier, which is no longer carried."""
    silo = await make_silo(Target, Caller, shutdown_timeout=0.5)  # A may be left stuck
    a = silo.get_grain(Caller, "a2")
    caller = asyncio.create_task(a.own_cancel_around_call("b2"))
    await silo.probe.wait_logged("waiting", "b2")
    own = KEPT["caller-b2"]

    try:
        own.cancel()
        caller.cancel()
        assert isinstance(await _outcome(caller), asyncio.CancelledError)
        async with asyncio.timeout(2.0):
            await silo.probe.wait_logged("caller own cancel", "b2")
        silo.probe.open("b2")
        await silo.probe.wait_logged("done", "b2")
        async with asyncio.timeout(2.0):
            assert await a.ping() == "pong"
    finally:
        await _forget_stuck_turns(silo)


async def test_the_outer_turns_own_cancel_leaves_the_inner_turn_running(make_silo) -> None:
    silo = await make_silo(Target, Caller)
    a = silo.get_grain(Caller, "a3")
    caller = asyncio.create_task(a.own_cancel_around_call("b3"))
    await silo.probe.wait_logged("waiting", "b3")

    KEPT["caller-b3"].cancel()
    assert await _outcome(caller) == "caller cancelled"
    assert caller.cancelling() == 0
    assert ("done", "b3") not in silo.probe.log
    silo.probe.open("b3")
    await silo.probe.wait_logged("done", "b3")


@pytest.mark.parametrize("suspend_first", [True, False])
async def test_a_deep_call_chain_finishes(make_silo, suspend_first: bool) -> None:
    silo = await make_silo(Caller)
    tag = f"deep-{suspend_first}"
    caller = asyncio.create_task(
        silo.get_grain(Caller, f"{tag}-0").down(0, 40, tag, suspend_first))
    await silo.probe.wait_logged("waiting", tag)
    silo.probe.open(tag)
    assert await _outcome(caller) == 40


@pytest.mark.parametrize("suspend_first", [True, False])
async def test_a_deep_call_chain_goes_on_when_its_outermost_caller_is_cancelled(
    make_silo, suspend_first: bool
) -> None:
    silo = await make_silo(Caller)
    tag = f"deepc-{suspend_first}"
    caller = asyncio.create_task(
        silo.get_grain(Caller, f"{tag}-0").down(0, 40, tag, suspend_first))
    await silo.probe.wait_logged("waiting", tag)
    caller.cancel()
    assert isinstance(await _outcome(caller), asyncio.CancelledError)

    silo.probe.open(tag)
    await silo.probe.wait_for(lambda log: ("level", tag, 0) in log)
    levels = [e for e in silo.probe.log if isinstance(e, tuple) and e[:2] == ("level", tag)]
    assert sorted(e[2] for e in levels) == list(range(40))  # each level ended once
    async with asyncio.timeout(WAIT):
        assert await silo.get_grain(Caller, f"{tag}-0").ping() == "pong"


# -- other contexts of the caller ---------------------------------------------------------------


async def test_a_one_way_turn_carries_its_call(make_silo) -> None:
    silo = await make_silo(Target, Caller)
    async with asyncio.timeout(WAIT):
        await silo.get_grain(Caller, "ow").fire("ow")
    await silo.probe.wait_logged("waiting", "ow")
    silo.probe.open("ow")
    await silo.probe.wait_logged("one-way got", "ow")
    assert silo.probe.log.count(("one-way got", "ow")) == 1


async def test_a_timer_tick_carries_its_call(make_silo) -> None:
    silo = await make_silo(Target, Caller)
    async with asyncio.timeout(WAIT):
        await silo.get_grain(Caller, "tm").start_timer("tm")
    await silo.probe.wait_logged("waiting", "tm")
    silo.probe.open("tm")
    await silo.probe.wait_logged("timer got", "tm")
    assert ("timer got", "tm") in silo.probe.log


# -- contextvars --------------------------------------------------------------------------------


async def test_a_carried_turns_contextvar_stays_in_the_turn(make_silo) -> None:
    silo = await make_silo(Target)
    ref = silo.get_grain(Target, "cv")
    VAR.set("caller")
    silo.probe.open("cv")
    async with asyncio.timeout(WAIT):
        assert await ref.set_var_then_gate("cv") == "cv"
    assert VAR.get() == "caller"


async def test_a_detached_turns_contextvar_reaches_neither_caller_nor_next_turn(
    make_silo
) -> None:
    silo = await make_silo(Target)
    ref = silo.get_grain(Target, "cvd")

    async def caller() -> str:
        try:
            return await ref.set_var_then_gate("cvd")
        finally:
            KEPT["caller var"] = VAR.get("unset")

    first = asyncio.create_task(caller())
    await silo.probe.wait_logged("waiting", "cvd")
    first.cancel()
    assert isinstance(await _outcome(first), asyncio.CancelledError)
    assert KEPT["caller var"] == "unset"

    queued = asyncio.create_task(ref.read_var_after_await())  # waits for the turn
    await silo.probe.until(lambda: len(_act(silo, ref).waiting) == 1)
    silo.probe.open("cvd")
    await silo.probe.wait_logged("var", "cvd", "cvd")  # the turn kept its own context
    assert await _outcome(queued) == "unset"
    async with asyncio.timeout(WAIT):
        assert await ref.read_var() == "unset"


# -- exceptions ---------------------------------------------------------------------------------


async def test_a_base_exception_after_an_await_reaches_the_caller_counted_once(
    make_silo
) -> None:
    silo = await make_silo(Target)
    ref = silo.get_grain(Target, "fatal")
    async with asyncio.timeout(WAIT):
        await ref.finished()
    act = _act(silo, ref)
    failed = act.failed
    with pytest.raises(Fatal):
        async with asyncio.timeout(WAIT):
            await ref.fatal_after_await()
    assert act.failed == failed + 1 and not act.running
    async with asyncio.timeout(WAIT):
        assert await ref.finished() == []


async def test_a_base_exception_in_a_detached_turn_is_counted_once(make_silo) -> None:
    silo = await make_silo(Target)
    ref = silo.get_grain(Target, "fatal-d")
    caller = asyncio.create_task(ref.fatal_after_gate("fd"))
    await silo.probe.wait_logged("waiting", "fd")
    act = _act(silo, ref)
    failed = act.failed
    caller.cancel()
    assert isinstance(await _outcome(caller), asyncio.CancelledError)
    (rest,) = act.tasks.values()  # the Task that now runs the turn
    silo.probe.open("fd")
    assert isinstance(await _outcome(rest), Fatal)  # retrieved: no "never retrieved" log
    async with asyncio.timeout(WAIT):
        assert await ref.finished() == []
    assert act.failed == failed + 1


async def test_a_queued_turns_base_exception_does_not_reach_the_previous_caller(
    make_silo
) -> None:
    """A carried turn ends and starts the next queued message (in its caller's task); that
    message's first step raises a BaseException. The carried turn's caller must get its own
    result, and the queued caller the exception."""
    silo = await make_silo(Target)
    ref = silo.get_grain(Target, "q")
    first = asyncio.create_task(ref.wait_gate("q"))
    await silo.probe.wait_logged("waiting", "q")
    second = asyncio.create_task(ref.fatal_at_once())
    await silo.probe.until(lambda: len(_act(silo, ref).waiting) == 1)

    silo.probe.open("q")
    got_first, got_second = await _outcome(first), await _outcome(second)
    assert isinstance(got_second, Fatal)
    assert got_first == "q", repr(got_first)


# -- the turn's current task ------------------------------------------------------------------


async def test_a_task_kept_from_an_ended_turn_cannot_cancel_a_later_turn(make_silo) -> None:
    silo = await make_silo(Target)
    async with asyncio.timeout(WAIT):
        assert await silo.get_grain(Target, "keeper").keep_task("old") == "kept"
    old = KEPT["old"]

    later = asyncio.create_task(silo.get_grain(Target, "victim").wait_gate("victim"))
    await silo.probe.wait_logged("waiting", "victim")
    old.cancel()  # the ended turn's task: must not reach another turn
    silo.probe.open("victim")
    assert await _outcome(later) == "victim"


async def test_a_weak_reference_to_an_ended_carried_turns_task(make_silo) -> None:
    silo = await make_silo(Target)
    async with asyncio.timeout(WAIT):
        assert await silo.get_grain(Target, "weak").keep_weak_task("weak") == "kept"
    old = KEPT["weak"]()

    later = asyncio.create_task(silo.get_grain(Target, "victim2").wait_gate("victim2"))
    await silo.probe.wait_logged("waiting", "victim2")
    if old is not None:
        old.cancel()
    silo.probe.open("victim2")
    assert await _outcome(later) == "victim2"
    assert old is None or old.done()


async def test_a_done_callback_on_the_turns_task_waits_for_the_turn(make_silo) -> None:
    silo = await make_silo(Target)
    ref = silo.get_grain(Target, "cb")
    await _give_up_waiting(silo, ref.done_callback_across("cb"), "cb")
    for _ in range(3):
        await asyncio.sleep(0)  # let any done callbacks of the caller's task run
    assert ("task done", "cb") not in silo.probe.log  # the turn has not ended
    silo.probe.open("cb")
    await silo.probe.wait_logged("task done", "cb")


async def test_the_turns_current_task_is_one_object_across_a_hand_over(make_silo) -> None:
    silo = await make_silo(Target)
    ref = silo.get_grain(Target, "same")
    await _give_up_waiting(silo, ref.same_task_across("same"), "same")
    silo.probe.open("same")
    await silo.probe.wait_for(lambda log: any(
        isinstance(e, tuple) and e[:2] == ("same task", "same") for e in log))
    assert ("same task", "same", True) in silo.probe.log


async def test_the_turns_cancelling_count_survives_a_hand_over(make_silo) -> None:
    silo = await make_silo(Target)
    ref = silo.get_grain(Target, "count")
    await _give_up_waiting(silo, ref.cancelling_across("count"), "count")
    silo.probe.open("count")
    await silo.probe.wait_for(lambda log: any(
        isinstance(e, tuple) and e[:2] == ("cancelling", "count") for e in log))
    assert ("cancelling", "count", 1, 1) in silo.probe.log


# -- shutdown -----------------------------------------------------------------------------------


async def test_shutdown_timeout_cancels_a_carried_turn_not_its_caller(make_silo) -> None:
    silo = await make_silo(Target, shutdown_timeout=0.2)
    ref = silo.get_grain(Target, "stuck")
    caller = asyncio.create_task(ref.wait_gate("stuck-never"))
    await silo.probe.wait_logged("waiting", "stuck-never")
    stopping = asyncio.create_task(silo.stop())
    outcome = await _outcome(caller)
    assert isinstance(outcome, MessageRejectedError), repr(outcome)
    assert caller.cancelling() == 0
    await _outcome(stopping)


async def test_shutdown_timeout_with_nested_carried_turns(make_silo) -> None:
    silo = await make_silo(Target, Caller, shutdown_timeout=0.2)
    caller = asyncio.create_task(silo.get_grain(Caller, "n").through("nested-never"))
    await silo.probe.wait_logged("waiting", "nested-never")
    stopping = asyncio.create_task(silo.stop())
    outcome = await _outcome(caller)
    assert isinstance(outcome, MessageRejectedError), repr(outcome)
    assert await _outcome(stopping) is None


async def test_stop_waits_for_a_turn_its_caller_gave_up_on(make_silo) -> None:
    silo = await make_silo(Target)
    ref = silo.get_grain(Target, "drain")
    await _give_up_waiting(silo, ref.wait_gate("drain"), "drain")
    stopping = asyncio.create_task(silo.stop())
    for _ in range(3):
        await asyncio.sleep(0)
    assert not stopping.done()  # the detached turn is still drained
    silo.probe.open("drain")
    await silo.probe.wait_logged("done", "drain")
    assert await _outcome(stopping) is None
