"""One timer for many calls' response deadlines: an overdue call fails once with a timeout
naming where the default is set, never before its timeout and at most one tick after it; a
call that finished in time never does; what is kept stays in proportion to the calls in
flight; the timer stops when nothing waits."""

from __future__ import annotations

import asyncio

import pytest

from orleanspy.errors import GrainCallTimeoutError
from orleanspy.ids import GrainId
from orleanspy.messaging.deadlines import Deadlines
from orleanspy.testing import FakeClock

GID = GrainId("T", "k")


async def test_overdue_calls_fail_once_and_finished_ones_never() -> None:
    clock = FakeClock()
    deadlines = Deadlines(clock, "silo default")
    loop = asyncio.get_running_loop()
    pending = {key: loop.create_future() for key in (1, 2, 3)}
    futures = dict(pending)
    deadlines.add(1.0, 1, GID, "a", pending)
    deadlines.add(1.0, 2, GID, "b", pending)
    deadlines.add(5.0, 3, GID, "c", pending)
    del pending[2]  # finished in time
    clock.advance(0.99)
    assert not any(f.done() for f in futures.values())
    clock.advance(0.08)  # one tick (1/16 of the timeout) later at most
    with pytest.raises(GrainCallTimeoutError, match=r"T/k\.a timed out after 1 s .*silo "
                       r"default: response_timeout"):
        futures[1].result()
    assert not futures[2].done() and not futures[3].done()
    clock.advance(10.0)
    assert futures[3].done()
    futures[3].exception()
    assert pending == {}
    assert clock.pending_timers == 0  # nothing waits: no timer


async def test_an_earlier_deadline_rearms_the_timer() -> None:
    clock = FakeClock()
    deadlines = Deadlines(clock, "client")
    loop = asyncio.get_running_loop()
    slow, fast = loop.create_future(), loop.create_future()
    pending = {1: slow, 2: fast}
    deadlines.add(30.0, 1, GID, "slow", pending)
    deadlines.add(2.0, 2, GID, "fast", pending)  # later call, earlier deadline
    clock.advance(2.13)
    with pytest.raises(GrainCallTimeoutError, match="client: response_timeout"):
        fast.result()
    assert not slow.done() and pending.keys() == {1}
    deadlines.cancel()
    assert clock.pending_timers == 0


async def test_a_call_never_times_out_before_its_timeout() -> None:
    clock = FakeClock()
    deadlines = Deadlines(clock, "client")
    loop = asyncio.get_running_loop()
    pending = {}
    for i in range(10):  # calls made across one tick share a batch
        pending[i] = loop.create_future()
        deadlines.add(1.0, i, GID, "m", pending)
        clock.advance(0.01)
    futures = dict(pending)
    clock.advance(1.0 - 0.01 * 10 + 0.09 - 0.001)  # just before the last call's 1 s
    assert not futures[9].done()
    clock.advance(0.07)
    assert all(f.done() for f in futures.values())
    assert clock.pending_timers == 0


async def test_finished_calls_are_not_kept() -> None:
    clock = FakeClock()
    deadlines = Deadlines(clock, "silo default")
    loop = asyncio.get_running_loop()
    pending: dict[int, asyncio.Future[None]] = {}
    slow = loop.create_future()
    pending[-1] = slow
    deadlines.add(30.0, -1, GID, "slow", pending)  # one call stays in flight throughout
    for i in range(100_000):
        pending[i] = loop.create_future()
        deadlines.add(30.0, i, GID, "m", pending)
        del pending[i]
        if i % 1000 == 0:
            clock.advance(0.2)  # a new batch every 1,000 calls
    assert deadlines._kept < 20_000  # the bound is the behaviour under test
    clock.advance(31.0)
    assert slow.done() and pending == {}
    assert clock.pending_timers == 0
