"""Who probes whom: each silo's monitored set, chosen on seeded consistent-hash rings.

Ring ``r`` orders the candidate silos by a stable hash of ``(r, silo)``; on each ring a silo
takes its first successor not chosen yet. With ``n`` rings every silo monitors ``n`` others
and is monitored by about ``n`` others, and the monitoring graph is an expander (Rapid,
ATC'18; Orleans ``ClusterHealthMonitor``) rather than one ring, so a few crashed neighbours
never leave a silo unwatched. Every silo computes the same graph from the same table rows.
"""

from __future__ import annotations

from collections.abc import Iterable

from orleanspy._util.hashing import stable_hash64
from orleanspy.ids import SiloAddress

__all__ = ["monitored_silos"]


def _ring_position(ring: int, silo: SiloAddress) -> tuple[int, str]:
    key = f"{ring}/{silo.host}/{silo.port}/{silo.generation}"
    return (stable_hash64(key), key)


def monitored_silos(
    me: SiloAddress, candidates: Iterable[SiloAddress], count: int
) -> tuple[SiloAddress, ...]:
    """The (at most) ``count`` silos among ``candidates`` that ``me`` probes, in ring order.

    ``me`` is placed on the rings whether or not it is among ``candidates``.
    """
    others = sorted({c for c in candidates if c != me}, key=lambda s: _ring_position(0, s))
    if len(others) <= count:
        return tuple(others)
    chosen: list[SiloAddress] = []
    ring = 0
    while len(chosen) < count:
        members = sorted([me, *others], key=lambda s: _ring_position(ring, s))
        start = members.index(me)
        for step in range(1, len(members)):
            successor = members[(start + step) % len(members)]
            if successor not in chosen:
                chosen.append(successor)
                break
        ring += 1
    return tuple(chosen)
