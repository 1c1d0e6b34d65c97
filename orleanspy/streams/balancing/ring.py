"""ConsistentRingAssigner: Orleans' default ``ConsistentRingQueueBalancer`` (static, stateless).

Each silo owns the queues whose ring position falls in ``(previous point, its point]`` of its
``vnodes`` virtual points (30 in Orleans). A join or leave moves only the queues of the arcs that
change hands, but balance is statistical: arc lengths vary by about ``1/sqrt(vnodes)``, so with
few queues a silo is often idle (8 queues on 4 silos: about a third of layouts) and at 100,000
queues the busiest of 1,000 silos holds about 1.7x the average. Kept for Orleans parity.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import final

from orleanspy.streams.balancing._ring import Ring, check_vnodes
from orleanspy.streams.balancing.base import QueueAssigner, QueueT, build_assignment, prepare

__all__ = ["ConsistentRingAssigner"]


@final
class ConsistentRingAssigner(QueueAssigner):
    """Each queue goes to the silo of the first virtual point at or after it on the ring.

    Args:
        vnodes: virtual points per silo (Orleans' ``NumVirtualBucketsConsistentRing``: 30).

    Raises:
        ValueError: ``vnodes`` is not an int >= 1.
    """

    __slots__ = ("vnodes",)

    def __init__(self, vnodes: int = 30) -> None:
        self.vnodes = check_vnodes("ConsistentRingAssigner", vnodes)

    @property
    def name(self) -> str:
        return f"ring-{self.vnodes}"

    def assign(
        self,
        queues: Sequence[QueueT],
        silos: Iterable[str],
        previous: Mapping[QueueT, str] | None = None,
    ) -> dict[QueueT, str]:
        names = prepare(queues, silos)
        if not names:
            return {}
        ring = Ring(names, self.vnodes)
        owners = ring.owners
        return build_assignment(queues, names, [owners[k] for k in ring.start_points(len(queues))])
