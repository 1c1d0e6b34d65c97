"""MembershipSnapshot: a silo's view of the cluster, and the publisher its consumers wait on.

Consumers (grain directory, placement, queue balancers, connections, the dashboard) read
``service.snapshot`` without waiting, or follow ``service.updates()``: an async iterator of
snapshots with strictly increasing versions. A consumer slower than the changes skips the
intermediate snapshots and gets the newest one, which always holds the complete picture.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, final

from orleanspy._util.clock import Clock
from orleanspy._util.tasks import TaskSet
from orleanspy.cluster.membership.entry import MembershipEntry, MembershipTableData, SiloStatus
from orleanspy.ids import SiloAddress

__all__ = ["Listener", "MembershipSnapshot", "SiloStatusChange", "SnapshotPublisher"]


@dataclass(frozen=True, slots=True)
class SiloStatusChange:
    """``silo`` went from ``previous`` (None: unknown before) to ``current``."""

    silo: SiloAddress
    previous: SiloStatus | None
    current: SiloStatus


def _silo_order(silo: SiloAddress) -> tuple[str, int, int]:
    return (silo.host, silo.port, silo.generation)


@final
@dataclass(frozen=True, slots=True)
class MembershipSnapshot:
    """The rows of the table at ``version`` (-1: nothing read yet), keyed by silo."""

    version: int
    entries: Mapping[SiloAddress, MembershipEntry]

    @classmethod
    def empty(cls) -> MembershipSnapshot:
        return cls(-1, MappingProxyType({}))

    @classmethod
    def from_table(cls, data: MembershipTableData) -> MembershipSnapshot:
        return cls(data.version.version, MappingProxyType({e.silo: e for e in data.entries()}))

    def status_of(self, silo: SiloAddress) -> SiloStatus | None:
        """The status of ``silo``, or None if it has no row."""
        entry = self.entries.get(silo)
        return None if entry is None else entry.status

    def silos(self, *statuses: SiloStatus) -> tuple[SiloAddress, ...]:
        """The silos in any of ``statuses``, sorted by (host, port, generation)."""
        wanted = frozenset(statuses)
        return tuple(
            sorted((s for s, e in self.entries.items() if e.status in wanted), key=_silo_order)
        )

    @property
    def active_silos(self) -> tuple[SiloAddress, ...]:
        """Silos that take work (ACTIVE), sorted: the input of directory and balancers."""
        return self.silos(SiloStatus.ACTIVE)

    def changes_since(self, previous: MembershipSnapshot) -> tuple[SiloStatusChange, ...]:
        """Status changes from ``previous`` to this snapshot, sorted by silo.

        A row deleted by the defunct-row cleanup is not a change (it was DEAD already).
        """
        changes = []
        for silo, entry in self.entries.items():
            before = previous.status_of(silo)
            if before is not entry.status:
                changes.append(SiloStatusChange(silo, before, entry.status))
        changes.sort(key=lambda change: _silo_order(change.silo))
        return tuple(changes)


Listener = Callable[[MembershipSnapshot], Awaitable[None]]


@final
class SnapshotPublisher:
    """Holds the current snapshot and wakes whoever waits for a newer one; runs listeners.

    Args:
        log: where a failing listener is reported.
    """

    __slots__ = ("_changed", "_closed", "_listeners", "_log", "_snapshot")

    def __init__(self, log: Any = None) -> None:
        self._snapshot = MembershipSnapshot.empty()
        self._changed = asyncio.Event()
        self._closed = False
        self._log = log
        self._listeners = TaskSet()

    @property
    def current(self) -> MembershipSnapshot:
        return self._snapshot

    @property
    def closed(self) -> bool:
        return self._closed

    def publish(self, snapshot: MembershipSnapshot) -> bool:
        """Make ``snapshot`` current; True if its version is newer (waiters are woken).

        A snapshot of the same version replaces the current one silently (it differs only in
        I-am-alive times); an older one is ignored.
        """
        current = self._snapshot
        if snapshot.version < current.version or self._closed:
            return False
        self._snapshot = snapshot
        if snapshot.version == current.version:
            return False
        self._wake()
        return True

    def close(self) -> None:
        """End every ``updates()`` iterator after it has seen the current snapshot."""
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def updates(self) -> AsyncGenerator[MembershipSnapshot, None]:
        """Yield the current snapshot (if any was read), then each newer one."""
        last = -1
        while True:
            snapshot = self._snapshot
            if snapshot.version > last:
                last = snapshot.version
                yield snapshot
                continue
            if self._closed:
                return
            await self._changed.wait()

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call ``await listener(snapshot)`` for the current and every newer snapshot, one
        call at a time, in version order. Returns a function that removes the listener.

        A listener that raises is logged and keeps receiving.
        """
        task = self._listeners.spawn(self._deliver(listener))

        def remove() -> None:
            task.cancel()

        return remove

    async def _deliver(self, listener: Listener) -> None:
        async with contextlib.aclosing(self.updates()) as snapshots:
            async for snapshot in snapshots:
                try:
                    await listener(snapshot)
                except Exception as exc:
                    if self._log is not None:
                        self._log.error("membership_listener_failed", listener=repr(listener),
                                        version=snapshot.version, error=repr(exc))

    async def cancel_listeners(self) -> None:
        """Cancel the listeners (not the calling task) and wait for them. Listeners may
        still be added afterwards (after ``close`` they end at once)."""
        current = asyncio.current_task()
        for task in self._listeners:
            if task is not current:
                task.cancel()
        await self._listeners.wait()

    async def wait_for(
        self, predicate: Callable[[MembershipSnapshot], bool], clock: Clock,
        timeout: float | None = None,
    ) -> MembershipSnapshot | None:
        """The first snapshot (current or newer) for which ``predicate`` holds, or None if
        the publisher closed first.

        Raises:
            TimeoutError: after ``timeout`` seconds of ``clock``.
        """
        async with clock.timeout(timeout), contextlib.aclosing(self.updates()) as snapshots:
            async for snapshot in snapshots:
                if predicate(snapshot):
                    return snapshot
        return None
