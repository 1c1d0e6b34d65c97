"""The 32-bit hash ring shared by the consistent-ring and bounded-load assigners.

Silos put ``vnodes`` points on the ring (stable hash of ``"{silo}#{j}"``, as Orleans'
``VirtualBucketsRingProvider`` does with the silo address); queue i of Q sits at
``(2**32 // Q + 1) * i``, the ``HashRingQueueMapper`` / Orleans ``HashRing`` placement. A queue's
natural owner is the silo of the first point at or after the queue's position, wrapping.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import Final

from orleanspy._util.hashing import stable_hash32

__all__ = ["Ring", "check_vnodes"]

_RING_SIZE: Final = 1 << 32


def check_vnodes(cls_name: str, vnodes: int) -> int:
    """Validate a virtual-node count for ``cls_name``.

    Raises:
        ValueError: not an int >= 1.
    """
    if isinstance(vnodes, bool) or not isinstance(vnodes, int) or vnodes < 1:
        raise ValueError(f"{cls_name}.vnodes must be an int >= 1, got {vnodes!r}")
    return vnodes


class Ring:
    """The sorted points of ``silos`` (indices into ``silos``) and the queues' start points.

    Attributes:
        owners: ``owners[k]`` is the silo index of the k-th point in ring order.
        points_of: ``points_of[i]`` lists the point indices of silo i.
    """

    __slots__ = ("owners", "points_of", "positions")

    def __init__(self, silos: Sequence[str], vnodes: int) -> None:
        pts = sorted(
            (stable_hash32(f"{name}#{j}"), i) for i, name in enumerate(silos) for j in range(vnodes)
        )
        self.positions = [p for p, _ in pts]
        self.owners = [i for _, i in pts]
        self.points_of: list[list[int]] = [[] for _ in silos]
        for k, i in enumerate(self.owners):
            self.points_of[i].append(k)

    def start_points(self, queue_count: int) -> list[int]:
        """For each queue index, the index of the first point at or after its position."""
        if queue_count == 0:
            return []
        portion = _RING_SIZE // queue_count + 1 if queue_count > 1 else 0
        positions = self.positions
        n = len(positions)
        starts: list[int] = []
        append = starts.append
        k = 0
        for i in range(queue_count):  # positions ascend: one merge pass, no bisect per queue
            pos = portion * i
            if k < n and positions[k] < pos:
                k = bisect_left(positions, pos, k)
            append(k if k < n else 0)
        return starts
