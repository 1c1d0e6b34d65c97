"""ClusterView: the membership view a silo routes by, and what it says of each silo.

The cluster runtime applies each new ``MembershipSnapshot`` (``ClusterRuntime.apply``); the
transport asks the view whether a peer is dead or may connect, the directory whether a
silo's entries still count, and tests and tools wait for a view they expect.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol, final

from orleanspy._util.clock import Clock
from orleanspy.cluster.membership.snapshot import MembershipSnapshot
from orleanspy.cluster.membership.table import MembershipTable
from orleanspy.ids import SiloAddress
from orleanspy.runtime.identity import SiloIdentity

__all__ = ["ClusterView"]


class _Host(Protocol):
    @property
    def declared_dead(self) -> bool: ...

    @property
    def clock(self) -> Clock: ...


@final
class ClusterView:
    """The latest membership snapshot of one silo, and waiting for the next.

    Args:
        silo: the silo (whether the cluster declared it dead; its clock).
        identity: this silo's address.
        table: the membership table (asked about a connecting silo the view does not list).
    """

    def __init__(self, silo: _Host, identity: SiloIdentity, table: MembershipTable) -> None:
        self._silo = silo
        self._identity = identity
        self._table = table
        self.snapshot = MembershipSnapshot.empty()
        self._changed = asyncio.Condition()
        self._listeners: list[Callable[[], None]] = []

    def is_dead(self, silo: SiloAddress) -> bool:
        status = self.snapshot.status_of(silo)
        return status is not None and status.is_gone

    def valid(self, silo: SiloAddress) -> bool:
        """Do entries on ``silo`` still count? Until it is dead: a silo that is shutting
        down keeps serving the grains it hosts until each has deactivated and unregistered,
        so a second activation never starts beside one still finishing its requests."""
        if silo == self._identity.address:
            return not self._silo.declared_dead
        status = self.snapshot.status_of(silo)
        return status is None or not status.is_gone

    async def verify_peer(self, peer: SiloAddress) -> str | None:
        """None if ``peer`` may connect: membership lists that silo and generation, not dead."""
        status = self.snapshot.status_of(peer)
        if status is None:
            row = (await self._table.read_row(peer)).get(peer)
            status = row[0].status if row is not None else None
        if status is None:
            return (f"silo {peer} is not in the membership table of cluster "
                    f"{self._identity.cluster_id!r}")
        if status.is_gone:
            return f"silo {peer} is {status.value}"
        return None

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after each change of the view (the directory ring moved)."""
        self._listeners.append(listener)

    def changed(self) -> None:
        """The view moved on (``snapshot`` is the new one): tell the listeners."""
        for listener in self._listeners:
            listener()

    async def notify(self) -> None:
        """Wake whoever waits in ``wait_for``."""
        async with self._changed:
            self._changed.notify_all()

    async def wait_for(
        self, predicate: Callable[[MembershipSnapshot], bool], timeout: float | None = None
    ) -> MembershipSnapshot:
        """Wait until the view satisfies ``predicate``. Raises TimeoutError after
        ``timeout`` seconds."""
        async with self._silo.clock.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: predicate(self.snapshot))
        return self.snapshot
