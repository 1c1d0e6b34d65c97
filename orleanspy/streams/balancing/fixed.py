"""FixedSplitAssigner: queue i goes to silo ``i mod S`` of the sorted silos (static split).

The rule of ``StaticQueueBalancer(index, count)`` with ``index`` = the silo's place in the
sorted list. Exactly balanced, but it is meant for a silo list that never changes: any join or
leave renumbers the silos and moves most queues (benchmarks/balancers.py, docs/cluster.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import ClassVar, final

from orleanspy.streams.balancing.base import QueueAssigner, QueueT, build_assignment, prepare

__all__ = ["FixedSplitAssigner"]


@final
class FixedSplitAssigner(QueueAssigner):
    """Static round-robin split over the sorted silo names; ignores ``previous``."""

    __slots__ = ()

    exactly_balanced: ClassVar[bool] = True

    @property
    def name(self) -> str:
        return "fixed-split"

    def assign(
        self,
        queues: Sequence[QueueT],
        silos: Iterable[str],
        previous: Mapping[QueueT, str] | None = None,
    ) -> dict[QueueT, str]:
        names = prepare(queues, silos)
        if not names:
            return {}
        count = len(names)
        return build_assignment(queues, names, [i % count for i in range(len(queues))])
