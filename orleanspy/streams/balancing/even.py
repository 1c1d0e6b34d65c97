"""EvenSplitAssigner: exact balance from the membership alone (the dynamic balancer's algorithm).

Rationale. The dynamic balancer recomputes the layout on every membership change (after a
settling time, which is the runtime's job), from the active silos only: no stored state, so
every silo computes the same layout from its membership view. Recomputing "sorted blocks" or
round-robin from scratch moves 35-60% of all queues per change; rendezvous hashing with exact
capacities moves few but costs O(Q*S) (minutes at 100,000 queues x 1,000 silos in Python).

This is Maglev's table population (Eisenbud et al., NSDI 2016) with the queues as the table:
each silo walks its own stable pseudo-random permutation of the queue indices
(``offset + j*skip mod Q``, ``skip`` coprime to Q) and the silos take turns, in a stable
pseudo-random turn order, each claiming its next unclaimed queue. Turns make the loads exact
(the first ``Q mod S`` silos in turn order hold one more); a silo's permutation does not
depend on the other silos, so a join or leave disturbs only part of the layout. Cost: about
``Q * ln Q`` probes. The price of statelessness is extra moves, growing as Q/S shrinks.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import ClassVar, final

from orleanspy._util.hashing import stable_hash64
from orleanspy.streams.balancing.base import (
    QueueAssigner,
    QueueT,
    build_assignment,
    prepare,
    silo_rank_key,
)

__all__ = ["EvenSplitAssigner"]


def _permutation(name: str, count: int) -> tuple[int, int]:
    """(offset, skip) of ``name``'s permutation of ``range(count)``; skip is coprime to count."""
    h = stable_hash64("even:" + name)
    offset = h % count
    if count == 1:
        return offset, 1
    skip = 1 + (h >> 32) % (count - 1)
    while math.gcd(skip, count) != 1:
        skip = skip + 1 if skip + 1 < count else 1
    return offset, skip


@final
class EvenSplitAssigner(QueueAssigner):
    """Stateless and exactly balanced: Maglev-style turns over per-silo permutations."""

    __slots__ = ()

    exactly_balanced: ClassVar[bool] = True

    @property
    def name(self) -> str:
        return "even-split"

    def assign(
        self,
        queues: Sequence[QueueT],
        silos: Iterable[str],
        previous: Mapping[QueueT, str] | None = None,
    ) -> dict[QueueT, str]:
        names = sorted(prepare(queues, silos), key=silo_rank_key)  # the turn order
        count = len(queues)
        if not names or not count:
            return {}
        perms = [_permutation(n, count) for n in names]
        cursor = [offset for offset, _ in perms]
        skips = [skip for _, skip in perms]
        owner = [-1] * count
        filled = 0
        turns = range(len(names))
        while filled < count:
            for i in turns:
                pos = cursor[i]
                if owner[pos] != -1:
                    skip = skips[i]
                    while owner[pos] != -1:
                        pos += skip
                        if pos >= count:
                            pos -= count
                owner[pos] = i
                cursor[i] = pos
                filled += 1
                if filled == count:
                    break
        return build_assignment(queues, names, owner)
