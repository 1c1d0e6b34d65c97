"""ReminderService: schedules the durable reminders of the grains this silo owns.

On start it reads the reminder table and schedules every row, so reminders registered
before a restart fire again. A tick calls the grain's ``receive_reminder(name, status)``
through the ordinary call path, which activates the grain if needed. Like Orleans, ticks
missed while no silo ran are not replayed: the next tick is the next multiple of the period.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
from dataclasses import dataclass

from orleanspy._util.clock import TimerHandle
from orleanspy._util.tasks import TaskSet
from orleanspy.errors import ConfigurationError
from orleanspy.grains.host import ReminderOwner
from orleanspy.ids import GrainId
from orleanspy.reminders.base import ReminderEntry, ReminderTable
from orleanspy.runtime.dispatcher import Dispatcher
from orleanspy.runtime.host import SiloHost

__all__ = ["ReminderService", "TickStatus"]


@dataclass(frozen=True, slots=True)
class TickStatus:
    """Passed to ``receive_reminder``: when the reminder started, its period, this tick."""

    first_tick: float
    period: float
    current_tick: float


class ReminderService:
    """Owns the timers of durable reminders on one silo."""

    def __init__(self, silo: SiloHost, dispatcher: Dispatcher, table: ReminderTable) -> None:
        """``silo``: its clock, options, logger and status; ``dispatcher``: delivers the
        ticks through the ordinary call path; ``table``: where reminders are kept."""
        self._silo = silo
        self._dispatcher = dispatcher
        self.table = table
        self._handles: dict[tuple[GrainId, str], TimerHandle] = {}
        self._entries: dict[tuple[GrainId, str], ReminderEntry] = {}
        self._tasks = TaskSet()  # reminder deliveries in flight
        self.fired = 0

    async def start(self) -> None:
        for entry in await self.table.read_all():
            self._schedule(entry)
        if self._entries:
            self._silo.log.info("reminders_loaded", count=len(self._entries))

    async def stop(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()
        await self._tasks.close()

    async def register(
        self, grain: ReminderOwner, name: str, due: float, period: float
    ) -> ReminderEntry:
        minimum = self._silo.options.minimum_reminder_period
        if period < minimum:
            raise ConfigurationError(
                f"register_reminder({name!r}, period={period}): the period must be >= "
                f"{minimum} s (SiloOptions.minimum_reminder_period); use a timer for "
                "shorter intervals"
            )
        if due < 0:
            raise ValueError(f"register_reminder({name!r}, due={due}): due must be >= 0")
        if not hasattr(grain, "receive_reminder"):
            raise TypeError(
                f"{type(grain).__name__} registers reminder {name!r} but has no "
                "'async def receive_reminder(self, name, status)' method"
            )
        entry = ReminderEntry(grain.grain_id, name, self._silo.clock.time() + due, period)
        etag = await self.table.upsert(entry)
        entry = ReminderEntry(entry.grain_id, name, entry.start_at, period, etag)
        self._schedule(entry, first=True)
        return entry

    async def unregister(self, grain_id: GrainId, name: str) -> bool:
        key = (grain_id, name)
        handle = self._handles.pop(key, None)
        if handle is not None:
            handle.cancel()
        self._entries.pop(key, None)
        return await self.table.remove(grain_id, name, None)

    async def list(self, grain_id: GrainId) -> list[ReminderEntry]:
        return await self.table.read_rows(grain_id)

    def _schedule(self, entry: ReminderEntry, first: bool = False,
                  after: float | None = None) -> None:
        """Arm the next tick: at or after now, and later than ``after`` (the tick that just
        fired, which must not fire again when the clock has not moved)."""
        key = (entry.grain_id, entry.name)
        old = self._handles.pop(key, None)
        if old is not None:
            old.cancel()
        self._entries[key] = entry
        now = self._silo.clock.time()
        if first or (now <= entry.start_at and (after is None or after < entry.start_at)):
            at = entry.start_at  # a new reminder fires at its due time, even if just passed
        else:
            ref = now if after is None else max(now, after)
            k = math.ceil((ref - entry.start_at) / entry.period)
            at = entry.start_at + k * entry.period
            if after is not None and at <= after:
                at += entry.period
        self._handles[key] = self._silo.clock.call_later(max(0.0, at - now), self._fire, key, at)

    def _fire(self, key: tuple[GrainId, str], at: float) -> None:
        self._handles.pop(key, None)
        entry = self._entries.get(key)
        if entry is None:
            return
        # An empty context: a tick is not part of the turn that registered it (no call chain).
        task = asyncio.get_running_loop().create_task(
            self._deliver(entry, at), context=contextvars.Context()
        )
        self._tasks.add(task)

    async def _deliver(self, entry: ReminderEntry, at: float) -> None:
        status = TickStatus(entry.start_at, entry.period, at)
        try:
            await self._dispatcher.call(
                entry.grain_id, "receive_reminder", (entry.name, status), None, None
            )
            self.fired += 1
        except Exception as exc:
            self._silo.log.warning(
                "reminder_delivery_failed", grain=str(entry.grain_id), reminder=entry.name,
                error=repr(exc),
            )
        key = (entry.grain_id, entry.name)
        if self._entries.get(key) is entry and not self._silo.stopping:
            self._schedule(entry, after=at)
