"""Clock and FakeClock: sleeps, timers and deadlines move only with the clock that owns them."""

from __future__ import annotations

import asyncio

import pytest

from orleanspy._util.clock import SystemClock
from orleanspy.testing import FakeClock


async def test_fake_clock_sleep_wakes_only_when_time_is_advanced_past_it():
    clock = FakeClock()
    task = asyncio.create_task(clock.sleep(5.0))
    await clock.run_for(4.9)
    assert not task.done()
    await clock.run_for(0.1)
    assert task.done()


async def test_fake_clock_runs_due_timers_in_deadline_order_with_time_at_each_deadline():
    clock = FakeClock()
    seen: list[tuple[str, float]] = []
    start = clock.monotonic()
    clock.call_later(2.0, lambda: seen.append(("b", clock.monotonic() - start)))
    clock.call_later(1.0, lambda: seen.append(("a", clock.monotonic() - start)))
    clock.call_later(9.0, lambda: seen.append(("late", 0.0)))
    clock.advance(3.0)
    assert seen == [("a", 1.0), ("b", 2.0)]
    assert clock.monotonic() - start == 3.0


async def test_fake_clock_cancelled_timer_never_runs():
    clock = FakeClock()
    seen: list[int] = []
    handle = clock.call_later(1.0, seen.append, 1)
    handle.cancel()
    clock.advance(2.0)
    assert seen == []
    assert clock.pending_timers == 0


async def test_fake_clock_timeout_expires_at_its_fake_deadline_and_not_before():
    clock = FakeClock()
    entered = asyncio.Event()

    async def wait_forever() -> None:
        async with clock.timeout(10.0):
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(wait_forever())
    await entered.wait()
    await clock.run_for(9.0)
    assert not task.done()
    await clock.run_for(1.0)
    with pytest.raises(TimeoutError):
        await task


async def test_fake_clock_timeout_left_in_time_does_not_fire_later():
    clock = FakeClock()
    async with clock.timeout(1.0):
        pass
    await clock.run_for(2.0)  # the stale timer finds the block left and does nothing


async def test_fake_clock_run_for_steps_a_periodic_loop_once_per_period():
    clock = FakeClock()
    ticks: list[float] = []

    async def loop() -> None:
        while True:
            await clock.sleep(1.0)
            ticks.append(clock.monotonic())

    task = asyncio.create_task(loop())
    await clock.run_for(3.5)
    task.cancel()
    assert len(ticks) == 3
    assert ticks[1] - ticks[0] == 1.0


def test_fake_clock_refuses_to_go_backwards():
    with pytest.raises(ValueError, match="backwards"):
        FakeClock().advance(-1)


async def test_system_clock_sleep_and_call_later_follow_the_loop():
    clock = SystemClock()
    fired = asyncio.Event()
    clock.call_later(0.0, fired.set)
    await clock.sleep(0.0)
    async with clock.timeout(5.0):
        await fired.wait()
    assert clock.is_real
