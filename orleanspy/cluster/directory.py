"""GrainDirectory: where the single activation of each grain lives, spread over the silos.

Where it sits: the dispatcher asks it where a grain lives before sending a request to a grain
that is not active on this silo; an activation registers in it before ``on_activate`` runs.

Rationale (Orleans' ``LocalGrainDirectory``):

* Partitioning. The active silos sit on a 32-bit ring (``VNODES`` points each, stable
  blake2b hashes, so every process computes the same ring); the *owner* of a grain is the silo
  of the first point at or after the grain's hash. The owner keeps the grain's entry
  ``(silo, activation id)`` in its partition. Lookups and registrations go to the owner over
  the transport (or stay local when this silo owns the grain).
* One activation per grain. Registration is *register-if-absent* at the owner: the first
  registration wins and every later one gets the winner back; the loser never runs
  ``on_activate`` and forwards its queued messages to the winner. An entry whose silo is dead
  or shutting down (in the owner's view) no longer counts and is replaced.
* Views differ for a moment after a membership change, so an owner that receives an operation
  for a grain it does not own (in its view) forwards it to the owner it computes (at most
  ``MAX_HOPS`` times). After each change every silo re-registers its activations whose owner
  changed: that restores the entries of a dead owner's partition, and if two activations were
  created meanwhile, the second registration loses and deactivates.
* Cache. Each silo caches grain -> silo for the grains it has looked up (bounded, oldest
  first out); entries of dead silos are dropped on each membership change, and a silo that
  forwards a message for a grain tells the sender where it really lives.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final, NamedTuple, final

from orleanspy._util.hashing import stable_hash32
from orleanspy.ids import GrainId, SiloAddress
from orleanspy.runtime.identity import SiloIdentity

__all__ = [
    "MAX_HOPS",
    "VNODES",
    "DirectoryCache",
    "DirectoryEntry",
    "DirectoryPartition",
    "DirectoryRing",
    "GrainDirectory",
    "grain_hash",
]

VNODES: Final = 16
MAX_HOPS: Final = 2
CACHE_SIZE: Final = 100_000


class DirectoryEntry(NamedTuple):
    """The activation of a grain: its silo and an id unique on that silo."""

    silo: SiloAddress
    activation: int


def grain_hash(grain_id: GrainId) -> int:
    """The grain's position on the ring: the same in every process."""
    return stable_hash32(grain_id.canonical())


def _silo_point(silo: SiloAddress, j: int) -> int:
    return stable_hash32(f"{silo.host}:{silo.port}@{silo.generation}#{j}")


@final
class DirectoryRing:
    """Silos on a 32-bit ring, ``VNODES`` points each."""

    __slots__ = ("_owners", "_positions", "silos")

    def __init__(self, silos: Iterable[SiloAddress]) -> None:
        self.silos = tuple(sorted(set(silos), key=lambda s: (s.host, s.port, s.generation)))
        points = sorted((_silo_point(s, j), s) for s in self.silos for j in range(VNODES))
        # Ties between hashes of different silos are broken by the silo order (sorted above).
        self._positions = [p for p, _ in points]
        self._owners = [s for _, s in points]

    def owner(self, grain_id: GrainId) -> SiloAddress | None:
        """The silo owning ``grain_id``'s entry (None on an empty ring)."""
        if not self._owners:
            return None
        k = bisect_left(self._positions, grain_hash(grain_id))
        return self._owners[k if k < len(self._owners) else 0]


