"""Queue balancers: which silo's agents own which queues.

The algorithms live in ``orleanspy.streams.balancing`` (pure functions of queues, active silos
and the previous assignment); ``AssignedQueueBalancer`` applies one of them to the membership
view the runtime hands it. ``StaticQueueBalancer`` is the fixed split for one silo or a fixed
deployment. ``LeaseQueueBalancer`` is the runtime balancer of a clustered silo: the assigner's
target over the active silos, with exclusive ownership through leases
(``orleanspy.streams.leases``); the stream provider drives it on membership changes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import final

from orleanspy.streams.balancing import DEFAULT_ASSIGNER, QueueAssigner
from orleanspy.streams.ids import QueueId
from orleanspy.streams.leases import QueueLeaseStore

__all__ = [
    "AssignedQueueBalancer",
    "LeaseQueueBalancer",
    "QueueBalancer",
    "StaticQueueBalancer",
]


class QueueBalancer(ABC):
    """Decides the queues this silo's pulling agents own.

    Guarantees: ``my_queues`` is a subset of ``all_queues``; across the silos of a cluster
    every queue is owned by exactly one silo once the balancer has settled.
    """

    __slots__ = ()

    @abstractmethod
    def my_queues(self, all_queues: Sequence[QueueId], silo: str) -> list[QueueId]: ...


class StaticQueueBalancer(QueueBalancer):
    """A fixed split: silo ``index`` of ``count`` owns every ``count``-th queue.

    With the defaults (one silo) it owns every queue.
    """

    __slots__ = ("count", "index")

    def __init__(self, index: int = 0, count: int = 1) -> None:
        if count < 1 or not 0 <= index < count:
            raise ValueError(
                f"StaticQueueBalancer(index={index}, count={count}): need 0 <= index < count"
            )
        self.index = index
        self.count = count

    def my_queues(self, all_queues: Sequence[QueueId], silo: str) -> list[QueueId]:
        return [q for i, q in enumerate(all_queues) if i % self.count == self.index]


@final
class AssignedQueueBalancer(QueueBalancer):
    """Applies a ``QueueAssigner`` (default: the sticky one) to the active silos.

    The runtime calls ``set_active_silos`` on a membership change (after its settling time)
    and, for an assigner that ``uses_previous``, may call ``set_assignment`` with the agreed
    assignment (the leases); otherwise the last computed assignment is the previous one.
    Before any membership is known the asking silo is taken to be alone.

    Args:
        assigner: the algorithm; ``orleanspy.streams.balancing.DEFAULT_ASSIGNER`` if omitted.
        silos: the active silos known so far.
    """

    __slots__ = ("_assigner", "_assignment", "_key", "_silos")

    def __init__(self, assigner: QueueAssigner | None = None, silos: Iterable[str] = ()) -> None:
        self._assigner = assigner or DEFAULT_ASSIGNER
        self._silos: frozenset[str] = frozenset(silos)
        self._assignment: dict[QueueId, str] = {}
        self._key: tuple[tuple[QueueId, ...], frozenset[str]] | None = None

    @property
    def assigner(self) -> QueueAssigner:
        return self._assigner

    def assignment(self) -> dict[QueueId, str]:
        """The last computed assignment (a copy): queue -> silo."""
        return dict(self._assignment)

    def set_active_silos(self, silos: Iterable[str]) -> None:
        """Membership changed: the next ``my_queues`` recomputes over ``silos``."""
        self._silos = frozenset(silos)

    def set_assignment(self, assignment: Mapping[QueueId, str]) -> None:
        """Adopt an agreed assignment (e.g. read from the lease store) as the previous one."""
        self._assignment = dict(assignment)
        self._key = None

    def my_queues(self, all_queues: Sequence[QueueId], silo: str) -> list[QueueId]:
        silos = self._silos or frozenset((silo,))
        key = (tuple(all_queues), silos)
        if key != self._key:
            self._assignment = self._assigner.assign(all_queues, silos, self._assignment)
            self._key = key
        owner = self._assignment.get
        return [q for q in all_queues if owner(q) == silo]


@final
class LeaseQueueBalancer(QueueBalancer):
    """Lease-based balancing for a clustered silo (the default when the silo has membership).

    ``plan`` computes this silo's target queues with the assigner (default: the sticky one)
    over the active silos, with the current leases as the previous assignment (leases of
    silos that are no longer active do not count), so every silo computes the same layout
    from the same table. The provider then gives up (agent stopped first, then ``release``)
    the queues outside the target and acquires the ones inside: a queue still leased
    to another silo (which is handing it off) is retried until that silo releases it, or
    until membership declares that silo dead. Leases are renewed while held.

    Args:
        assigner: the algorithm; ``DEFAULT_ASSIGNER`` (sticky) if omitted. It must be exactly
            balanced for the ⌊Q/S⌋/⌈Q/S⌉ guarantee (sticky and even split are).
        store: the lease store; the provider supplies the cluster's
            (``ClusterRuntime.lease_store()``) if omitted.
    """

    __slots__ = ("_assigner", "_target", "settled", "store")

    def __init__(
        self, assigner: QueueAssigner | None = None, store: QueueLeaseStore | None = None
    ) -> None:
        self._assigner = assigner or DEFAULT_ASSIGNER
        self.store = store
        self._target: dict[str, list[QueueId]] = {}
        self.settled = False  # did the leases read by the last plan match its layout?

    @property
    def assigner(self) -> QueueAssigner:
        return self._assigner

    def _store(self) -> QueueLeaseStore:
        if self.store is None:
            raise RuntimeError("LeaseQueueBalancer has no lease store (the silo is not clustered)")
        return self.store

    def my_queues(self, all_queues: Sequence[QueueId], silo: str) -> list[QueueId]:
        """The target computed by the last ``plan`` for ``silo`` (empty before any)."""
        return list(self._target.get(silo, []))

    async def plan(
        self, all_queues: Sequence[QueueId], silo: str, active: Iterable[str]
    ) -> list[QueueId]:
        """Read the leases and return ``silo``'s target queues (in ``all_queues`` order)."""
        silos = set(active)
        leases = await self._store().read_all()
        by_text = {str(q): q for q in all_queues}
        previous = {
            by_text[name]: lease.owner for name, lease in leases.items()
            if name in by_text and lease.owner in silos
        }
        assignment = self._assigner.assign(all_queues, silos, previous)
        # Until every lease is held by its queue's owner in this layout, some silo still has
        # to give up or take a queue: the provider keeps planning (a silo that planned before
        # another released a queue would otherwise learn of it only at its next renewal).
        self.settled = all(
            (lease := leases.get(str(q))) is not None and lease.owner == owner
            for q, owner in assignment.items()
        )
        target = [q for q in all_queues if assignment.get(q) == silo]
        self._target = {silo: target}
        return target

    async def acquire(
        self, queue: QueueId, silo: str, duration: float, dead: Collection[str] = ()
    ) -> bool:
        return await self._store().acquire(str(queue), silo, duration, dead)

    async def renew(
        self, queues: Iterable[QueueId], silo: str, duration: float
    ) -> list[QueueId]:
        """Renew ``silo``'s leases on ``queues``; return the ones it no longer holds."""
        wanted = list(queues)
        kept = await self._store().renew(silo, [str(q) for q in wanted], duration)
        return [q for q in wanted if str(q) not in kept]

    async def release(self, queues: Iterable[QueueId], silo: str) -> None:
        await self._store().release(silo, [str(q) for q in queues])

    async def close(self) -> None:
        if self.store is not None:
            await self.store.close()
