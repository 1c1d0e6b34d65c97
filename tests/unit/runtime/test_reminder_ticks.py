"""Reminder ticks: outside the registering turn's call chain, and a due of zero fires now.

Bounded by ``asyncio.timeout`` (or a call timeout where the failure would be a hang);
waits on probe events and runtime state, never on sleeps.
"""

from __future__ import annotations

import asyncio
from typing import Any

from orleanspy import (
    Grain,
)

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

    async def receive_reminder(self, name: str, status: Any) -> None:
        self.silo.probe.record(("reminder", name))


# A reminder tick is not part of the registering turn's call chain
async def test_reminder_tick_is_not_a_deadlock_with_the_registering_turn(make_silo, probe):
    silo = await make_silo(ReminderHolder, minimum_reminder_period=1.0)
    rec = LogRecorder(silo.log)
    silo.log = rec
    ref = silo.get_grain(ReminderHolder, "a")
    call = asyncio.create_task(ref.hold_after_register())
    async with asyncio.timeout(WAIT):
        await probe.wait_logged("registered")
        act = silo.catalog.get(ref.grain_id)
        await probe.until(
            lambda: "reminder_delivery_failed" in rec.events or len(act.waiting) == 1
        )
        assert "reminder_delivery_failed" not in rec.events
        probe.open("reminder")
        assert await call == "done"
        await probe.wait_logged(("reminder", "r"))


async def test_reminder_with_due_zero_fires_now(make_silo, probe):
    silo = await make_silo(ReminderHolder, minimum_reminder_period=1.0)
    ref = silo.get_grain(ReminderHolder, "a")
    async with asyncio.timeout(WAIT):
        await ref.register_due_now()
    loop = asyncio.get_running_loop()
    (handle,) = silo.reminders._handles.values()
    assert handle.when() - loop.time() < 1.0  # not 1000 s from now
