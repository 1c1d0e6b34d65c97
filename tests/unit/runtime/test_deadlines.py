"""One timer for many calls' response deadlines: an overdue call fails once with a timeout
naming where the default is set; a call that finished in time never does; finished heads
are trimmed; the timer stops when nothing waits."""

from __future__ import annotations

import asyncio

import pytest

from orleanspy.errors import GrainCallTimeoutError
from orleanspy.ids import GrainId
from orleanspy.runtime.deadlines import Deadlines
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
    deadlines.trim()
    clock.advance(0.99)
    assert not any(f.done() for f in futures.values())
    clock.advance(0.02)
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
    clock.advance(2.01)
    with pytest.raises(GrainCallTimeoutError, match="client: response_timeout"):
        fast.result()
    assert not slow.done() and pending.keys() == {1}
    deadlines.cancel()
    assert clock.pending_timers == 0
