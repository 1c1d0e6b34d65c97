"""BoundedLoadAssigner: consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam).

Rationale. Plain consistent hashing moves few queues but balances only statistically. The
bounded-load variant, used by Google Pub/Sub's router, caps every silo at
``ceil((1 + epsilon) * Q / S)``: queues are placed one by one in a fixed order (queue order), each
at the first virtual point clockwise from its ring position whose silo is below the cap.
``epsilon`` trades uniformity for stability: a small epsilon binds often and a change cascades
through the overflow chain (the paper's bound is O(1/epsilon^2) moves per update); a large
epsilon rarely binds and behaves like the plain ring. Stateless: recomputed from membership.

Full silos are skipped in O(1) amortised with a "next candidate point" union-find, so a
placement costs O(Q + S * vnodes) whatever epsilon is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import final

from orleanspy.streams.balancing._ring import Ring, check_vnodes
from orleanspy.streams.balancing.base import QueueAssigner, QueueT, build_assignment, prepare

__all__ = ["BoundedLoadAssigner", "load_cap"]


def load_cap(queue_count: int, silo_count: int, epsilon: float) -> int:
    """``ceil((1 + epsilon) * queue_count / silo_count)``, exact for decimal epsilons.

    ``epsilon`` is read as the decimal it prints as (0.05 is 1/20, not the nearest float), so
    the cap at an exact multiple is not pushed up by a rounding error.
    """
    if silo_count < 1:
        raise ValueError(f"silo_count must be >= 1, got {silo_count}")
    return math.ceil((1 + Fraction(repr(float(epsilon)))) * queue_count / silo_count)


@final
class BoundedLoadAssigner(QueueAssigner):
    """No silo holds more than ``ceil((1 + epsilon) * Q / S)`` queues; few moves per change.

    Args:
        epsilon: allowed excess over the average load, >= 0 (0: exact ceiling, most moves).
        vnodes: virtual points per silo; more points, fewer overflows (and moves).

    Raises:
        ValueError: ``epsilon`` < 0 or not finite, or ``vnodes`` < 1.
    """

    __slots__ = ("epsilon", "vnodes")

    def __init__(self, epsilon: float = 0.25, vnodes: int = 100) -> None:
        if isinstance(epsilon, bool) or not isinstance(epsilon, int | float):
            raise ValueError(f"BoundedLoadAssigner.epsilon must be a number, got {epsilon!r}")
        if not math.isfinite(epsilon) or epsilon < 0:
            raise ValueError(f"BoundedLoadAssigner.epsilon must be >= 0, got {epsilon!r}")
        self.epsilon = float(epsilon)
        self.vnodes = check_vnodes("BoundedLoadAssigner", vnodes)

    @property
    def name(self) -> str:
        return f"bounded-{self.epsilon:g}"

    def assign(
        self,
        queues: Sequence[QueueT],
        silos: Iterable[str],
        previous: Mapping[QueueT, str] | None = None,
    ) -> dict[QueueT, str]:
        names = prepare(queues, silos)
        if not names:
            return {}
        cap = load_cap(len(queues), len(names), self.epsilon)
        ring = Ring(names, self.vnodes)
        owners, points_of = ring.owners, ring.points_of
        n = len(owners)
        # nxt[k] == k: point k's silo has room; else follow nxt to a later candidate.
        nxt = list(range(n))
        load = [0] * len(names)
        result: list[int] = []
        append = result.append
        for k in ring.start_points(len(queues)):
            root = k
            while nxt[root] != root:
                root = nxt[root]
            while nxt[k] != root:  # path compression
                nxt[k], k = root, nxt[k]
            silo = owners[root]
            append(silo)
            load[silo] += 1
            if load[silo] == cap:  # full: every point of it now defers to the next point
                for p in points_of[silo]:
                    nxt[p] = p + 1 if p + 1 < n else 0
        return build_assignment(queues, names, result)