@final
class DirectoryPartition:
    """The entries this silo owns."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: dict[GrainId, DirectoryEntry] = {}

    def register(self, grain_id: GrainId, entry: DirectoryEntry,
                 valid: Callable[[SiloAddress], bool]) -> DirectoryEntry:
        """Register-if-absent: the existing entry if it is still valid, else ``entry``."""
        current = self.entries.get(grain_id)
        if current is not None and current != entry and valid(current.silo):
            return current
        self.entries[grain_id] = entry
        return entry

    def lookup(self, grain_id: GrainId) -> DirectoryEntry | None:
        return self.entries.get(grain_id)

    def unregister(self, grain_id: GrainId, entry: DirectoryEntry) -> bool:
        if self.entries.get(grain_id) == entry:
            del self.entries[grain_id]
            return True
        return False

    def purge(self, keep: Callable[[GrainId, DirectoryEntry], bool]) -> int:
        """Drop every entry for which ``keep`` is false; return how many."""
        drop = [gid for gid, entry in self.entries.items() if not keep(gid, entry)]
        for gid in drop:
            del self.entries[gid]
        return len(drop)

    def __len__(self) -> int:
        return len(self.entries)


@final
class DirectoryCache:
    """grain -> silo for recently looked-up grains; at most ``size`` entries, oldest out."""

    __slots__ = ("_entries", "get", "size")

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size = size
        self._entries: dict[GrainId, SiloAddress] = {}
        #: the silo of ``grain_id``, or None (the table's own lookup: every routed call asks)
        self.get: Callable[[GrainId], SiloAddress | None] = self._entries.get

    def put(self, grain_id: GrainId, silo: SiloAddress) -> None:
        entries = self._entries
        entries.pop(grain_id, None)
        entries[grain_id] = silo
        if len(entries) > self.size:
            del entries[next(iter(entries))]

    def invalidate(self, grain_id: GrainId, silo: SiloAddress | None = None) -> None:
        """Forget ``grain_id`` (only if it points at ``silo``, when given)."""
        if silo is None or self._entries.get(grain_id) == silo:
            self._entries.pop(grain_id, None)

    def drop_silos(self, gone: Callable[[SiloAddress], bool]) -> int:
        drop = [gid for gid, silo in self._entries.items() if gone(silo)]
        for gid in drop:
            del self._entries[gid]
        return len(drop)

    def __len__(self) -> int:
        return len(self._entries)


Request = Callable[[SiloAddress, str, list[Any]], Awaitable[Any]]


def _entry_wire(entry: DirectoryEntry | None) -> list[Any] | None:
    if entry is None:
        return None
    s = entry.silo
    return [s.host, s.port, s.generation, entry.activation]


def _entry_from_wire(value: Any) -> DirectoryEntry | None:
    if value is None:
        return None
    host, port, generation, activation = value
    return DirectoryEntry(SiloAddress(str(host), int(port), int(generation)), int(activation))


@final
class GrainDirectory:
    """This silo's part of the distributed directory: its partition, its cache and the ring.

    Args:
        identity: this silo (its ``address`` is bound once the transport listens).
        request: ``await request(silo, op, args)`` sends a control request (the transport).
        valid: True for a silo whose entries still count (until it is dead: a silo that is
            shutting down keeps serving the grains it hosts until they have deactivated).
    """

    def __init__(self, identity: SiloIdentity, request: Request,
                 valid: Callable[[SiloAddress], bool]) -> None:
        self._identity = identity
        self._request = request
        self._valid = valid
        self.ring = DirectoryRing(())
        self.partition = DirectoryPartition()
        self.cache = DirectoryCache()
        self.remote_operations = 0

    @property
    def me(self) -> SiloAddress:
        return self._identity.address

    def owner(self, grain_id: GrainId) -> SiloAddress:
        return self.ring.owner(grain_id) or self.me

    # -- the caller's side ------------------------------------------------------------------
    async def lookup(self, grain_id: GrainId) -> DirectoryEntry | None:
        return await self.handle("lookup", grain_id, None, 0)

    async def register(self, grain_id: GrainId, entry: DirectoryEntry) -> DirectoryEntry:
        winner = await self.handle("register", grain_id, entry, 0)
        assert winner is not None
        return winner

    async def unregister(self, grain_id: GrainId, entry: DirectoryEntry) -> None:
        await self.handle("unregister", grain_id, entry, 0)

    # -- the owner's side (also the entry point of the control op "dir") ---------------------
    async def handle(self, op: str, grain_id: GrainId, entry: DirectoryEntry | None,
                     hops: int) -> DirectoryEntry | None:
        """Run ``op`` at the owner of ``grain_id`` (here, or forwarded while hops remain)."""
        owner = self.owner(grain_id)
        if owner != self.me and hops <= MAX_HOPS:
            self.remote_operations += 1
            answer = await self._request(
                owner, "dir", [op, grain_id, _entry_wire(entry), hops + 1]
            )
            return _entry_from_wire(answer)
        partition = self.partition
        if op == "lookup":
            found = partition.lookup(grain_id)
            return found if found is not None and self._valid(found.silo) else None
        assert entry is not None
        if op == "register":
            return partition.register(grain_id, entry, self._valid)
        if op == "unregister":
            partition.unregister(grain_id, entry)
            return None
        raise ValueError(f"unknown directory operation {op!r}")

    async def handle_wire(self, op: str, grain_id: GrainId, entry: Any, hops: int) -> Any:
        """The control op ``dir`` as it arrives from another silo."""
        if type(op) is not str or type(grain_id) is not GrainId or type(hops) is not int:
            raise ValueError("a directory operation is [op, grain id, entry, hops]")
        return _entry_wire(await self.handle(op, grain_id, _entry_from_wire(entry), hops))

    # -- membership changes -----------------------------------------------------------------
    def set_silos(
        self, active: Iterable[SiloAddress]
    ) -> tuple[DirectoryRing, list[tuple[GrainId, DirectoryEntry]]]:
        """A new view: rebuild the ring, drop the entries of silos that no longer count, and
        take out the entries another silo owns now (the caller hands them over).

        Returns the previous ring and the entries to hand over.
        """
        previous = self.ring
        ring = self.ring = DirectoryRing(active)
        valid = self._valid
        me = self.me
        moved: list[tuple[GrainId, DirectoryEntry]] = []

        def keep(gid: GrainId, entry: DirectoryEntry) -> bool:
            if not valid(entry.silo):
                return False
            if (ring.owner(gid) or me) != me:
                moved.append((gid, entry))
                return False
            return True

        self.partition.purge(keep)
        self.cache.drop_silos(lambda silo: not valid(silo))
        return previous, moved
