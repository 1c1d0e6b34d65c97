"""Queue balancers: which silo's agents own which queues (the cluster issue adds more)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from orleanspy.streams.ids import QueueId

__all__ = ["QueueBalancer", "StaticQueueBalancer"]


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
