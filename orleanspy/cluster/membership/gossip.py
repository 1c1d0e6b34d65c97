"""tell_peers: after a write, tell every live peer the table's version (best effort).

Gossip only shortens the time until the other silos see a write: each of them reads the
table every ``table_refresh_period`` anyway. So a peer that does not answer within the
probe timeout, or whose transport raises, is logged at debug level and skipped.
"""

from __future__ import annotations

import asyncio
from typing import Any

from orleanspy._util.clock import Clock
from orleanspy.cluster.membership.prober import Gossiper
from orleanspy.cluster.membership.probing import PROBED_STATUSES
from orleanspy.cluster.membership.snapshot import MembershipSnapshot
from orleanspy.ids import SiloAddress

__all__ = ["tell_peers"]


async def tell_peers(
    gossiper: Gossiper,
    me: SiloAddress,
    snapshot: MembershipSnapshot,
    clock: Clock,
    timeout: float,
    log: Any,
) -> None:
    """Send ``snapshot.version`` to every probed silo of ``snapshot`` but ``me``, concurrently,
    each within ``timeout`` seconds."""
    peers = [s for s in snapshot.silos(*PROBED_STATUSES) if s != me]

    async def tell(peer: SiloAddress) -> None:
        try:
            async with clock.timeout(timeout):
                await gossiper.gossip(peer, snapshot.version)
        except Exception as exc:
            log.debug("membership_gossip_failed", target=str(peer), error=repr(exc))

    await asyncio.gather(*(tell(peer) for peer in peers))
