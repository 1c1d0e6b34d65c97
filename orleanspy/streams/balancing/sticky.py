"""StickyAssigner: exact balance with the fewest moves (lease-style; the default).

Rationale. Orleans' ``LeaseBasedQueueBalancer`` converges to this layout: each silo is
responsible for ``floor(Q/S)`` queues, ``Q mod S`` silos for one more; a silo over its
responsibility releases queues, one under it acquires free ones, and a silo keeps every lease
it may keep. Computed here in one pass from the previous assignment:

1. Every queue whose previous owner is still active stays with it for now; the others (the
   owner left, or the queue is new) are free.
2. The ``Q mod S`` extra slots go to the silos holding the most queues (ties: stable hash of
   the name). That choice maximises the queues that can stay, so the number of moves,
   ``(queues with an owner) - sum(min(kept, target))``, is the minimum over every exactly
   balanced assignment (``metrics.minimum_moves`` computes the same bound independently).
3. Silos above target free their surplus (the last of their queues in ``queues`` order).
4. Free queues, in ``queues`` order, fill the silos below target.

O(Q + S log S). The result depends on ``previous``: the runtime must agree on it, which the
lease store provides (a silo's leases are the previous assignment).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import ClassVar, final

from orleanspy.streams.balancing.base import (
    QueueAssigner,
    QueueT,
    build_assignment,
    prepare,
    silo_rank_key,
)

__all__ = ["StickyAssigner"]


@final
class StickyAssigner(QueueAssigner):
    """Keeps every queue it can where it is; exactly balanced; minimal moves."""

    __slots__ = ()

    exactly_balanced: ClassVar[bool] = True
    uses_previous: ClassVar[bool] = True

    @property
    def name(self) -> str:
        return "sticky"

    def assign(
        self,
        queues: Sequence[QueueT],
        silos: Iterable[str],
        previous: Mapping[QueueT, str] | None = None,
    ) -> dict[QueueT, str]:
        names = prepare(queues, silos)
        if not names:
            return {}
        index = {name: i for i, name in enumerate(names)}
        kept: list[list[int]] = [[] for _ in names]
        free: list[int] = []
        if previous:
            get_owner = previous.get
            get_index = index.get
            for pos, queue in enumerate(queues):
                owner = get_owner(queue)
                i = get_index(owner) if owner is not None else None
                if i is None:
                    free.append(pos)
                else:
                    kept[i].append(pos)
        else:
            free = list(range(len(queues)))

        base, extra = divmod(len(queues), len(names))
        ranked = sorted(range(len(names)), key=lambda i: (-len(kept[i]), silo_rank_key(names[i])))
        target = [base] * len(names)
        for i in ranked[:extra]:
            target[i] += 1

        released = False
        for i, mine in enumerate(kept):
            surplus = len(mine) - target[i]
            if surplus > 0:
                free.extend(mine[-surplus:])
                del mine[-surplus:]
                released = True
        if released:
            free.sort()

        owner_of = [-1] * len(queues)
        for i, mine in enumerate(kept):
            for pos in mine:
                owner_of[pos] = i
        it = iter(free)
        for i in ranked:
            for _ in range(target[i] - len(kept[i])):
                owner_of[next(it)] = i
        return build_assignment(queues, names, owner_of)
