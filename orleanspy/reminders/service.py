"""ReminderService: schedules the durable reminders of the grains this silo owns.

A lone silo serves every row of its reminder table. In a cluster (``follow``) each reminder
is served by exactly one active silo: the owner of its grain on the directory's hash ring,
as Orleans' reminder service owns a range of the ring. The table is the source of truth: a
silo schedules the rows it owns when it starts, again whenever the membership view changes
(taking the rows it gained, dropping the ones it lost), and every ``refresh_period``; a
``register`` or ``unregister`` on a silo that is not the owner writes the table and tells
the owner at once, so the change takes effect there without waiting for a refresh.

A tick calls the grain's ``receive_reminder(name, status)`` through the ordinary call path,
which activates the grain if needed. Like Orleans, ticks missed while no silo ran are not
replayed: the next tick is the next multiple of the period. A silo that takes a reminder
over from another schedules its next tick strictly after the moment it took it, so the tick
the previous owner may just have fired is not fired again.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

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

    def __init__(
        self, silo: SiloHost, dispatcher: Dispatcher, table: ReminderTable, *,
        owns: Callable[[GrainId], bool] | None = None,
        notify: Callable[[GrainId], Awaitable[Any]] | None = None,
        refresh_period: float = 0.0,
    ) -> None:
        """``silo``: its clock, options, logger and status; ``dispatcher``: delivers the
        ticks through the ordinary call path; ``table``: where reminders are kept.

        In a cluster, ``owns``: the silo serves only the reminders of the grains it owns;
        ``notify(grain_id)`` tells that grain's owner its reminders changed; the table is
        read again every ``refresh_period`` seconds and on ``membership_changed``. None:
        a lone silo serves every reminder of the table."""
        self._silo = silo
        self._dispatcher = dispatcher
        self.table = table
        self._handles: dict[tuple[GrainId, str], TimerHandle] = {}
        self._entries: dict[tuple[GrainId, str], ReminderEntry] = {}
        self._tasks = TaskSet()  # reminder deliveries in flight
        self._loops = TaskSet(on_error=self._loop_failed)  # refreshes
        self._owns = owns
        self._notify = notify
        self._refresh_period = refresh_period
        self._reconcile_wanted: asyncio.Event | None = None
        self.fired = 0

    async def start(self) -> None:
        if self._owns is None:
            for entry in await self.table.read_all():
                self._schedule(entry)
        else:
            await self.reconcile()
            self._reconcile_wanted = asyncio.Event()
            self._loops.spawn(self._refresh_loop(), name="reminder-refresh")
        if self._entries:
            self._silo.log.info("reminders_loaded", count=len(self._entries))

    async def stop(self) -> None:
        self._owns = lambda grain_id: False  # a late reconcile schedules nothing
        await self._loops.close()
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()
        self._entries.clear()
        await self._tasks.close()

    def membership_changed(self) -> None:
        """The ring changed: take the reminders gained and drop the ones lost, soon."""
        if self._reconcile_wanted is not None:
            self._reconcile_wanted.set()

    async def _refresh_loop(self) -> None:
        wanted = self._reconcile_wanted
        assert wanted is not None
        clock = self._silo.clock
        while True:
            try:
                async with clock.timeout(self._refresh_period):
                    await wanted.wait()
            except TimeoutError:
                pass
            wanted.clear()
            try:
                await self.reconcile()
            except Exception as exc:  # the table is unreachable: keep what is scheduled
                self._silo.log.warning("reminder_refresh_failed", error=repr(exc))

    def _loop_failed(self, task: asyncio.Task[Any], exc: BaseException) -> None:
        self._silo.log.error("reminder_refresh_loop_failed", error=repr(exc))

    async def reconcile(self) -> None:
        """Schedule every row this silo owns and nothing else (the table is the truth)."""
        rows = await self.table.read_all()
        owns = self._owns
        wanted = {(e.grain_id, e.name): e for e in rows if owns is None or owns(e.grain_id)}
        self._apply(wanted, lambda key: True)

    async def sync(self, grain_id: GrainId) -> None:
        """The reminders of ``grain_id`` changed elsewhere: serve them as the table says."""
        owns = self._owns
        rows = await self.table.read_rows(grain_id)
        mine = owns is None or owns(grain_id)
        wanted = {(e.grain_id, e.name): e for e in rows if mine}
        self._apply(wanted, lambda key: key[0] == grain_id)

    def _apply(self, wanted: dict[tuple[GrainId, str], ReminderEntry],
               scope: Callable[[tuple[GrainId, str]], bool]) -> None:
        for key in [k for k in self._entries if scope(k) and k not in wanted]:
            self._cancel(key)
        now = self._silo.clock.time()
        for key, entry in wanted.items():
            current = self._entries.get(key)
            if current is None:
                # Taken over (or found at start): never re-fire a tick that may just have
                # fired on the previous owner.
                self._schedule(entry, after=now)
            elif (current.etag, current.start_at, current.period) != (
                entry.etag, entry.start_at, entry.period
            ):
                self._schedule(entry, first=entry.start_at >= now)

    def _cancel(self, key: tuple[GrainId, str]) -> None:
        handle = self._handles.pop(key, None)
        if handle is not None:
            handle.cancel()
        self._entries.pop(key, None)

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
        if self._owns is None or self._owns(entry.grain_id):
            self._schedule(entry, first=True)
        else:
            self._cancel((entry.grain_id, name))
            await self._tell_owner(entry.grain_id)
        return entry

    async def unregister(self, grain_id: GrainId, name: str) -> bool:
        self._cancel((grain_id, name))
        removed = await self.table.remove(grain_id, name, None)
        if self._owns is not None and not self._owns(grain_id):
            await self._tell_owner(grain_id)
        return removed

    async def _tell_owner(self, grain_id: GrainId) -> None:
        notify = self._notify
        if notify is None:
            return
        try:
            await notify(grain_id)
        except Exception as exc:  # the owner's next refresh reads the table anyway
            self._silo.log.warning("reminder_owner_not_told", grain=str(grain_id),
                                   error=repr(exc))

    def scheduled(self, limit: int = 500) -> list[dict[str, Any]]:
        """The reminders this silo fires, soonest first (at most ``limit``): grain, name,
        period and next due time (epoch seconds)."""
        now = self._silo.clock.time()
        rows = []
        for (grain_id, name), e in self._entries.items():
            due = e.start_at if now <= e.start_at else (
                e.start_at + math.ceil((now - e.start_at) / e.period) * e.period)
            rows.append({"grain": str(grain_id), "name": name, "period": e.period,
                         "next_due": due})
        rows.sort(key=lambda r: (r["next_due"], r["grain"], r["name"]))
        return rows[:limit]

    @property
    def count(self) -> int:
        """Reminders this silo fires."""
        return len(self._entries)

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
        owns = self._owns
        if owns is not None and not owns(key[0]):  # the ring moved it away a moment ago
            self._entries.pop(key, None)
            return
        fence = self._silo.fence
        if fence is not None and fence():  # unsure it is still a member: skip this tick
            self._schedule(entry, after=at)
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
