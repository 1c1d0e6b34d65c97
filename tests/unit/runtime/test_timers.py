"""Grain timers: repeat, never overlap themselves, respect turns, die with the activation.

Timers run on the silo's clock: every test drives a ``FakeClock`` period by period.
"""

from __future__ import annotations

import asyncio

import pytest

from orleanspy import ActivationFailedError, Grain, always_interleave
from orleanspy.testing import FakeClock

WAIT = 5.0
PERIOD = 0.01


class Ticker(Grain):
    def __init__(self) -> None:
        self.timer = None
        self.ticks = 0
        self.slow = 0.0
        self.fail = False
        self.gated = False

    async def start(
        self,
        due: float = PERIOD,
        period: float | None = PERIOD,
        interleave: bool = False,
        keep_alive: bool = False,
        slow: float = 0.0,
        fail: bool = False,
        gated: bool = False,
    ) -> None:
        self.slow, self.fail, self.gated = slow, fail, gated
        self.timer = self.register_timer(
            self._tick, due, period, interleave=interleave, keep_alive=keep_alive
        )

    async def _tick(self) -> None:
        probe = self.silo.probe
        self.ticks += 1
        probe.record(("tick-start", self.key, self.ticks))
        if self.gated:
            await probe.gate(f"tick-{self.key}").wait()
        if self.slow:
            await self.silo.clock.sleep(self.slow)  # the tick's own work outlasts the period
        probe.record(("tick-end", self.key, self.ticks))
        if self.fail:
            raise RuntimeError("tick failed")

    async def start_then_block(self, interleave: bool) -> None:
        probe = self.silo.probe
        self.register_timer(self._tick, 0.0, None, interleave=interleave)
        probe.record(("request-start", self.key))
        await probe.gate("request").wait()
        probe.record(("request-end", self.key))

    async def request(self) -> None:
        self.silo.probe.record(("request", self.key))

    async def stop(self) -> None:
        self.timer.dispose()

    async def leave(self) -> None:
        self.deactivate_on_idle()

    async def timer_disposed(self) -> bool:
        return bool(self.timer.disposed)


class DoomedTicker(Grain):
    """Registers a timer in on_activate, then fails to activate."""

    async def on_activate(self) -> None:
        self.silo.probe.record(("timer", self.register_timer(self._tick, PERIOD, PERIOD)))
        raise RuntimeError("activation refused")

    async def _tick(self) -> None:
        self.silo.probe.record(("tick-start", self.key, 0))

    async def ping(self) -> None:
        pass


def ticks_of(log: list, key: str, kind: str = "tick-end") -> list[int]:
    return [e[2] for e in log if e[0] == kind and e[1] == key]


async def let_time_pass(clock: FakeClock, periods: int = 5) -> None:
    """Let ``periods`` timer periods pass on the silo's clock."""
    await clock.run_for(periods * PERIOD)


async def run_until(clock: FakeClock, condition, limit: int = 1000) -> None:
    """Advance the clock period by period until ``condition()`` holds."""
    for _ in range(limit):
        if condition():
            return
        await clock.run_for(PERIOD)
    raise AssertionError(f"condition not met within {limit} timer periods")


async def fake_silo(make_silo, *grains, **options):
    clock = FakeClock()
    return await make_silo(*grains, clock=clock, **options), clock


async def test_timer_fires_repeatedly(make_silo, probe):
    silo, clock = await fake_silo(make_silo, Ticker)
    ref = silo.get_grain(Ticker, "t")

    await ref.start()
    await run_until(clock, lambda: len(ticks_of(probe.log, "t")) >= 3)
    await ref.stop()

    assert ticks_of(probe.log, "t")[:3] == [1, 2, 3]


