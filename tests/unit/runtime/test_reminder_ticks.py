"""Reminder ticks: outside the registering turn's call chain, a due of zero fires now, and
ticks follow the silo's clock.

Bounded by ``asyncio.timeout``; reminders run on a ``FakeClock`` the tests advance.
"""

from __future__ import annotations

import asyncio
from typing import Any

from orleanspy import Grain
from orleanspy.testing import FakeClock

WAIT = 5.0


class LogRecorder:
    """Wraps a silo's structlog logger and remembers the event names it was given."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.events: list[str] = []

    def __getattr__(self, level: str) -> Any:
        fn = getattr(self.inner, level)

        def log(event: str, *args: Any, **kw: Any) -> Any:
            self.events.append(event)
            return fn(event, *args, **kw)

        return log


class ReminderHolder(Grain):
    async def hold_after_register(self) -> str:
        await self.register_reminder("r", 0.2, 1000)
        self.silo.probe.record("registered")
        await self.silo.probe.gate("reminder").wait()
        return "done"

    async def register_due_now(self) -> None:
        await self.register_reminder("now", 0, 1000)

    async def register_periodic(self) -> None:
        await self.register_reminder("periodic", 60, 60)

    async def receive_reminder(self, name: str, status: Any) -> None:
        self.silo.probe.record(("reminder", name))


# A reminder tick is not part of the registering turn's call chain
async def test_reminder_tick_is_not_a_deadlock_with_the_registering_turn(make_silo, probe):
    clock = FakeClock()
    silo = await make_silo(ReminderHolder, clock=clock, minimum_reminder_period=1.0)
    rec = LogRecorder(silo.log)
    silo.identity.log = rec
    ref = silo.get_grain(ReminderHolder, "a")
    call = asyncio.create_task(ref.hold_after_register())
    async with asyncio.timeout(WAIT):
        await probe.wait_logged("registered")
        # The reminder falls due while the registering turn runs (due 0.2 s in wall time:
        # a little slack for the float rounding of epoch seconds).
        await clock.run_for(0.25)
        act = silo.catalog.get(ref.grain_id)
        await probe.until(
            lambda: "reminder_delivery_failed" in rec.events or len(act.waiting) == 1
        )
        assert "reminder_delivery_failed" not in rec.events
        probe.open("reminder")
        assert await call == "done"
        await probe.wait_logged(("reminder", "r"))


async def test_reminder_with_due_zero_fires_now(make_silo, probe):
    clock = FakeClock()
    silo = await make_silo(ReminderHolder, clock=clock, minimum_reminder_period=1.0)
    ref = silo.get_grain(ReminderHolder, "a")
    async with asyncio.timeout(WAIT):
        await ref.register_due_now()
        await clock.run_for(0.0)  # no time passes: not 1000 s from now
        await probe.wait_logged(("reminder", "now"))


async def test_reminder_ticks_follow_the_silo_clock(make_silo, probe):
    clock = FakeClock()
    silo = await make_silo(ReminderHolder, clock=clock)
    ref = silo.get_grain(ReminderHolder, "p")
    async with asyncio.timeout(WAIT):
        await ref.register_periodic()
        await clock.run_for(59.0)
        assert ("reminder", "periodic") not in probe.log
        await clock.run_for(1.5)  # due at 60 s (epoch seconds: allow for their rounding)
        await probe.wait_for(lambda log: log.count(("reminder", "periodic")) == 1)
        await clock.run_for(60.0)
        await probe.wait_for(lambda log: log.count(("reminder", "periodic")) == 2)
    assert silo.statistics().reminders_fired == 2
