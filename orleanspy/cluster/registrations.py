"""DirectoryRegistrations: this silo's activations in the grain directory.

An activation registers before ``on_activate`` (register-if-absent: a loser learns the
winner's silo and must not run) and leaves the directory when the catalog drops it. When
the ring moves, entries this silo no longer owns are handed to their new owners, and the
activations whose owner changed register again (a duplicate found then is deactivated).
"""

from __future__ import annotations

import asyncio
import itertools
from functools import partial
from typing import Any, Final, final

from orleanspy._util.tasks import TaskSet
from orleanspy.cluster.directory import DirectoryEntry, DirectoryRing, GrainDirectory
from orleanspy.grains.host import ActivationHandle, DeactivationReason
from orleanspy.ids import GrainId, SiloAddress
from orleanspy.runtime.host import SiloHost
from orleanspy.runtime.identity import SiloIdentity

__all__ = ["UNREGISTER_WAIT", "DirectoryRegistrations"]

#: How long a graceful stop waits for its activations' unregistrations.
UNREGISTER_WAIT: Final = 5.0


@final
class DirectoryRegistrations:
    """The directory entries of this silo's activations.

    Args:
        silo: the silo (its logger and clock).
        identity: this silo's address.
        directory: the grain directory.
        tasks: the cluster runtime's background tasks (cancelled when it stops).
    """

    def __init__(self, silo: SiloHost, identity: SiloIdentity, directory: GrainDirectory,
                 tasks: TaskSet) -> None:
        self._silo = silo
        self._identity = identity
        self._directory = directory
        self._tasks = tasks
        #: this silo's registered activations and their entries
        self.registered: dict[GrainId, tuple[ActivationHandle, DirectoryEntry]] = {}
        self._unregistering: set[asyncio.Task[Any]] = set()
        #: the unregistration in flight of a grain whose activation here just went away
        self.unregistering_of: dict[GrainId, asyncio.Task[Any]] = {}
        self._activation_ids = itertools.count(1)
        self.stopping = False
        self.duplicates = 0

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        return task

    async def register(self, act: ActivationHandle) -> SiloAddress | None:
        """Register a new activation; None if it is the grain's one activation, else the
        silo of the activation that won (this one must not run)."""
        gid = act.grain_id
        me = self._identity.address
        directory = self._directory
        entry = DirectoryEntry(me, next(self._activation_ids))
        winner = await directory.register(gid, entry)
        if winner != entry and winner.silo == me:
            live = self.registered.get(gid)
            if live is None or live[1] != winner:
                # A leftover of this silo's earlier activation (its unregistration is on its
                # way): take its place.
                await directory.unregister(gid, winner)
                winner = await directory.register(gid, entry)
        if winner == entry:
            self.registered[gid] = (act, entry)
            return None
        self.duplicates += 1
        directory.cache.put(gid, winner.silo)
        return winner.silo

    def removed(self, act: ActivationHandle) -> None:
        """The catalog dropped ``act``: remove its directory entry (in the background)."""
        gid = act.grain_id
        item = self.registered.get(gid)
        if item is None or item[0] is not act:
            return
        del self.registered[gid]
        task = self._spawn(self._unregister(gid, item[1]))
        self._unregistering.add(task)
        self.unregistering_of[gid] = task
        task.add_done_callback(self._unregistering.discard)
        task.add_done_callback(partial(self._unregistered, gid))

    def _unregistered(self, gid: GrainId, task: asyncio.Task[Any]) -> None:
        if self.unregistering_of.get(gid) is task:
            del self.unregistering_of[gid]

    async def _unregister(self, gid: GrainId, entry: DirectoryEntry) -> None:
        try:
            await self._directory.unregister(gid, entry)
        except Exception as exc:  # the entry dies with this silo's row anyway
            self._silo.log.debug("directory_unregister_failed", grain=str(gid),
                                 error=repr(exc))

    async def wait_unregistered(self) -> None:
        """Wait (at most ``UNREGISTER_WAIT``) for the unregistrations in flight."""
        if self._unregistering:
            try:
                async with self._silo.clock.timeout(UNREGISTER_WAIT):
                    await asyncio.wait(list(self._unregistering))
            except TimeoutError:
                pass

    def ring_moved(self, old_ring: DirectoryRing,
                   moved: list[tuple[GrainId, DirectoryEntry]]) -> None:
        """The ring changed: hand over the entries this silo no longer owns, and register
        again the activations whose owner changed."""
        if moved:
            self._spawn(self._hand_over(moved))
        ring = self._directory.ring
        changed = [
            (gid, act, entry) for gid, (act, entry) in self.registered.items()
            if old_ring.owner(gid) != ring.owner(gid)
        ]
        if changed:
            self._spawn(self._reregister(changed))

    async def _hand_over(self, moved: list[tuple[GrainId, DirectoryEntry]]) -> None:
        """Give entries this silo no longer owns to their new owners (register-if-absent)."""
        for gid, entry in moved:
            if self.stopping:
                return
            try:
                await self._directory.register(gid, entry)
            except Exception as exc:  # the holder re-registers anyway
                self._silo.log.debug("directory_handover_failed", grain=str(gid),
                                     error=repr(exc))

    async def _reregister(
        self, items: list[tuple[GrainId, ActivationHandle, DirectoryEntry]]
    ) -> None:
        directory = self._directory
        for gid, act, entry in items:
            if self.stopping:
                return
            try:
                winner = await directory.register(gid, entry)
            except Exception as exc:
                self._silo.log.warning("directory_reregister_failed", grain=str(gid),
                                       error=repr(exc))
                continue
            if winner != entry and self.registered.get(gid, (None,))[0] is act:
                # Another activation registered while the owner changed: it wins.
                self.duplicates += 1
                self._silo.log.warning("duplicate_activation_deactivated", grain=str(gid),
                                       winner=str(winner.silo))
                del self.registered[gid]
                directory.cache.put(gid, winner.silo)
                act.deactivate(DeactivationReason.DUPLICATE)