async def test_timer_without_period_fires_once(make_silo, probe):
    silo, clock = await fake_silo(make_silo, Ticker)
    ref = silo.get_grain(Ticker, "once")

    await ref.start(period=None)
    await run_until(clock, lambda: ("tick-end", "once", 1) in probe.log)
    await let_time_pass(clock)

    assert ticks_of(probe.log, "once") == [1]
    assert await ref.timer_disposed() is True


async def test_timer_stops_after_dispose(make_silo, probe):
    silo, clock = await fake_silo(make_silo, Ticker)
    ref = silo.get_grain(Ticker, "t")
    await ref.start()
    await run_until(clock, lambda: len(ticks_of(probe.log, "t")) >= 2)

    await ref.stop()
    fired = len(ticks_of(probe.log, "t"))
    await let_time_pass(clock)

    assert len(ticks_of(probe.log, "t")) == fired


async def test_timer_ticks_never_overlap_when_callback_outlasts_period(make_silo, probe):
    silo, clock = await fake_silo(make_silo, Ticker)
    ref = silo.get_grain(Ticker, "slow")

    # interleave=True: only the timer itself can keep its ticks apart
    await ref.start(interleave=True, slow=5 * PERIOD)
    await run_until(clock, lambda: len(ticks_of(probe.log, "slow")) >= 3)
    await ref.stop()

    events = [e for e in probe.log if e[1] == "slow"]
    kinds = [e[0] for e in events]
    assert kinds == ["tick-start", "tick-end"] * (len(kinds) // 2)
    assert [e[2] for e in events] == [n for n in range(1, len(kinds) // 2 + 1) for _ in (0, 1)]


async def test_timer_keeps_firing_after_callback_raises(make_silo, probe):
    silo, clock = await fake_silo(make_silo, Ticker)
    ref = silo.get_grain(Ticker, "failing")

    await ref.start(fail=True)
    await run_until(clock, lambda: len(ticks_of(probe.log, "failing")) >= 3)
    await ref.stop()

    assert ticks_of(probe.log, "failing")[:3] == [1, 2, 3]


async def test_timer_tick_waits_for_running_request(make_silo, probe):
    silo, clock = await fake_silo(make_silo, Ticker)
    ref = silo.get_grain(Ticker, "t")
    request = asyncio.create_task(ref.start_then_block(False))
    await probe.wait_logged("request-start", "t")
    act = silo.catalog.get(ref.grain_id)

    await run_until(clock, lambda: act.statistics().queued == 1)  # the tick is due and waits
    assert ticks_of(probe.log, "t", "tick-start") == []
    probe.open("request")
    async with asyncio.timeout(WAIT):
        await request
    await run_until(clock, lambda: ("tick-end", "t", 1) in probe.log)

    assert probe.log.index(("request-end", "t")) < probe.log.index(("tick-start", "t", 1))


async def test_timer_interleave_tick_runs_during_running_request(make_silo, probe):
    silo, clock = await fake_silo(make_silo, Ticker)
    ref = silo.get_grain(Ticker, "t")
    request = asyncio.create_task(ref.start_then_block(True))

    await run_until(clock, lambda: ("tick-end", "t", 1) in probe.log)

    assert not request.done()
    assert ("request-end", "t") not in probe.log
    probe.open("request")
    async with asyncio.timeout(WAIT):
        await request


async def test_timer_request_waits_for_running_tick(make_silo, probe):
    silo, clock = await fake_silo(make_silo, Ticker)
    ref = silo.get_grain(Ticker, "t")
    await ref.start(due=0.0, period=None, gated=True)
    await run_until(clock, lambda: ("tick-start", "t", 1) in probe.log)

    request = asyncio.create_task(ref.request())
    act = silo.catalog.get(ref.grain_id)
    await run_until(clock, lambda: act.statistics().queued == 1)
    assert ("request", "t") not in probe.log

    probe.open("tick-t")
    async with asyncio.timeout(WAIT):
        await request
    assert probe.log.index(("tick-end", "t", 1)) < probe.log.index(("request", "t"))


async def test_timer_stops_on_deactivation(make_silo, probe):
    silo, clock = await fake_silo(make_silo, Ticker)
    ref = silo.get_grain(Ticker, "t")
    await ref.start()
    await run_until(clock, lambda: len(ticks_of(probe.log, "t")) >= 2)
    act = silo.catalog.get(ref.grain_id)
    timer = act.grain.timer

    await ref.leave()
    async with asyncio.timeout(WAIT):
        await act.wait_deactivated()
    fired = len(ticks_of(probe.log, "t", "tick-start"))
    await let_time_pass(clock)

    assert timer.disposed
    assert len(ticks_of(probe.log, "t", "tick-start")) == fired
    assert silo.catalog.get(ref.grain_id) is None  # no stray tick re-activated the grain


@pytest.mark.parametrize("keep_alive", [False, True])
async def test_timer_keeps_grain_alive_only_when_asked(make_silo, probe, keep_alive):
    clock = FakeClock()
    # The collector's own round (same clock) stays out of the way: the test collects.
    silo = await make_silo(Ticker, clock=clock, collection_age=60.0,
                           collection_quantum=1_000_000.0)
    ref = silo.get_grain(Ticker, "t")
    await ref.start(keep_alive=keep_alive)
    await clock.run_for(3 * PERIOD)  # timers run on the silo's clock
    await run_until(clock, lambda: len(ticks_of(probe.log, "t")) >= 2)
    act = silo.catalog.get(ref.grain_id)

    clock.advance(61.0)
    seen = len(ticks_of(probe.log, "t"))
    await clock.run_for(2 * PERIOD)
    await probe.wait_for(lambda log: len(ticks_of(log, "t")) > seen)  # a tick after the jump
    collected = silo.collector.collect_once()

    if keep_alive:
        assert collected == 0
        assert silo.catalog.get(ref.grain_id) is act
        await ref.stop()
    else:
        assert collected == 1
        async with asyncio.timeout(WAIT):
            await act.wait_deactivated()
        assert silo.catalog.get(ref.grain_id) is None


async def test_timer_registered_in_failed_activation_is_disposed(make_silo, probe):
    silo, clock = await fake_silo(make_silo, Ticker, DoomedTicker)
    with pytest.raises(ActivationFailedError):
        await silo.get_grain(DoomedTicker, "d").ping()
    (timer,) = [e[1] for e in probe.log if e[0] == "timer"]

    await let_time_pass(clock)

    assert timer.disposed
    assert timer.ticks == 0


class Changer(Grain):
    """A timer whose callback may change it (``plan``: tick number -> (due, period))."""

    def __init__(self) -> None:
        self.timer = None
        self.plan: dict[int, tuple[float, float | None]] = {}
        self.gated = False

    async def start(self, due: float, period: float | None,
                    plan: dict[int, tuple[float, float | None]] | None = None,
                    gated: bool = False) -> None:
        self.plan, self.gated = plan or {}, gated
        self.timer = self.register_timer(self._tick, due, period, interleave=gated)

    async def _tick(self) -> None:
        probe, clock = self.silo.probe, self.silo.clock
        n = self.timer.ticks + 1
        probe.record(("tick", self.key, n, clock.monotonic()))
        if self.gated:
            await probe.gate(f"tick-{self.key}").wait()
        if n in self.plan:
            self.timer.change(*self.plan[n])

    @always_interleave
    async def change(self, due: float, period: float | None) -> float:
        self.timer.change(due, period)
        return float(self.silo.clock.monotonic())

    async def disposed(self) -> bool:
        return bool(self.timer.disposed)


def tick_times(log: list, key: str) -> list[float]:
    return [e[3] for e in log if e[0] == "tick" and e[1] == key]


async def test_timer_change_from_outside_reschedules_from_the_change(make_silo, probe):
    silo, clock = await fake_silo(make_silo, Changer)
    ref = silo.get_grain(Changer, "c")
    t0 = clock.monotonic()
    await ref.start(100.0, 100.0)
    await clock.run_for(10.0)

    changed = await ref.change(3.0, 5.0)
    await clock.run_for(14.0)

    assert changed == t0 + 10.0
    assert tick_times(probe.log, "c") == [changed + 3.0, changed + 8.0, changed + 13.0]


async def test_timer_change_inside_callback_counts_from_the_tick_end(make_silo, probe):
    silo, clock = await fake_silo(make_silo, Changer)
    ref = silo.get_grain(Changer, "c")
    t0 = clock.monotonic()

    await ref.start(1.0, 1.0, plan={2: (4.0, 2.0)})
    await clock.run_for(11.0)

    # ticks at 1 and 2 (period 1); the change in tick 2 gives 2+4, then every 2
    assert tick_times(probe.log, "c") == [t0 + 1, t0 + 2, t0 + 6, t0 + 8, t0 + 10]


async def test_timer_change_while_a_tick_runs_waits_for_it(make_silo, probe):
    silo, clock = await fake_silo(make_silo, Changer)
    ref = silo.get_grain(Changer, "c")
    t0 = clock.monotonic()
    await ref.start(1.0, 1.0, gated=True)
    await run_until(clock, lambda: len(tick_times(probe.log, "c")) == 1)
    await clock.run_for(5.0)  # the tick holds: no second tick, whatever the period

    await ref.change(2.0, 3.0)  # the tick is in flight: applies when it completes
    await clock.run_for(1.5)
    probe.open("tick-c")
    await clock.run_for(0.0)
    ended = clock.monotonic()
    await clock.run_for(5.5)

    assert tick_times(probe.log, "c") == [t0 + 1, ended + 2.0, ended + 5.0]


async def test_timer_one_shot_can_rearm_itself_and_become_periodic(make_silo, probe):
    silo, clock = await fake_silo(make_silo, Changer)
    ref = silo.get_grain(Changer, "c")
    t0 = clock.monotonic()

    await ref.start(1.0, None, plan={1: (2.0, None), 2: (1.0, 3.0)})
    await clock.run_for(10.0)

    assert tick_times(probe.log, "c") == [t0 + 1, t0 + 3, t0 + 4, t0 + 7, t0 + 10]
    assert await ref.disposed() is False


async def test_timer_change_to_one_shot_fires_once_then_disposes(make_silo, probe):
    silo, clock = await fake_silo(make_silo, Changer)
    ref = silo.get_grain(Changer, "c")
    await ref.start(1.0, 1.0)
    await clock.run_for(1.5)

    changed = await ref.change(2.0, None)
    await clock.run_for(10.0)

    assert tick_times(probe.log, "c")[1:] == [changed + 2.0]
    assert await ref.disposed() is True


@pytest.mark.parametrize(("due", "period"), [(-1.0, 1.0), (1.0, 0.0), (1.0, -2.0)])
async def test_timer_change_refuses_bad_arguments(make_silo, probe, due, period):
    silo, clock = await fake_silo(make_silo, Changer)
    ref = silo.get_grain(Changer, "c")
    await ref.start(1.0, 1.0)

    with pytest.raises(ValueError, match=r"change\(.*need due >= 0 and period > 0"):
        await ref.change(due, period)
    await clock.run_for(2.5)  # the timer goes on as it was
    assert len(tick_times(probe.log, "c")) == 2


async def test_timer_change_of_a_disposed_timer_raises(make_silo, probe):
    silo, clock = await fake_silo(make_silo, Changer)
    ref = silo.get_grain(Changer, "c")
    await ref.start(1.0, None)
    await clock.run_for(2.0)
    assert await ref.disposed() is True

    with pytest.raises(RuntimeError, match=r"is disposed.*register a new timer"):
        await ref.change(1.0, None)
    await clock.run_for(5.0)
    assert len(tick_times(probe.log, "c")) == 1
